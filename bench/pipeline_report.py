#!/usr/bin/python3
"""Turns the runs of bench/pipeline.sh into bench/results/pipeline_<mode>.md
and .json.

Run names (directories under --runs):
  bubbles: <model>-s<seed>-<policy>-<critical-path|no-critical-path>
  scaling: tgn-single, tgn-w<workers>-<policy>
Each holds summary.json (rank 0's, with every worker's counters) and
meta.json (the run's flags).
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deptgl_report import fmt, machine, mean_sd, report_parser  # noqa: E402


def load(runs):
    rows = {}
    for name in sorted(os.listdir(runs)):
        path = os.path.join(runs, name, "summary.json")
        if os.path.exists(path):
            meta = json.load(open(os.path.join(runs, name, "meta.json")))
            rows[name] = {"summary": json.load(open(path)), "meta": meta}
    return rows


def pipeline_figures(s):
    """A run's pipeline counters: totals over workers, shares per worker."""
    c = s["comm"]
    p = c["pipeline"]
    workers = s["per_worker"]
    return {
        "events_per_s": s["train_events_per_second"],
        "test_ap": s["test"]["ap"],
        "train_s": sum(e["seconds"] for e in s["epochs"]),
        "bubble_share": mean_sd([w["pipeline"]["bubble_share"]
                                 for w in workers])[0],
        "bubble_s": p["bubble_seconds"] / len(workers),
        "state_wait_s": p["state_wait_seconds"] / len(workers),
        "parameter_wait_s": p["parameter_wait_seconds"] / len(workers),
        "critical_s": p["critical_seconds"] / len(workers),
        "handoffs": p["handoffs_sent"],
        "states": p["states_sent"],
        "bytes": p["bytes_sent"],
        "urgent_states": p["urgent_states_sent"],
        "urgent_bytes": p["urgent_bytes_sent"],
        "late_rest": p["late_rest"],
        "parameter_bytes": p["parameter_bytes"],
        "allreduce_s": c.get("allreduce_seconds", 0) / len(workers),
        "state_sync_s": c.get("seconds", 0) / len(workers),
    }


def header(title, args, m, setup):
    return [f"# {title}\n",
            f"`{args.command}` on {m['cpu']} ({m['nproc']} CPUs"
            f"{', ' + m['isa'] if m['isa'] else ''}); the sweep took "
            f"{args.seconds / 60:.0f} min. {setup}\n"]


def bubbles(rows, args):
    groups = {}
    for name, r in rows.items():
        m = re.match(r"(\w+)-s(\d+)-([\w:]+)-(critical-path|no-critical-path)$",
                     name)
        if not m:
            continue
        model, seed, policy, cp = m.groups()
        groups.setdefault((model, policy), {}).setdefault(cp, {})[
            int(seed)] = pipeline_figures(r["summary"])
    m = machine()
    setup = (f"deploy/netns/run.sh at {args.rate} (tbf, no added delay), 2 "
             f"trainers pinned one per CPU with one thread, memory stores "
             f"and coordinator on the same 2 CPUs; Wikipedia's first "
             f"{args.prefix} events, one epoch, --batch-size 600 for "
             f"pipetgl, depbloom's derived window and batch for "
             f"depbloom --pipeline-depth 2 (one sub-chain run by both "
             f"workers).")
    md = header("The pipelines' bubbles with and without the critical path",
                args, m, setup)
    md.append(
        "Per worker, mean over seeds (± standard deviation): *bubble share* "
        "(seconds idle waiting for the worker before: its states or, for "
        "pipetgl, its parameters, over training time), *state wait* and "
        "*parameter wait* (the bubble's two parts; the state wait also "
        "counts the second message taken after the update), *critical s* "
        "(from a batch's states arriving to its own handoff leaving, summed "
        "over the epoch: the memory update on the critical path, Fig. 16's "
        "quantity). Counts over the run, every worker: handoffs, states and "
        "MB handed on, of them urgent (sent first), batches that waited for "
        "a state sent second (*late*).\n")
    md.append("| model | policy | critical path | seeds | events/s | test AP "
              "| bubble share | state wait s | parameter wait s | critical s "
              "| handoffs | states | MB | urgent states | urgent MB | late |")
    md.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    out = {"benchmark": "pipeline_bubbles", "command": args.command,
           "machine": m, "setup": setup, "rows": []}
    for (model, policy) in sorted(groups):
        for cp in ("no-critical-path", "critical-path"):
            runs = groups[(model, policy)].get(cp, {})
            if not runs:
                continue
            seeds = sorted(runs)

            def agg(k):
                return mean_sd([runs[s][k] for s in seeds])
            row = {k: agg(k) for k in runs[seeds[0]]}
            md.append(
                f"| {model} | {policy} | {'on' if cp == 'critical-path' else 'off'} "
                f"| {len(seeds)} | {fmt(row['events_per_s'][0], 0)} | "
                f"{fmt(row['test_ap'][0], 4)} | "
                f"{fmt(row['bubble_share'][0], 3)} ± "
                f"{fmt(row['bubble_share'][1], 3)} | "
                f"{fmt(row['state_wait_s'][0], 2)} | "
                f"{fmt(row['parameter_wait_s'][0], 2)} | "
                f"{fmt(row['critical_s'][0], 2)} | "
                f"{fmt(row['handoffs'][0], 0)} | {fmt(row['states'][0], 0)} | "
                f"{fmt(row['bytes'][0] / 1e6, 1)} | "
                f"{fmt(row['urgent_states'][0], 0)} | "
                f"{fmt(row['urgent_bytes'][0] / 1e6, 1)} | "
                f"{fmt(row['late_rest'][0], 0)} |")
            out["rows"].append({"model": model, "policy": policy,
                                "critical_path": cp == "critical-path",
                                "seeds": seeds, **row})
    write(args, "pipeline_bubbles", md, out)


