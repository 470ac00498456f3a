#!/usr/bin/env python3
"""Soak test of mnemo's failure handling.

Each round launches `mnemo train --workers 2` (default timeouts), waits until
it trains, then kills (SIGKILL) or freezes (SIGSTOP) one of its processes at
random: a memory-store shard, the coordinator or a trainer. The round passes
when the launcher exits non-zero within 30 s of the fault and no process of
the job is left. Prints one line per round and a summary; exits 1 if any
round failed.

  tests/soak/soak.py --rounds 30            # the full soak (scripts/soak)
  tests/soak/soak.py --rounds 3             # the CI-sized variant (ctest)
"""
import argparse
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


def one_round(args, rng, n):
    work = tempfile.mkdtemp(prefix=f"mnemo-soak-{n}-")
    out = os.path.join(work, "out")
    log_path = os.path.join(work, "launcher.log")
    cmd = [args.mnemo, "train", "--workers", "2", "--data", args.data,
           "--epochs", "50", "--progress", "lines", "--out", out]
    if args.data_dir:
        cmd += ["--data-dir", args.data_dir]
    with open(log_path, "w") as log:
        launcher = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)

    def log_text():
        with open(log_path, errors="replace") as f:
            return f.read()

    result = {"round": n, "ok": False}
    children = {}
    try:
        if not wait_for(lambda: "epoch 1/50" in log_text(), 180):
            result["error"] = "the job did not start training:\n" + log_text()
            return result
        # The launcher's children: 2 shards, the coordinator, 2 trainers.
        children = {pid: cmd for pid, cmd in children_of(launcher.pid).items()
                    if role_of(cmd)}
        victim = rng.choice(sorted(children))
        role = role_of(children[victim])
        action = rng.choice(["kill", "freeze"])
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
        leftovers.update({pid: children[pid] for pid in alive(children)})
        if code is None:
            result["error"] = f"the job did not end within {LIMIT_S + 30} s"
        elif code == 0:
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


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--seed", type=int, default=None,
                   help="random seed (default: time; printed)")
    p.add_argument("--mnemo", default=os.environ.get("MNEMO_BIN", "mnemo"))
    p.add_argument("--data", default="collegemsg")
    p.add_argument("--data-dir", default=os.environ.get("MNEMO_SHARED_DATA"))
    args = p.parse_args()
    seed = args.seed if args.seed is not None else int(time.time())
    rng = random.Random(seed)
    print(f"soak: {args.rounds} rounds, seed {seed}, limit {LIMIT_S} s",
          flush=True)
    results = []
    for n in range(1, args.rounds + 1):
        r = one_round(args, rng, n)
        results.append(r)
        status = "ok" if r["ok"] else "FAILED"
        print(f"round {n}: {r.get('action', '-')} {r.get('role', '-')}: "
              f"job ended in {r.get('seconds', '-')} s, exit code "
              f"{r.get('exit_code', '-')}: {status}", flush=True)
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
