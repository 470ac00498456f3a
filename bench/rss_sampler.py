#!/usr/bin/env python3
"""Runs a command and samples the resident memory of its process tree.

Usage: bench/rss_sampler.py OUT_JSON -- COMMAND [ARGS...]

Every 0.2 s (or longer: it keeps itself under 5% of one CPU, waiting 19
times the CPU time of a sample between samples, since the PSS of a process
of several GB costs the kernel a walk of its page tables) it reads the
resident memory of the command and all its descendants from /proc: each process's RSS (VmRSS, what `ps` shows) and
PSS (smaps_rollup: its shared pages, such as the shared libraries every
mnemo role maps, divided among the processes that share them). It keeps
the largest PSS sum over the tree (what the machine must hold at once)
and the largest RSS and PSS of each process, named by its role (the first
arguments after `mnemo`, e.g. "trainer --rank 1" or "memstore --shard-id
0"). It also keeps each process's largest anonymous resident memory
(RssAnon: its heap and stacks, which only swap could free) and the largest
sum of it over the tree; the rest of RSS is file pages (shared libraries,
memory-mapped RocksDB files) that the kernel can drop and read again.
Writes OUT_JSON and exits with the command's status. While the command
runs it rewrites OUT_JSON every 10 s with the peaks so far ("running":
true, no exit code), so that a run stopped before its end (a machine's
time limit, a killed job) still tells what it held up to then; SIGTERM or
SIGINT to the sampler is passed on to the command.
"""
import json
import os
import signal
import subprocess
import sys
import time


def children():
    """Maps each pid to its parent's, for every process now."""
    parent = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
            # The command name may hold spaces: the fields after ")".
            parent[int(d)] = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            pass
    return parent


def proc_bytes(pid, name, key):
    """The value of `key` (in kB) in /proc/PID/NAME, in bytes; 0 if gone."""
    try:
        with open(f"/proc/{pid}/{name}") as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def role(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().split(b"\0")
    except OSError:
        return None
    args = [a.decode(errors="replace") for a in args if a]
    if not args or not os.path.basename(args[0]).startswith("mnemo"):
        return None
    name = args[1] if len(args) > 1 else "mnemo"
    for flag in ("--rank", "--shard-id"):
        if flag in args:
            i = args.index(flag)
            if i + 1 < len(args):
                name += f" {flag} {args[i + 1]}"
    return name


def main():
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        print(__doc__, file=sys.stderr)
        return 2
    out = sys.argv[1]
    proc = subprocess.Popen(sys.argv[3:])
    # The command ends as the sampler is told to; the loop then writes.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda s, _: proc.send_signal(s))
    peak_total, peak, peak_pss = 0, {}, {}
    peak_anon_total, peak_anon = 0, {}
    start = time.monotonic()
    last_write = start

    def write(running):
        tmp = out + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"command": sys.argv[3:], "running": running,
                       "exit_code": None if running else proc.returncode,
                       "seconds": time.monotonic() - start,
                       "peak_pss_total_bytes": peak_total,
                       "peak_rss_bytes": dict(sorted(peak.items())),
                       "peak_pss_bytes": dict(sorted(peak_pss.items())),
                       "peak_anon_total_bytes": peak_anon_total,
                       "peak_anon_bytes": dict(sorted(peak_anon.items()))},
                      f, indent=1)
        os.replace(tmp, out)

    while proc.poll() is None:
        cpu_start = time.process_time()
        parent = children()
        tree, frontier = {proc.pid}, [proc.pid]
        while frontier:
            p = frontier.pop()
            for c, pp in parent.items():
                if pp == p and c not in tree:
                    tree.add(c)
                    frontier.append(c)
        total = anon_total = 0
        for p in tree:
            r = proc_bytes(p, "status", "VmRSS:")
            a = proc_bytes(p, "status", "RssAnon:")
            q = proc_bytes(p, "smaps_rollup", "Pss:")
            total += q
            anon_total += a
            name = role(p)
            if name is not None:
                peak[name] = max(peak.get(name, 0), r)
                peak_pss[name] = max(peak_pss.get(name, 0), q)
                peak_anon[name] = max(peak_anon.get(name, 0), a)
        peak_total = max(peak_total, total)
        peak_anon_total = max(peak_anon_total, anon_total)
        if time.monotonic() - last_write >= 10:
            write(running=True)
            last_write = time.monotonic()
        time.sleep(max(0.2, 19 * (time.process_time() - cpu_start)))
    write(running=False)
    # A command ended by signal N exits as a shell reports it: 128 + N.
    return 128 - proc.returncode if proc.returncode < 0 else proc.returncode


if __name__ == "__main__":
    sys.exit(main())
