#!/usr/bin/python3
"""Turns the runs of bench/deptgl.sh into the DepTGL paper's tables as
measured here: bench/results/deptgl.md, deptgl.json and PNG charts.

Run names (directories under --runs):
  <dataset>-<model>-<rate>[-s<seed>]-single
  <dataset>-<model>-<rate>[-s<seed>]-w<workers>-<policy>
  sens-<knob>-<value>, scope-<name>          (wikipedia, TGN, 20mbit, 2 workers)
  tau_c-<value>-<dataset>-s<seed>            (--tau-c: TGN, 20mbit, 2 workers)
Each holds summary.json (rank 0's), meta.json and links (bytes each host sent
through its shaped link).
"""
import argparse
import datetime
import json
import math
import os
import re
import socket
import statistics

POLICIES = ["vanilla", "full-cache", "deptgl:replay", "deptgl:replay+sync",
            "deptgl"]
NAME = re.compile(r"^(?P<ds>[a-z]+)-(?P<model>tgn|jodie)-(?P<rate>\w+?)"
                  r"(?:-s(?P<seed>\d+))?-(?:(?P<single>single)|w(?P<w>\d)-(?P<policy>.+))$")


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def cpu_isa():
    """The widest vector ISA the CPU has (figures differ between them)."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                for isa in ("avx512_bf16", "avx512f", "avx2"):
                    if isa in flags:
                        return isa.upper()
                return ""
    except OSError:
        pass
    return ""


def machine():
    """The machine a report's figures come from."""
    return {"host": socket.gethostname(), "nproc": os.cpu_count(),
            "cpu": cpu_model(), "isa": cpu_isa()}


def critical_worker(summary):
    """The worker that waited least in the gradient all-reduce: the others'
    all-reduce also holds their wait for it, so the epoch is its time ({}
    when the summary has no per-worker figures)."""
    return min(summary.get("per_worker") or [{}],
               key=lambda p: p.get("allreduce_seconds", 0))


def report_parser(command):
    """The arguments every report takes from bench_report (lib_runs.sh)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", required=True)
    ap.add_argument("--mode", default="default")
    ap.add_argument("--seconds", type=float, default=0)
    ap.add_argument("--command", default=command)
    ap.add_argument("--out", default="bench/results")
    return ap


def load(runs):
    rows = []
    for name in sorted(os.listdir(runs)):
        path = os.path.join(runs, name, "summary.json")
        if not os.path.exists(path):
            rows.append({"name": name, "error": "no summary.json (see log)"})
            continue
        s = json.load(open(path))
        links = {}
        lp = os.path.join(runs, name, "links")
        if os.path.exists(lp):
            for line in open(lp):
                host, sent = line.split()
                links[host] = int(sent)
        row = {"name": name, "summary": s, "link_bytes": sum(links.values())}
        m = NAME.match(name)
        if m:
            row.update(dataset=m["ds"], model=m["model"], rate=m["rate"],
                       seed=int(m["seed"] or 0),
                       workers=1 if m["single"] else int(m["w"]),
                       policy="single" if m["single"] else m["policy"])
        rows.append(row)
    return rows


def figures(row):
    """Per-run figures used by every table."""
    s = row["summary"]
    e = s["epochs"][0]
    c = s["comm"]
    w = max(1, s.get("workers", 1))
    per = s.get("per_worker") or [c]
    compute = [p["time_seconds"]["preparation"] + p["time_seconds"]["forward"] +
               p["time_seconds"]["backward"] + p["time_seconds"]["memory_management"]
               for p in per]
    return {
        "epoch_s": e["seconds"],
        "events_per_s": e["train_events"] / e["seconds"] if e["seconds"] else 0,
        "syncs_per_worker": c["sync_count"] / w,
        "state_mb": (c["bytes_pulled"] + c["bytes_pushed"]) / 1e6,
        "pulled_mb": c["bytes_pulled"] / 1e6,
        "state_sync_s": c["seconds"] / w,
        "allreduce_s": c["allreduce_seconds"] / w,
        "allreduce_mb": c["allreduce_bytes"] / 1e6,
        "comm_s": c["time_seconds"]["communication"] / w,
        "prep_s": c["time_seconds"]["preparation"] / w,
        "fwd_s": c["time_seconds"]["forward"] / w,
        "bwd_s": c["time_seconds"]["backward"] / w,
        "mem_s": c["time_seconds"]["memory_management"] / w,
        "share": c["share"],
        # The epoch if state synchronization were free: the slowest worker's
        # compute plus its all-reduce.
        "compute_allreduce_s": max(cp + p["allreduce_seconds"]
                                   for cp, p in zip(compute, per)),
        "peak_rss_mb": s["peak_rss_bytes"] / 1e6 if w == 1 else
        max(p["peak_rss_bytes"] for p in per) / 1e6,
        "ap": s["test"]["ap"], "auc": s["test"]["auc"],
        "nn_ap": s["test"]["new_node_ap"], "nn_auc": s["test"]["new_node_auc"],
        "link_mb": row["link_bytes"] / 1e6,
        "plan": c.get("plan", {}),
    }


def fmt(x, digits=1):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:,.{digits}f}"


def mean_sd(values):
    if not values:
        return None, None
    if len(values) == 1:
        return values[0], None
    return statistics.mean(values), statistics.stdev(values)


def heavy_share(s):
    """Heavy-load batches over every worker's batches of the epoch."""
    batches = max(1, math.ceil(s["epochs"][0]["train_events"] / 600))
    return (s["comm"].get("plan", {}).get("heavy_load_batches", 0) /
            max(1, batches * s["workers"]))


