#!/usr/bin/python3
"""Turns the runs of bench/regime.sh into bench/results/regime[_quick].md
and .json: for each vanilla epoch, the state and gradient bytes a worker
moves per optimizer step and the shares of its training time spent in state
sync, the gradient all-reduce and compute.

Run names: <dataset>-<model>-<rate>-s1-w2-vanilla:b<batch>:m<memory>.

Two views of the split: the mean over workers, and the critical worker, the
one that waited least in the all-reduce. The all-reduce of the others also
holds their wait for it, so the epoch is the critical worker's time, and its
all-reduce is closest to the transfer alone.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deptgl_report import (critical_worker, fmt, load,  # noqa: E402
                           machine, report_parser)

REGIME = 0.60  # state sync share that makes the papers' regime
COMPUTE = ("preparation", "forward", "backward", "memory_management")


def figures(row):
    s = row["summary"]
    workers = s.get("per_worker") or []
    steps = sum(e.get("steps", 0) for e in s["epochs"])
    train_s = sum(e["seconds"] for e in s["epochs"])

    def shares(w):
        t = w.get("train_seconds") or train_s
        compute = sum((w.get("time_seconds") or {}).get(k, 0) for k in COMPUTE)
        return {"state_sync": w.get("seconds", 0) / t,
                "allreduce": w.get("allreduce_seconds", 0) / t,
                "compute": compute / t}

    per = [shares(w) for w in workers]
    n = max(1, len(per))
    mean = {k: sum(p[k] for p in per) / n
            for k in ("state_sync", "allreduce", "compute")}
    crit = workers.index(critical_worker(s))
    state_b = sum(w.get("bytes_pulled", 0) + w.get("bytes_pushed", 0)
                  for w in workers) / n
    grad_b = sum(w.get("allreduce_bytes", 0) for w in workers) / n
    c = s["config"]
    return {
        "name": row["name"], "dataset": row["dataset"], "model": row["model"],
        "rate": row["rate"], "batch": c.get("batch_size"),
        "memory_dim": c.get("memory_dim"), "steps": steps,
        "grad_comm": c.get("grad_comm", "fp32"),
        "train_s": train_s,
        "state_kb_per_step": state_b / steps / 1e3 if steps else None,
        "grad_kb_per_step": grad_b / steps / 1e3 if steps else None,
        "state_over_grad": state_b / grad_b if grad_b else None,
        "mean": mean, "critical": per[crit], "critical_rank": crit,
        "in_regime": per[crit]["state_sync"] >= REGIME,
    }


def rate_bits(rate):
    """Bits per second of a tc rate such as 20mbit or 1gbit."""
    for unit, mult in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if rate.endswith(unit):
            return float(rate[:-len(unit)]) * mult
    return float(rate.rstrip("bit") or 0)


def pct(x):
    return f"{100 * x:.0f}%"


def main():
    ap = report_parser("bench/regime.sh")
    args = ap.parse_args()
    loaded = load(args.runs)
    rows = [r for r in loaded if "summary" in r and "dataset" in r]
    bad = [r["name"] for r in loaded if "summary" not in r]
    figs = sorted((figures(r) for r in rows),
                  key=lambda f: (f["dataset"], f["model"], f["memory_dim"],
                                 f["batch"], rate_bits(f["rate"]),
                                 f["grad_comm"] != "fp32"))
    m = machine()
    out = {"benchmark": "regime", "command": args.command,
           "run_seconds": args.seconds, "machine": m, "regime": REGIME,
           "runs": figs, "failed": bad}
    md = ["# What puts vanilla's epoch in the state-sync-bound regime\n",
          f"`{args.command}` on {m['cpu']} ({m['nproc']} CPUs"
          f"{', ' + m['isa'] if m.get('isa') else ''}); the sweep took "
          f"{args.seconds / 60:.0f} min. Vanilla, one epoch, seed 1, the "
          "first 30,000 events, 2 trainers pinned one per CPU with one "
          "thread in deploy/netns/run.sh (tbf at the stated rate, no added "
          "delay; memory stores and coordinator unpinned on the same 2 "
          "CPUs). Each run changes one thing from bench/converge.sh's "
          "setting (20 Mbit/s, global batch 600, node memory 100).\n",
          "*state / gradient KB per step*: bytes one worker pulls and pushes "
          "to the memory stores, and hands to the gradient all-reduce, per "
          "optimizer step. Shares of the worker's training time (evaluation "
          "excluded): the mean over workers, and the *critical* worker, the "
          "one that waited least in the all-reduce (the others' all-reduce "
          "also holds their wait for it; the epoch is its time). "
          f"*regime*: the critical worker's state sync >= {pct(REGIME)}.\n",
          "*gradients*: the type the all-reduce sends (`--grad-comm`).\n",
          "| data | model | rate | batch | memory | gradients | steps | "
          "state KB/step | "
          "gradient KB/step | state / gradient bytes | train s | state sync: "
          "mean, critical | all-reduce: mean, critical | compute: mean, "
          "critical | regime |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for f in figs:
        md.append(
            f"| {f['dataset']} | {f['model']} | {f['rate']} | {f['batch']} | "
            f"{f['memory_dim']} | {f['grad_comm']} | {f['steps']} | "
            f"{fmt(f['state_kb_per_step'], 0)} | "
            f"{fmt(f['grad_kb_per_step'], 0)} | "
            f"{fmt(f['state_over_grad'], 2)} | {fmt(f['train_s'], 1)} | "
            f"{pct(f['mean']['state_sync'])}, "
            f"{pct(f['critical']['state_sync'])} | "
            f"{pct(f['mean']['allreduce'])}, "
            f"{pct(f['critical']['allreduce'])} | "
            f"{pct(f['mean']['compute'])}, {pct(f['critical']['compute'])} | "
            f"{'yes' if f['in_regime'] else 'no'} |")
    md.append("")
    if bad:
        md.append(f"Runs without a summary (see their logs): "
                  f"{', '.join(bad)}.\n")
    os.makedirs(args.out, exist_ok=True)
    name = "regime" if args.mode == "default" else f"regime_{args.mode}"
    with open(os.path.join(args.out, name + ".md"), "w") as fh:
        fh.write("\n".join(md))
    with open(os.path.join(args.out, name + ".json"), "w") as fh:
        json.dump(out, fh, indent=1)
    print(f"wrote {args.out}/{name}.md and .json")


if __name__ == "__main__":
    main()
