#!/usr/bin/python3
"""Turns the runs of bench/converge.sh into time-to-accuracy tables:
bench/results/converge[_<mode>].md and .json.

Run names (directories under --runs):
  <dataset>-<model>-<rate>-s<seed>-single
  <dataset>-<model>-<rate>-s<seed>-w<workers>-<policy>
Each holds summary.json (rank 0's, with every epoch's validation AP,
training seconds and optimizer steps) and meta.json.

Per seed, the target is vanilla's best validation AP (over all validation
events) minus 0.01; a run's time to target is its training seconds summed
over epochs up to the first epoch whose validation AP reaches it
(evaluation time excluded: every policy evaluates the same way).
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deptgl_report import (critical_worker, fmt, load, machine,  # noqa: E402
                           mean_sd, report_parser)

ORDER = ["single", "vanilla", "vanilla:grad-bf16", "vanilla:b4800", "full-cache", "deptgl:replay",
         "deptgl:replay+sync", "deptgl", "deptgl:grad-bf16", "depbloom", "depbloom:b300",
         "depbloom:lr-sqrt", "depbloom:lr-linear", "depbloom:no-partition",
         "depbloom:paper-cut", "depbloom:no-imr", "depbloom:no-critical-path",
         "depbloom:no-lr-scaling", "pipetgl", "pipetgl:critical-path",
         "depbloom:g2", "disttgl-epoch"]
TARGET_GAP = 0.01


def per_run(row):
    """The figures of one run (one seed of one policy)."""
    s = row["summary"]
    epochs = s["epochs"]
    w = max(1, s.get("workers", 1))
    c = s.get("comm") or {}
    train_s = sum(e["seconds"] for e in epochs)
    steps = sum(e.get("steps", 0) for e in epochs) if all(
        "steps" in e for e in epochs) else None
    times = c.get("time_seconds") or {}
    compute = sum(times.get(k, 0) for k in
                  ("preparation", "forward", "backward", "memory_management"))
    plan = c.get("plan") or {}
    critical = critical_worker(s)
    return {
        "epochs": len(epochs),
        "best_epoch": s.get("best_epoch"),
        "val_aps": [e["val_ap"] for e in epochs],
        "cum_train_s": [sum(e["seconds"] for e in epochs[:i + 1])
                        for i in range(len(epochs))],
        "best_val_ap": max(e["val_ap"] for e in epochs),
        "test_ap": s["test"]["ap"],
        "train_s": train_s,
        "eval_s": sum(e["eval_seconds"] for e in epochs),
        "steps": steps,
        "lr": s["config"].get("lr"),
        "batch_size": s["config"].get("batch_size"),
        # Per worker (means over workers), over the whole run.
        "state_sync_s": c.get("seconds", 0) / w,
        "allreduce_s": c.get("allreduce_seconds", 0) / w,
        # The worker that waits least in the all-reduce: closest to the
        # transfer alone (the others also wait for it to arrive), and its
        # state sync (its epoch is the run's).
        "allreduce_min_s": critical.get("allreduce_seconds",
                                        c.get("allreduce_seconds", 0)),
        "state_sync_crit_s": critical.get("seconds", c.get("seconds", 0)),
        "barrier_s": c.get("barrier_wait_seconds", 0) / w,
        "compute_s": compute / w,
        "state_mb": (c.get("bytes_pulled", 0) + c.get("bytes_pushed", 0)) / 1e6,
        "allreduce_mb": c.get("allreduce_bytes", 0) / 1e6,
        # A pipeline's bubble (waits for the worker before it), per worker.
        "bubble_s": (c.get("pipeline") or {}).get("bubble_seconds", 0) / w,
        # DepTGL's load detector: heavy-load batches over every worker's.
        "heavy_share": (plan.get("heavy_load_batches", 0) / (steps * w)
                        if steps and s.get("policy", "").startswith("deptgl")
                        else None),
    }


def time_to(run, target):
    for ap, t in zip(run["val_aps"], run["cum_train_s"]):
        if ap >= target:
            return t
    return None


def summarize(runs_by_seed, targets):
    """Means over seeds of one policy's runs."""
    seeds = sorted(runs_by_seed)
    out = {"seeds": seeds}
    for k in ("best_val_ap", "test_ap", "train_s", "eval_s", "epochs",
              "state_sync_s", "allreduce_s", "allreduce_min_s",
              "state_sync_crit_s", "barrier_s",
              "compute_s",
              "state_mb", "allreduce_mb", "bubble_s"):
        out[k], out[k + "_sd"] = mean_sd([runs_by_seed[s][k] for s in seeds])
    steps = [runs_by_seed[s]["steps"] for s in seeds
             if runs_by_seed[s]["steps"] is not None]
    out["steps"] = sum(steps) / len(steps) if steps else None
    heavy = [runs_by_seed[s]["heavy_share"] for s in seeds
             if runs_by_seed[s]["heavy_share"] is not None]
    out["heavy_share"] = sum(heavy) / len(heavy) if heavy else None
    tt = {s: time_to(runs_by_seed[s], targets[s]) for s in seeds
          if s in targets}
    out["time_to_target"] = tt
    reached = [t for t in tt.values() if t is not None]
    out["reached"] = len(reached)
    out["time_to_target_mean"] = (sum(reached) / len(reached)
                                  if reached else None)
    # Seeds still improving when the epoch cap stopped them.
    out["best_at_last_epoch"] = sum(
        1 for x in seeds
        if runs_by_seed[x]["best_epoch"] == runs_by_seed[x]["epochs"])
    out["lr"] = runs_by_seed[seeds[0]]["lr"]
    out["batch_size"] = runs_by_seed[seeds[0]]["batch_size"]
    return out