TAU = re.compile(r"^tau_c-(?P<v>[0-9.e]+)-(?P<ds>[a-z]+)-s(?P<seed>\d+)$")


def tau_report(rows, args):
    """bench/deptgl.sh --tau-c: per dataset and tau_c, over seeds."""
    cells = {}
    for r in rows:
        m = TAU.match(r["name"])
        if not m or "summary" not in r:
            continue
        s = r["summary"]
        f = figures(r)
        cells.setdefault((m["ds"], float(m["v"])), []).append({
            "seed": int(m["seed"]), "epoch_s": f["epoch_s"],
            "heavy_share": heavy_share(s), "pruned": f["plan"].get("pruned", 0),
            "state_mb": f["state_mb"], "ap": f["ap"], "nn_ap": f["nn_ap"]})
    cpu = cpu_model()
    md = ["# DepTGL's load detector: tau_c (Eq. 9)\n",
          f"`{args.command}` on {cpu} ({os.cpu_count()} CPUs); the sweep took "
          f"{args.seconds / 60:.0f} min. TGN, 2 workers, deptgl, 20 Mbit/s "
          "links (deploy/netns/run.sh), first 30,000 events, 1 epoch, "
          "--batch-size 600, seeds 0-2. A batch is heavy when its own "
          "compute time exceeds tau_c x the EMA of batch times; heavy batches "
          "drop their pure auxiliary events. Mean over seeds (± standard "
          "deviation for test AP).\n",
          "| data | tau_c | seeds | epoch s | heavy-load share | pruned | "
          "state MB | test AP | new-node AP |",
          "|---|---|---|---|---|---|---|---|---|"]
    out = []
    for (ds, v), runs in sorted(cells.items()):
        ap_m, ap_sd = mean_sd([x["ap"] for x in runs])
        mean = {k: statistics.mean(x[k] for x in runs)
                for k in ("epoch_s", "heavy_share", "pruned", "state_mb",
                          "nn_ap")}
        out.append({"data": ds, "tau_c": v, "seeds": len(runs),
                    "test_ap_mean": ap_m, "test_ap_sd": ap_sd, **mean,
                    "runs": runs})
        md.append(f"| {ds} | {v:g} | {len(runs)} | {fmt(mean['epoch_s'])} | "
                  f"{fmt(100 * mean['heavy_share'], 0)}% | "
                  f"{fmt(mean['pruned'], 0)} | {fmt(mean['state_mb'])} | "
                  f"{ap_m:.4f} ± {fmt(ap_sd, 4)} | {mean['nn_ap']:.4f} |")
    md.append("")
    open(os.path.join(args.out, "deptgl_tau_c.md"), "w").write("\n".join(md))
    json.dump({"benchmark": "deptgl --tau-c", "command": args.command,
               "cpu": cpu, "nproc": os.cpu_count(), "cells": out},
              open(os.path.join(args.out, "deptgl_tau_c.json"), "w"), indent=1)
    print("\n".join(md))


