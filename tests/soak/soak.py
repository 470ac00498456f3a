#!/usr/bin/env python3
"""Soak test of mnemo's failure handling.

Each round launches `mnemo train --workers 2` (default timeouts) and kills
(SIGKILL) or freezes (SIGSTOP) one of its processes at random: a
memory-store shard, the coordinator or a trainer, in one of three phases:

  startup     as soon as the victim's process exists (plus 0-1.5 s): while
              the data loads, the shards open, the workers join
  training    once the job trains (after epoch 1)
  checkpoint  the moment the ranks start writing an epoch's checkpoint

The round passes when the launcher exits non-zero within 30 s of the fault
and no process of the job is left. With --resume-check the round then
resumes the job (`--resume`; a fresh run where no complete checkpoint was
written yet) and checks it ends equal to an uninterrupted run: the same
parameter checksum and test AP. Prints one line per round and a summary;
exits 1 if any round failed.

  tests/soak/soak.py --rounds 50 --resume-check   # the full soak (scripts/soak)
  tests/soak/soak.py --rounds 3                   # the CI-sized variant (ctest)
"""
import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

LIMIT_S = 30


def processes_mentioning(text):
    """pid -> command line of the processes whose command line has text."""
    found = {}
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmd:
            found[int(name)] = cmd
    return found