def scaling(rows, args):
    m = machine()
    setup = (f"deploy/netns/run.sh at {args.rate} (tbf, no added delay), "
             f"trainers pinned one per CPU with one thread where there are "
             f"as many CPUs as trainers (3 trainers share the 2 CPUs, "
             f"unpinned); one process pinned to CPU 0 with one thread. "
             f"TGN, Wikipedia's first {args.prefix} events, one epoch, seed "
             f"1; --batch-size 600 (global for vanilla, per batch of the "
             f"chain for pipetgl), depbloom's derived window and batch.")
    md = header("Throughput and parallel efficiency by workers", args, m,
                setup)
    single = rows.get("tgn-single")
    base = single["summary"]["train_events_per_second"] if single else None
    md.append(
        "*events/s*: training events per second of training time; "
        "*speedup*: against one process; *efficiency*: speedup / workers. "
        "Per worker: state sync s (pulls and pushes to the stores), "
        "all-reduce s, bubble s (pipelines). Machine-independent: steps "
        "(optimizer steps of the epoch, per worker), handoffs and MB handed "
        "on (every worker).\n")
    md.append("| policy | workers | events/s | speedup | efficiency | "
              "test AP | state sync s | all-reduce s | bubble s | steps | "
              "handoffs | handoff MB |")
    md.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    out = {"benchmark": "pipeline_scaling", "command": args.command,
           "machine": m, "setup": setup, "rows": []}
    if single:
        s = single["summary"]
        md.append(f"| single | 1 | {fmt(base, 0)} | 1.00x | 100% | "
                  f"{fmt(s['test']['ap'], 4)} | - | - | - | "
                  f"{s['epochs'][0].get('steps', '-')} | - | - |")
        out["rows"].append({"policy": "single", "workers": 1,
                            "events_per_s": base})
    for policy in ("vanilla", "pipetgl", "depbloom", "depbloom:chain"):
        for w in (1, 2, 3):
            r = rows.get(f"tgn-w{w}-{policy}")
            if not r:
                continue
            f = pipeline_figures(r["summary"])
            speed = f["events_per_s"] / base if base else None
            steps = r["summary"]["epochs"][0].get("steps")
            md.append(
                f"| {policy} | {w}{' (2 CPUs)' if w > 2 else ''} | "
                f"{fmt(f['events_per_s'], 0)} | "
                f"{fmt(speed, 2) + 'x' if speed else '-'} | "
                f"{fmt(100 * speed / w, 0) + '%' if speed else '-'} | "
                f"{fmt(f['test_ap'], 4)} | {fmt(f['state_sync_s'], 2)} | "
                f"{fmt(f['allreduce_s'], 2)} | {fmt(f['bubble_s'], 2)} | "
                f"{steps if steps is not None else '-'} | "
                f"{fmt(f['handoffs'], 0)} | {fmt(f['bytes'] / 1e6, 1)} |")
            out["rows"].append({"policy": policy, "workers": w,
                                "speedup": speed, "steps": steps, **f})
    md.append("\n`depbloom:chain`: one sub-chain run by a pipeline of all the "
              "workers (`--pipeline-depth` = workers).")
    write(args, "pipeline_scaling", md, out)


def write(args, name, md, out):
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, name + ".md"), "w") as f:
        f.write("\n".join(md) + "\n")
    with open(os.path.join(args.out, name + ".json"), "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {args.out}/{name}.md and .json")


def main():
    ap = report_parser("bench/pipeline.sh")
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--prefix", default="30000")
    args = ap.parse_args()
    rows = load(args.runs)
    if args.mode == "scaling":
        scaling(rows, args)
    else:
        bubbles(rows, args)


if __name__ == "__main__":
    main()