def main():
    ap = report_parser("bench/deptgl.sh")
    ap.add_argument("--tau-c", action="store_true",
                    help="report the tau_c sweep (deptgl.sh --tau-c) only")
    ap.add_argument("--reference-tau-c", type=float, default=1.5,
                    help="the tau_c of Table VII's reference rows (the "
                         "default of the build that ran them)")
    ap.add_argument("--from-json", default=None,
                    help="rewrite the report from its own deptgl.json (the "
                         "figures of each run, without the run directories)")
    args = ap.parse_args()
    saved = None
    if args.from_json:
        saved = json.load(open(args.from_json))
        rows = saved["runs"]
        args.command, args.seconds = saved["command"], saved["run_seconds"]
        # Table VII's heavy-load shares need the runs' summaries: kept.
        saved_heavy = {r["run"]: r["heavy_share"]
                       for r in saved["tables"].get("VII", [])}
    else:
        rows = load(args.runs)
    if args.tau_c:
        tau_report(rows, args)
        return
    ok = [r for r in rows if "summary" in r or "fig" in r]
    for r in ok:
        if "summary" in r:
            r["fig"] = figures(r)
    grouped = {}
    for r in ok:
        if "dataset" in r and r["seed"] == 0:
            key = (r["dataset"], r["model"], r["rate"])
            grouped.setdefault(key, {})[(r["workers"], r["policy"])] = r
    md = []
    out = {"benchmark": "deptgl", "command": args.command, "mode": args.mode,
           "run_seconds": args.seconds,
           "date": (saved["date"] if saved else
                    datetime.datetime.utcnow().isoformat() + "Z"),
           "machine": saved["machine"] if saved else machine(),
           "setup": "deploy/netns/run.sh: one network namespace per process, "
                    "tbf on every link both ways at the stated rate, no added "
                    "delay (netem unavailable); trainers pinned one per CPU with "
                    "one intra-op thread where CPUs allow (3 workers on 2 CPUs: "
                    "unpinned, one thread each); the single process pinned to "
                    "CPU 0 with one thread; 1 epoch, --batch-size 600, TGN/JODIE "
                    "at mnemo's defaults (memory 100); at rates below 1gbit the "
                    "first 30,000 events (--max-events).",
           "tables": {}, "targets": [], "runs": [
               {k: v for k, v in r.items() if k != "summary"} for r in rows]}
    md.append("# DepTGL measured here\n")
    md.append(f"`{args.command}` on {out['machine']['cpu']} "
              f"({out['machine']['nproc']} CPUs), {out['date'][:10]}; the "
              f"sweep took {args.seconds / 60:.0f} min. {out['setup']}\n")

    # Table III + V + VI per group.
    t3, t5, t6, ablation = [], [], [], []
    for (ds, model, rate), g in sorted(grouped.items()):
        for workers in sorted({w for (w, p) in g if w > 1}):
            van = g.get((workers, "vanilla"))
            if not van:
                continue
            tv = van["fig"]["epoch_s"]
            single = g.get((1, "single"))
            for p in ["single"] + POLICIES:
                r = single if p == "single" else g.get((workers, p))
                if not r:
                    continue
                f = r["fig"]
                speedup = tv / f["epoch_s"]
                row = {"dataset": ds, "model": model, "rate": rate,
                       "workers": workers, "policy": p, **{
                           k: f[k] for k in f if k != "plan"},
                       "speedup_over_vanilla": speedup,
                       "plan": f["plan"]}
                t3.append(row)
                if p.startswith("deptgl") or p == "vanilla":
                    ablation.append(row)
    out["tables"]["III_V_VI"] = t3

    md.append("## Table III: epoch time and speedup over vanilla\n")
    md.append("No ceiling column: T_vanilla / (T_compute + T_all-reduce) is not "
              "a bound as measured here. A worker's all-reduce time includes "
              "its wait for the slower worker, the memory stores and the "
              "coordinator share the trainers' CPUs, and a policy may also cut "
              "all-reduces. `bench/regime.sh` splits vanilla's time per worker "
              "instead.\n")
    md.append("| data | model | rate | W | policy | epoch s | speedup | vanilla comm share |")
    md.append("|---|---|---|---|---|---|---|---|")
    for r in t3:
        van_share = next((x["share"] for x in t3 if x["policy"] == "vanilla" and
                          (x["dataset"], x["model"], x["rate"], x["workers"]) ==
                          (r["dataset"], r["model"], r["rate"], r["workers"])), None)
        md.append(f"| {r['dataset']} | {r['model']} | {r['rate']} | {r['workers']} | "
                  f"{r['policy']} | {fmt(r['epoch_s'])} | {fmt(r['speedup_over_vanilla'], 2)}x | "
                  f"{fmt(100 * van_share, 0)}% |")
    md.append("")

    md.append("## Table V: synchronization and time split (per worker, one epoch)\n")
    md.append("| data | model | rate | W | policy | syncs | state MB | state-sync s | all-reduce s (MB) | comm s | prep s | fwd s | bwd s | memory s | comm share |")
    md.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in t3:
        if r["policy"] == "single":
            continue
        md.append(f"| {r['dataset']} | {r['model']} | {r['rate']} | {r['workers']} | {r['policy']} | "
                  f"{fmt(r['syncs_per_worker'], 0)} | {fmt(r['state_mb'])} | {fmt(r['state_sync_s'])} | "
                  f"{fmt(r['allreduce_s'])} ({fmt(r['allreduce_mb'], 0)}) | {fmt(r['comm_s'])} | "
                  f"{fmt(r['prep_s'], 2)} | {fmt(r['fwd_s'])} | {fmt(r['bwd_s'])} | "
                  f"{fmt(r['mem_s'], 2)} | {fmt(100 * r['share'], 0)}% |")
    md.append("")

    md.append("## Table VI: target-event throughput and peak memory\n")
    md.append("| data | model | rate | W | policy | target events/s | peak RSS MB (largest process) | auxiliary events | pruned | heavy-load batches |")
    md.append("|---|---|---|---|---|---|---|---|---|---|")
    for r in t3:
        pl = r["plan"]
        md.append(f"| {r['dataset']} | {r['model']} | {r['rate']} | {r['workers']} | {r['policy']} | "
                  f"{fmt(r['events_per_s'], 0)} | {fmt(r['peak_rss_mb'], 0)} | "
                  f"{pl.get('auxiliaries', '-')} | {pl.get('pruned', '-')} | "
                  f"{pl.get('heavy_load_batches', '-')} |")
    md.append("")

    # Table IV: accuracy, mean over seeds where there are several.
    acc = {}
    for r in ok:
        if "dataset" not in r:
            continue
        key = (r["dataset"], r["model"], r["rate"], r["workers"], r["policy"])
        acc.setdefault(key, []).append(r["fig"])
    t4 = []
    md.append("## Table IV: test accuracy (AP / AUC; transductive and new-node)\n")
    md.append("Mean over seeds (n) with the standard deviation where several "
              "seeds ran. Single-process rows have W = 1.\n")
    md.append("| data | model | rate | W | policy | n | AP | AUC | new-node AP | new-node AUC | AP - vanilla |")
    md.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for key in sorted(acc, key=lambda k: (k[0], k[1], k[2], k[3],
                                          (["single"] + POLICIES).index(k[4]))):
        figs = acc[key]
        row = {"dataset": key[0], "model": key[1], "rate": key[2],
               "workers": key[3], "policy": key[4], "n": len(figs)}
        for m in ["ap", "auc", "nn_ap", "nn_auc"]:
            row[m], row[m + "_sd"] = mean_sd([f[m] for f in figs])
        t4.append(row)
    for row in t4:
        van = next((x for x in t4 if x["policy"] == "vanilla" and
                    (x["dataset"], x["model"], x["rate"]) ==
                    (row["dataset"], row["model"], row["rate"]) and
                    (x["workers"] == row["workers"] or row["workers"] == 1)), None)
        row["ap_minus_vanilla"] = row["ap"] - van["ap"] if van else None
        sd = lambda m: f" ± {row[m + '_sd']:.4f}" if row[m + "_sd"] else ""
        md.append(f"| {row['dataset']} | {row['model']} | {row['rate']} | {row['workers']} | "
                  f"{row['policy']} | {row['n']} | {row['ap']:.4f}{sd('ap')} | "
                  f"{row['auc']:.4f}{sd('auc')} | {row['nn_ap']:.4f}{sd('nn_ap')} | "
                  f"{row['nn_auc']:.4f}{sd('nn_auc')} | "
                  f"{fmt(row['ap_minus_vanilla'], 4) if row['ap_minus_vanilla'] is not None else '-'} |")
    md.append("")
    out["tables"]["IV"] = t4

    # Table VII and the scopes.
    sens = [r for r in ok if r["name"].startswith(("sens-", "scope-"))]
    base = grouped.get(("wikipedia", "tgn", "20mbit"), {}).get((2, "deptgl"))
    t7 = []
    if sens or base:
        md.append("## Table VII: sensitivity (Wikipedia, TGN, 20 Mbit/s, first 30,000 events, 2 workers)\n")
        md.append(f"Reference configuration tau_g 1.6, tau_c {args.reference_tau_c:g}, K 6 (first row); one knob changed per row. The scope rows change what is pushed and pulled (beyond the paper).\n")
        md.append("| run | epoch s | syncs/worker | boundaries refreshed / skipped | heavy-load share | pruned | state MB | test AP | new-node AP |")
        md.append("|---|---|---|---|---|---|---|---|---|")
        for r in ([base] if base else []) + sens:
            f, pl = r["fig"], r["fig"]["plan"]
            name = "reference (deptgl)" if r is base else r["name"]
            if "summary" in r:
                batches = max(1, r["summary"]["comm"]["target_events"] and
                              math.ceil(r["summary"]["epochs"][0]["train_events"] / 600))
                heavy = pl.get("heavy_load_batches", 0) / max(1, batches * r["summary"]["workers"])
            else:
                heavy = saved_heavy[name]
            t7.append({"run": name, **{k: f[k] for k in f if k != "plan"}, "plan": pl,
                       "heavy_share": heavy})
            md.append(f"| {name} | {fmt(f['epoch_s'])} | {fmt(f['syncs_per_worker'], 0)} | "
                      f"{pl.get('boundaries_refreshed', '-')} / {pl.get('boundaries_skipped', '-')} | "
                      f"{fmt(100 * heavy, 0)}% | {pl.get('pruned', '-')} | {fmt(f['state_mb'])} | "
                      f"{f['ap']:.4f} | {f['nn_ap']:.4f} |")
        md.append("")
    out["tables"]["VII"] = t7

    # Targets of the issue, checked on every 2-worker group.
    md.append("## Targets (ratios in one run)\n")
    for (ds, model, rate), g in sorted(grouped.items()):
        van, dep = g.get((2, "vanilla")), g.get((2, "deptgl"))
        if not (van and dep):
            continue
        fv, fd = van["fig"], dep["fig"]
        checks = [
            ("state syncs per epoch >= 20x fewer", fv["syncs_per_worker"] / max(fd["syncs_per_worker"], 1e-9), 20),
            ("state bytes >= 10x less", fv["state_mb"] / max(fd["state_mb"], 1e-9), 10),
            ("state-sync time >= 10x less", fv["state_sync_s"] / max(fd["state_sync_s"], 1e-9), 10),
        ]
        for what, value, goal in checks:
            met = value >= goal
            out["targets"].append({"group": f"{ds}/{model}/{rate}", "target": what,
                                   "value": value, "goal": goal, "met": met})
            md.append(f"- {ds}/{model}/{rate}: {what}: {value:.2f} ({'met' if met else 'NOT met'})")
    for row in t4:
        if row["policy"] == "deptgl" and row["ap_minus_vanilla"] is not None:
            met = row["ap_minus_vanilla"] >= -0.01
            sdtxt = f", sd {row['ap_sd']:.4f}" if row["ap_sd"] else ""
            out["targets"].append({"group": f"{row['dataset']}/{row['model']}/{row['rate']}/W{row['workers']}",
                                   "target": "test AP within 0.01 of vanilla (mean over seeds)",
                                   "value": row["ap_minus_vanilla"], "n": row["n"], "met": met})
            md.append(f"- {row['dataset']}/{row['model']}/{row['rate']}/W{row['workers']}: test AP - vanilla "
                      f"= {row['ap_minus_vanilla']:+.4f} over {row['n']} seed(s){sdtxt} "
                      f"({'met' if met else 'NOT met'})")
    md.append("")
    failed = [r["name"] for r in rows if "error" in r]
    if failed:
        md.append("Runs without a result: " + ", ".join(failed) + "\n")

    suffix = "" if args.mode == "default" else "_" + args.mode
    charts(t3, t7, args.out, suffix)
    md.append(f"Charts: `deptgl{suffix}_epoch_time.png` (Table III), "
              f"`deptgl{suffix}_ablation.png` (Fig. 6), "
              f"`deptgl{suffix}_sensitivity.png` (Table VII).\n")
    json.dump(out, open(os.path.join(args.out, f"deptgl{suffix}.json"), "w"), indent=1)
    open(os.path.join(args.out, f"deptgl{suffix}.md"), "w").write("\n".join(md))
    print("\n".join(md))


