#!/usr/bin/env python3
"""Tabulates bench/depbloom_defaults.sh's runs: per data set and variant,
test AP (mean, standard deviation over seeds), the difference to vanilla's
of the same seed, best validation AP (mean of per-batch AP, the early
stopping criterion), epochs, optimizer steps per epoch, the window and
batch trained with, and training seconds.

Usage: bench/depbloom_defaults_report.py RUNS_DIR [--markdown]
"""
import json
import os
import statistics
import sys
from collections import defaultdict


def load(runs):
    rows = defaultdict(dict)  # (ds, variant) -> seed -> summary
    for name in sorted(os.listdir(runs)):
        path = os.path.join(runs, name, "summary.json")
        if not os.path.exists(path):
            continue
        # <data>-<model>-s<seed>-<variant>; the model is tgn or jodie.
        for model in ("tgn", "jodie"):
            if f"-{model}-s" in name:
                ds, rest = name.split(f"-{model}-s")
                ds = ds if model == "tgn" else f"{ds} (jodie)"
                break
        else:
            continue
        seed, variant = rest.split("-", 1)
        with open(path) as f:
            rows[(ds, variant)][int(seed)] = json.load(f)
    return rows


def mean_sd(xs):
    if not xs:
        return "-"
    if len(xs) == 1:
        return f"{xs[0]:.4f}"
    return f"{statistics.mean(xs):.4f} ± {statistics.stdev(xs):.4f}"


def main():
    runs = sys.argv[1]
    rows = load(runs)
    datasets = sorted({ds for ds, _ in rows})
    print("| data | variant | seeds | window | batch/worker | lr | steps/epoch "
          "| epochs | best val AP | test AP | vs vanilla (same seed) | train s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for ds in datasets:
        variants = sorted({v for d, v in rows if d == ds},
                          key=lambda v: (v != "vanilla", v))
        base = rows.get((ds, "vanilla"), {})
        for v in variants:
            runs_v = rows[(ds, v)]
            seeds = sorted(runs_v)
            test = [runs_v[s]["test"]["ap"] for s in seeds]
            diff = [runs_v[s]["test"]["ap"] - base[s]["test"]["ap"]
                    for s in seeds if s in base]
            best = [max(e["val_ap_batch_mean"] for e in runs_v[s]["epochs"])
                    for s in seeds]
            epochs = [len(runs_v[s]["epochs"]) for s in seeds]
            steps = [runs_v[s]["epochs"][0]["steps"] for s in seeds]
            secs = [sum(e["seconds"] for e in runs_v[s]["epochs"]) for s in seeds]
            c = runs_v[seeds[0]]["config"]
            policy = runs_v[seeds[0]]["policy"]
            window = c.get("window_events", "-") if policy == "depbloom" else "-"
            if policy == "depbloom" and v == "depbloom:old":
                window = 80000
            print(f"| {ds} | {v} | {','.join(map(str, seeds))} | {window} | "
                  f"{c['batch_size']} | {c['lr']:.3g} | {statistics.mean(steps):.0f} | "
                  f"{statistics.mean(epochs):.1f} | {mean_sd(best)} | "
                  f"{mean_sd(test)} | "
                  f"{(f'{statistics.mean(diff):+.4f}' if diff and v != 'vanilla' else '-')} | "
                  f"{statistics.mean(secs):.1f} |")


if __name__ == "__main__":
    main()