def header(title, args, m, setup):
    """A report's title, command, machine, duration, setup and note."""
    md = [f"# {title}\n",
          f"`{args.command}` on {m['cpu']} ({m['nproc']} CPUs"
          f"{', ' + m['isa'] if m.get('isa') else ''}); the sweep took "
          f"{args.seconds / 60:.0f} min. {setup}\n"]
    if args.note:
        md.append(args.note + "\n")
    return md


IMR_CONFIGS = [("sb600", "small batch (600)"), ("lb2400", "large batch (2,400)"),
               ("lb2400-imr4", "large batch + IMR(4)"),
               ("lb2400-lr", "large batch, depbloom's rate"),
               ("lb2400-imr4-lr", "large batch + IMR(4), depbloom's rate")]
# (large batch, with IMR, what the recovered share is said of).
IMR_PAIRS = [("lb2400", "lb2400-imr4", "at the small batch's rate"),
             ("lb2400-lr", "lb2400-imr4-lr", "at depbloom's rate")]


def imr_report(rows, args):
    """converge.sh --imr: one process, small batch, large batch, large
    batch + IMR(4): validation loss at the best epoch, normalized to the
    small batch's, and the share of the large batch's gap IMR recovers."""
    groups = {}
    for r in rows:
        s = r["summary"]
        e = s["epochs"][s["best_epoch"] - 1]
        groups.setdefault((r["dataset"], r["model"]), {}).setdefault(
            r["policy"], {})[r["seed"]] = {
                "val_loss": e["val_loss"], "best_val_ap": max(
                    x["val_ap"] for x in s["epochs"]),
                "test_ap": s["test"]["ap"], "epochs": len(s["epochs"]),
                "steps": sum(x.get("steps", 0) for x in s["epochs"]),
                "train_s": sum(x["seconds"] for x in s["epochs"])}
    m = machine()
    out = {"benchmark": "converge-imr", "command": args.command,
           "run_seconds": args.seconds, "note": args.note, "machine": m,
           "setup": "one process pinned to CPU 0 with one thread; the first "
                    "30,000 events; early stopping on validation AP (mean of "
                    "per-batch AP), patience 3, at most 10 epochs; learning "
                    "rate 1e-4, and for the large batch also the rate "
                    "depbloom's --lr-scaling gives it (JODIE: linear, 4e-4; "
                    "TGN: sqrt, 2e-4)",
           "groups": []}
    md = header("Intra-batch memory refinement, trained to convergence",
                args, m, out["setup"] + ".")
    md.append("*val loss*: the validation loss (the training loss over "
              "validation batches) at the best epoch, mean over seeds, and "
              "normalized to the small batch's (the paper's Fig. 15 reads "
              "1.00 / 1.32 / 1.03). *recovered*: (LB - LB+IMR) / (LB - SB) of "
              "the mean validation losses, where the large batch loses, with "
              "LB and LB+IMR at the same rate.\n")
    for (ds, model) in sorted(groups):
        g = groups[(ds, model)]
        md.append(f"## {ds}, {model}\n")
        md.append("| configuration | seeds | val loss | normalized | best val AP "
                  "| test AP | epochs | steps | train s |")
        md.append("|---|---|---|---|---|---|---|---|---|")
        means = {}
        for key, label in IMR_CONFIGS:
            runs = g.get(key)
            if not runs:
                continue
            agg = {k: mean_sd([runs[x][k] for x in sorted(runs)])
                   for k in ("val_loss", "best_val_ap", "test_ap", "epochs",
                             "steps", "train_s")}
            means[key] = agg["val_loss"][0]
            sb = means.get("sb600")
            norm = agg["val_loss"][0] / sb if sb else None
            ap, sd = agg["test_ap"]
            md.append(f"| {label} | {len(runs)} | {fmt(agg['val_loss'][0], 4)} "
                      f"| {fmt(norm, 2)} | {fmt(agg['best_val_ap'][0], 4)} | "
                      f"{fmt(ap, 4)}{' ± ' + fmt(sd, 4) if sd is not None else ''}"
                      f" | {fmt(agg['epochs'][0], 1)} | {fmt(agg['steps'][0], 0)} "
                      f"| {fmt(agg['train_s'][0])} |")
        md.append("")
        recovered = {}
        for lb, imr, label in IMR_PAIRS:
            if not all(k in means for k in ("sb600", lb, imr)):
                continue
            gap = means[lb] - means["sb600"]
            recovered[lb] = (means[lb] - means[imr]) / gap if gap > 0 else None
            md.append(f"Recovered {label}: " + (
                f"{100 * recovered[lb]:.0f}% of a gap of "
                f"{100 * gap / means['sb600']:.0f}%.\n"
                if recovered[lb] is not None else
                "- (no gap: the large batch does not lose validation loss "
                "here).\n"))
        out["groups"].append({"dataset": ds, "model": model,
                              "val_loss": means, "recovered": recovered,
                              "runs": {k: {str(x): v for x, v in r.items()}
                                       for k, r in g.items()}})
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "converge_imr.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    with open(os.path.join(args.out, "converge_imr.json"), "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {args.out}/converge_imr.md and .json")