def charts(t3, t7, outdir, suffix):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no matplotlib: apt-get install python3-matplotlib for the charts)")
        return
    groups = sorted({(r["dataset"], r["model"], r["rate"], r["workers"]) for r in t3})
    if not groups:
        return
    fig, axes = plt.subplots(1, len(groups), figsize=(3.2 * len(groups), 3.4),
                             squeeze=False)
    for ax, g in zip(axes[0], groups):
        rs = [r for r in t3 if (r["dataset"], r["model"], r["rate"], r["workers"]) == g]
        ax.bar(range(len(rs)), [r["epoch_s"] for r in rs],
               color=["#888" if r["policy"] in ("single", "vanilla", "full-cache") else "#2a7"
                      for r in rs])
        ax.set_xticks(range(len(rs)))
        ax.set_xticklabels([r["policy"].replace("deptgl:", "") for r in rs],
                           rotation=60, ha="right", fontsize=7)
        ax.set_title(f"{g[0]} {g[1]}\n{g[2]}, {g[3]} workers", fontsize=8)
        ax.set_ylabel("epoch s", fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(outdir, f"deptgl{suffix}_epoch_time.png"), dpi=110)
    plt.close(fig)
    abl = [g for g in groups if g[3] == 2]
    fig, axes = plt.subplots(1, len(abl), figsize=(3.0 * len(abl), 3.2), squeeze=False)
    for ax, g in zip(axes[0], abl):
        rs = [r for r in t3 if (r["dataset"], r["model"], r["rate"], r["workers"]) == g
              and (r["policy"] == "vanilla" or r["policy"].startswith("deptgl"))]
        ax.bar(range(len(rs)), [r["speedup_over_vanilla"] for r in rs], color="#37a")
        ax.set_xticks(range(len(rs)))
        ax.set_xticklabels([r["policy"].replace("deptgl:", "") for r in rs],
                           rotation=45, ha="right", fontsize=7)
        ax.set_title(f"{g[0]} {g[1]} {g[2]}", fontsize=8)
        ax.set_ylabel("speedup over vanilla", fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(outdir, f"deptgl{suffix}_ablation.png"), dpi=110)
    plt.close(fig)
    if t7:
        fig, ax = plt.subplots(figsize=(7, 3.2))
        ax.bar(range(len(t7)), [r["epoch_s"] for r in t7], color="#a73")
        ax.set_xticks(range(len(t7)))
        ax.set_xticklabels([r["run"] for r in t7], rotation=45, ha="right", fontsize=7)
        ax.set_ylabel("epoch s")
        ax2 = ax.twinx()
        ax2.plot(range(len(t7)), [r["ap"] for r in t7], "ko-", ms=3)
        ax2.set_ylabel("test AP")
        fig.tight_layout()
        fig.savefig(os.path.join(outdir, f"deptgl{suffix}_sensitivity.png"), dpi=110)
        plt.close(fig)


if __name__ == "__main__":
    main()