def children_of(parent):
    """pid -> command line of the processes whose parent is `parent`."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
            # The command name is in parentheses and may hold spaces.
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
            if ppid != parent:
                continue
            with open(f"/proc/{name}/cmdline", "rb") as f:
                found[int(name)] = f.read().replace(b"\0", b" ").decode(
                    errors="replace")
        except (OSError, ValueError, IndexError):
            continue
    return found


def alive(pids):
    """The pids of `pids` that still exist (zombies excluded)."""
    left = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            if stat[stat.rindex(")") + 2] != "Z":
                left.append(pid)
        except OSError:
            pass
    return left


def role_of(cmd):
    for role in ("memstore", "coordinator", "trainer"):
        if f" {role} " in cmd:
            return role
    return None


def wait_for(predicate, seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


ROLES = ("memstore", "coordinator", "trainer")
PHASES = ("startup", "training", "checkpoint")


def job_command(args, *extra):
    cmd = [args.mnemo, "train", "--workers", "2", "--data", args.data,
           "--epochs", str(args.epochs), "--progress", "lines"]
    if args.data_dir:
        cmd += ["--data-dir", args.data_dir]
    return cmd + list(extra)


def finished_run(args, extra, log_path, timeout):
    """Runs a job to its end: (exit code, log text)."""
    with open(log_path, "w") as log:
        p = subprocess.run(job_command(args, *extra), stdout=log,
                           stderr=subprocess.STDOUT, timeout=timeout)
    with open(log_path, errors="replace") as f:
        return p.returncode, f.read()


def outcome(out):
    """What an uninterrupted run must match: checksum and test AP."""
    with open(os.path.join(out, "summary.json")) as f:
        s = json.load(f)
    return {"parameter_checksum": s["parameter_checksum"],
            "test_ap": round(s["test"]["ap"], 6)}


def one_round(args, rng, n, reference):
    work = tempfile.mkdtemp(prefix=f"mnemo-soak-{n}-")
    out = os.path.join(work, "out")
    log_path = os.path.join(work, "launcher.log")
    phase = rng.choice(args.phases)
    with open(log_path, "w") as log:
        launcher = subprocess.Popen(job_command(args, "--out", out),
                                    stdout=log, stderr=subprocess.STDOUT)

    def log_text():
        with open(log_path, errors="replace") as f:
            return f.read()

    result = {"round": n, "ok": False, "phase": phase}
    children = {}
    try:
        role = rng.choice(ROLES)
        action = rng.choice(["kill", "freeze"])
        if phase == "startup":
            def victim_started():
                for pid, cmd in children_of(launcher.pid).items():
                    if role_of(cmd) == role:
                        return pid
                return None
            if not wait_for(lambda: victim_started() is not None or
                            launcher.poll() is not None, 60):
                result["error"] = "no " + role + " started:\n" + log_text()
                return result
            victim = victim_started()
            if victim is None:
                result["error"] = "the job ended before the fault:\n" + \
                    log_text()
                return result
            time.sleep(rng.uniform(0, 1.5))
        else:
            if not wait_for(lambda: "epoch 1/" in log_text(), 180):
                result["error"] = "the job did not start training:\n" + \
                    log_text()
                return result
            if phase == "checkpoint":
                # Epoch 2's set: its directory appears when the first rank
                # starts writing its file.
                second = os.path.join(out, "checkpoints", "epoch-0002")
                if not wait_for(lambda: os.path.isdir(second), 180):
                    result["error"] = "no second checkpoint:\n" + log_text()
                    return result
            children = {pid: cmd for pid, cmd in
                        children_of(launcher.pid).items() if role_of(cmd)}
            victim = rng.choice(sorted(pid for pid, cmd in children.items()
                                       if role_of(cmd) == role))
        children = {pid: cmd for pid, cmd in children_of(launcher.pid).items()
                    if role_of(cmd)}
        result.update(role=role, action=action)
        os.kill(victim, signal.SIGKILL if action == "kill" else signal.SIGSTOP)
        t0 = time.monotonic()
        try:
            code = launcher.wait(timeout=LIMIT_S + 30)
        except subprocess.TimeoutExpired:
            code = None
        took = time.monotonic() - t0
        result.update(seconds=round(took, 1), exit_code=code)
        if action == "freeze":
            try:
                os.kill(victim, signal.SIGCONT)
            except ProcessLookupError:
                pass
        left = wait_for(lambda: not processes_mentioning(out) and
                        not alive(children), 10)
        leftovers = processes_mentioning(out)
        leftovers.update({pid: children[pid] for pid in alive(children)
                          if pid in children})
        if code is None:
            result["error"] = f"the job did not end within {LIMIT_S + 30} s"
        elif code == 0:
            # A fault at start-up can come after the job finished (a tiny
            # job): only a job that ended by itself before the fault passes.
            result["error"] = "the job exited 0 after a fault"
        elif took > LIMIT_S:
            result["error"] = f"the job took {took:.1f} s (> {LIMIT_S} s)"
        elif not left:
            result["error"] = "processes left: " + "; ".join(
                leftovers.values())
        else:
            result["ok"] = True
        if not result["ok"]:
            result["error"] += "\n--- launcher log tail ---\n" + \
                log_text()[-3000:]
            return result
        if reference is not None:
            check_resume(args, result, work, out, reference)
        return result
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
        for pid in list(processes_mentioning(out)) + alive(children):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(work, ignore_errors=True)


def check_resume(args, result, work, out, reference):
    """Resumes the faulted job (a fresh run into the same --out where no
    checkpoint was complete) and compares it with the uninterrupted run."""
    log = os.path.join(work, "resume.log")
    code, text = finished_run(args, ["--resume", out], log, 900)
    how = "resumed"
    if code == 2 and "no checkpoint to resume from" in text:
        how = "fresh"
        code, text = finished_run(args, ["--out", out], log, 900)
    result["resume"] = how
    if code != 0:
        result["ok"] = False
        result["error"] = f"the {how} run exited {code}:\n" + text[-3000:]
        return
    got = outcome(out)
    if got != reference:
        result["ok"] = False
        result["error"] = (f"the {how} run differs from the uninterrupted "
                           f"one: {got} != {reference}")


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--seed", type=int, default=None,
                   help="random seed (default: time; printed)")
    p.add_argument("--mnemo", default=os.environ.get("MNEMO_BIN", "mnemo"))
    p.add_argument("--data", default="collegemsg")
    p.add_argument("--data-dir", default=os.environ.get("MNEMO_SHARED_DATA"))
    p.add_argument("--epochs", type=int, default=50,
                   help="epochs of each job (with --resume-check, 3 is "
                   "enough: a fault lands in epoch 1-2)")
    p.add_argument("--phases", default=",".join(PHASES),
                   help="when faults strike, chosen at random per round: "
                   "startup, training, checkpoint")
    p.add_argument("--resume-check", action="store_true",
                   help="after each fault, resume the job and compare it "
                   "with an uninterrupted run")
    args = p.parse_args()
    args.phases = [x for x in args.phases.split(",") if x]
    for x in args.phases:
        if x not in PHASES:
            p.error(f"--phases: unknown phase {x!r} (want {', '.join(PHASES)})")
    seed = args.seed if args.seed is not None else int(time.time())
    rng = random.Random(seed)
    print(f"soak: {args.rounds} rounds, seed {seed}, limit {LIMIT_S} s, "
          f"phases {','.join(args.phases)}, epochs {args.epochs}"
          f"{', resume check' if args.resume_check else ''}", flush=True)
    reference = None
    if args.resume_check:
        work = tempfile.mkdtemp(prefix="mnemo-soak-reference-")
        try:
            out = os.path.join(work, "out")
            code, text = finished_run(args, ["--out", out],
                                      os.path.join(work, "log"), 900)
            if code != 0:
                print("the uninterrupted run failed:\n" + text[-3000:])
                return 1
            reference = outcome(out)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        print(f"uninterrupted run: {reference}", flush=True)
    results = []
    for n in range(1, args.rounds + 1):
        r = one_round(args, rng, n, reference)
        results.append(r)
        status = "ok" if r["ok"] else "FAILED"
        resumed = f", {r['resume']} run equal" if r.get("resume") and \
            r["ok"] else ""
        print(f"round {n}: {r.get('phase', '-')}: {r.get('action', '-')} "
              f"{r.get('role', '-')}: job ended in {r.get('seconds', '-')} s, "
              f"exit code {r.get('exit_code', '-')}{resumed}: {status}",
              flush=True)
        if not r["ok"]:
            print(r.get("error", ""), flush=True)
    failed = [r for r in results if not r["ok"]]
    times = [r["seconds"] for r in results if "seconds" in r]
    if times:
        print(f"soak: {len(results) - len(failed)}/{len(results)} rounds ok; "
              f"job end after the fault: max {max(times)} s, "
              f"mean {sum(times) / len(times):.1f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