def main():
    ap = report_parser("bench/converge.sh")
    ap.add_argument("--note", default="",
                    help="a paragraph under the header (how the runs were made)")
    args = ap.parse_args()
    rows = [r for r in load(args.runs) if "summary" in r and "dataset" in r]
    # A mode names the runs it reports: --quick CollegeMsg with TGN, a
    # group its data set and model, the default the four groups.
    if args.mode == "imr":
        imr_report([r for r in rows if r["rate"] == "local"], args)
        return
    rows = [r for r in rows if r["rate"] != "local"]
    if args.mode == "quick":
        wanted = {("collegemsg", "tgn")}
    elif args.mode == "grad-comm":
        wanted = {("wikipedia", "tgn")}
    elif args.mode == "pipeline":
        wanted = {(d, m) for d in ("wikipedia", "mathoverflow")
                  for m in ("jodie", "tgn")}
    elif args.mode == "default":
        wanted = {(d, m) for d in ("wikipedia", "mathoverflow")
                  for m in ("jodie", "tgn")}
    else:
        wanted = {tuple(args.mode.split("-", 1))}
    rows = [r for r in rows if (r["dataset"], r["model"]) in wanted]
    groups = {}
    for r in rows:
        key = (r["dataset"], r["model"], r["rate"])
        groups.setdefault(key, {}).setdefault(r["policy"], {})[r["seed"]] = \
            per_run(r)
    out = {"benchmark": "converge", "command": args.command,
           "mode": args.mode, "run_seconds": args.seconds, "note": args.note,
           "machine": machine(),
           "setup": "deploy/netns/run.sh (tbf at the stated rate, no added "
                    "delay), 2 trainers pinned one per CPU with one thread, "
                    "memory stores and coordinator unpinned on the same 2 "
                    "CPUs; the single process pinned to CPU 0 with one "
                    "thread; early stopping on validation AP (mean of "
                    "per-batch AP), patience 3, at most 10 epochs; "
                    "--batch-size 600 global (depbloom: 2400 per worker, "
                    "IMR(4), windows of 2,500 events, --lr scaled by "
                    "global batch / 600 with JODIE and by its square root "
                    "with TGN unless given).",
           "target": f"vanilla's best validation AP of the same seed minus "
                     f"{TARGET_GAP}",
           "groups": []}
    if args.mode == "pipeline":
        out["setup"] = (
            "deploy/netns/run.sh (tbf at the stated rate, no added delay), "
            "2 trainers pinned one per CPU with one thread, memory stores "
            "and coordinator unpinned on the same 2 CPUs; the single "
            "process pinned to CPU 0 with one thread; early stopping on "
            "validation AP (mean of per-batch AP), patience 3, at most 10 "
            "epochs; --batch-size 600 (vanilla: global; pipetgl: each batch "
            "of the chain, whose batches the 2 workers take in turn); "
            "depbloom at its defaults, window and batch per worker derived "
            "from the training events (here windows of 2,025 events and "
            "batches of 300 per worker, IMR(4), --lr scaled by global batch "
            "/ 600 with JODIE and by its square root with TGN); "
            "depbloom:g2 the same with one sub-chain run by both workers as "
            "a pipeline (--pipeline-depth 2). *steps* are rank 0's: a "
            "pipetgl worker steps on its own batches only, so the chain "
            "takes twice as many; *bubble s*: a pipeline worker's seconds "
            "waiting for the worker before it (its states, or pipetgl's "
            "parameters); pipetgl's *all-reduce* is its control "
            "collectives (it all-reduces no gradients).")
    md = header("Time to accuracy: every policy trained to convergence",
                args, out["machine"], out["setup"])
    md.append(
        "Target: vanilla's best validation AP of the same seed minus 0.01 "
        "(validation AP over all validation events). *to target*: training "
        "seconds (evaluation excluded) until the first epoch at or above the "
        "target, mean over the seeds that reached it (*reached*: how many). "
        "*steps*: optimizer steps of the whole run. Time split per worker "
        "over the whole run: *state sync* (pulls and pushes to the memory "
        "stores), *all-reduce* (the gradient all-reduce: the mean over "
        "workers, which includes waiting for the slower worker, and the "
        "worker that waited least, closer to the transfer alone), *compute*. "
        "Test AP at the best epoch, mean ± standard deviation over seeds.\n")
    for key in sorted(groups):
        g = groups[key]
        van = g.get("vanilla", {})
        targets = {s: r["best_val_ap"] - TARGET_GAP for s, r in van.items()}
        summ = {p: summarize(g[p], targets) for p in g}
        ds, model, rate = key
        vs = summ.get("vanilla")
        regime = ""
        if vs and vs["train_s"]:
            regime = (f" Vanilla's training time: state sync "
                      f"{100 * vs['state_sync_s'] / vs['train_s']:.0f}%"
                      f" ({100 * vs['state_sync_crit_s'] / vs['train_s']:.0f}%"
                      f" for the worker that waited least in the all-reduce, "
                      f"whose time the epoch is), "
                      f"all-reduce {100 * vs['allreduce_s'] / vs['train_s']:.0f}%"
                      f" ({100 * vs['allreduce_min_s'] / vs['train_s']:.0f}% "
                      f"for that worker)"
                      f", compute {100 * vs['compute_s'] / vs['train_s']:.0f}% "
                      f"(state {fmt(vs['state_mb'], 0)} MB, gradients "
                      f"{fmt(vs['allreduce_mb'], 0)} MB over the run). "
                      f"Its best epoch was its last in "
                      f"{vs['best_at_last_epoch']} of {len(vs['seeds'])} "
                      f"seeds.")
        md.append(f"## {ds}, {model}, {rate}\n")
        if regime:
            md.append(regime.strip() + "\n")
        # A pipeline's bubble, where a policy has one.
        bubbles = any(summ[p]["bubble_s"] for p in summ)
        md.append("| policy | seeds | reached | to target s | vs vanilla | "
                  "best val AP | test AP | epochs | steps | train s | "
                  "state sync s | all-reduce s | compute s | state MB | "
                  "heavy-load |" + (" bubble s |" if bubbles else ""))
        md.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
                  + ("---|" if bubbles else ""))
        vt = vs["time_to_target_mean"] if vs else None
        rows_out = []
        for p in ORDER + sorted(set(summ) - set(ORDER)):
            if p not in summ:
                continue
            s = summ[p]
            tt = s["time_to_target_mean"]
            speed = (f"{vt / tt:.2f}x" if vt and tt and
                     s["reached"] == len(s["seeds"]) and
                     vs["reached"] == len(vs["seeds"]) else "-")
            sd = s["test_ap_sd"]
            md.append(
                f"| {p} | {len(s['seeds'])} | {s['reached']}/"
                f"{len(s['time_to_target'])} | {fmt(tt)} | {speed} | "
                f"{fmt(s['best_val_ap'], 4)} | {fmt(s['test_ap'], 4)}"
                f"{' ± ' + fmt(sd, 4) if sd is not None else ''} | "
                f"{fmt(s['epochs'], 1)} | {fmt(s['steps'], 0)} | "
                f"{fmt(s['train_s'])} | "
                f"{fmt(s['state_sync_s']) if p != 'single' else '-'} | "
                f"{fmt(s['allreduce_s']) + ' / ' + fmt(s['allreduce_min_s']) if p != 'single' else '-'} | "
                f"{fmt(s['compute_s']) if p != 'single' else '-'} | "
                f"{fmt(s['state_mb'], 0) if p != 'single' else '-'} | "
                f"{fmt(100 * s['heavy_share'], 0) + '%' if s['heavy_share'] is not None else '-'} |"
                + (f" {fmt(s['bubble_s']) if s['bubble_s'] else '-'} |"
                   if bubbles else ""))
            rows_out.append({"policy": p, **s,
                             "time_to_target": {str(k): v for k, v in
                                                s["time_to_target"].items()}})
        md.append("")
        out["groups"].append({"dataset": ds, "model": model, "rate": rate,
                              "targets": {str(k): v for k, v in
                                          targets.items()},
                              "policies": rows_out})
    name = "converge" if args.mode == "default" else f"converge_{args.mode}"
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, name + ".md"), "w") as f:
        f.write("\n".join(md) + "\n")
    with open(os.path.join(args.out, name + ".json"), "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {args.out}/{name}.md and .json")


if __name__ == "__main__":
    main()
