#!/usr/bin/env python3
"""Helpers for bench/train_reference.sh --reference: run the TGN reference
implementation (twitter-research/tgn) next to mnemo and compare.

  reference.py patch DIR
      minimal compatibility patch of a copy of the reference, in place
      (Python 3.11: random.sample() no longer accepts a set). Idempotent.
  reference.py convert --input FILE --out DIR [--name wikipedia] [--max-events N]
      our "u i ts" event file (ids already the reference's: users 1..U,
      items U+1..) -> the reference's ml_NAME.csv, ml_NAME.npy (edge
      features, row 0 unused) and ml_NAME_node.npy, with zero 172-wide
      features (a featureless dataset, as the reference feeds it).
  reference.py parse DIR --prefix P --runs N
      the reference's log (log/*.log) and per-run results (results/P*.pkl)
      -> JSON on stdout: per run, per epoch val AP / new-node val AP (mean of
      per-batch AP, as it prints), AUCs, loss, training seconds (without
      evaluation, from the results file), total epoch seconds (log), test.
  reference.py blas --probe NAME=PARSED.json... --envs NAME=ENV... ...
  reference.py blas --chosen NAME --env ENV
      the reference's BLAS: from probe runs (each parse output a one-run,
      one-epoch reference run with configuration NAME), the configuration
      with the most training events/s (best of its rounds); or one chosen
      without a probe. JSON on stdout.
  reference.py report --which W --reference REF.json --mnemo S.json... ...
      bench/results/reference_W.json and .md.

Needs numpy (and pandas for convert); run with the Python that runs the
reference (/usr/bin/python3 on Debian 12).
"""
import argparse
import datetime
import glob
import gzip
import json
import os
import pickle
import re
import socket
import statistics
import sys

FEATURE_DIM = 172  # the reference's Wikipedia/Reddit feature width

# (file, old, new): the whole compatibility patch. Python >= 3.11's
# random.sample() rejects sets; older Pythons converted the set with tuple(),
# so this draws the same nodes as the reference did.
PATCHES = [
    ("utils/data_processing.py",
     "random.sample(test_node_set, ",
     "random.sample(tuple(test_node_set), "),
]


def apply_patches(directory, patches, what):
    """Applies (file, old, new) replacements in place, idempotently; exits
    when `old` is not found exactly once (not the `what` it was written for)."""
    applied = []
    for rel, old, new in patches:
        path = os.path.join(directory, rel)
        text = open(path).read()
        if new in text:
            applied.append({"file": rel, "change": f"{old!r} -> {new!r}", "status": "already applied"})
            continue
        n = text.count(old)
        if n != 1:
            sys.exit(f"patch: expected one {old!r} in {path}, found {n} (not {what}?)")
        open(path, "w").write(text.replace(old, new))
        applied.append({"file": rel, "change": f"{old!r} -> {new!r}", "status": "applied"})
    json.dump(applied, sys.stdout, indent=1)
    print()


def cmd_patch(a):
    apply_patches(a.dir, PATCHES, "twitter-research/tgn d55bbe67")


def open_text(path):
    return gzip.open(path, "rt") if path.endswith(".gz") else open(path)


def read_events(path, max_events=0):
    """Our "u i ts" event file (gzip or not; '#' and '%' lines skipped) ->
    int64 u, int64 i, float64 ts arrays in file order (the first
    `max_events` only, when given); exits on a malformed or empty file."""
    import numpy as np
    u, i, ts = [], [], []
    with open_text(path) as f:
        for line in f:
            p = line.split()
            if not p or p[0].startswith(("#", "%")):
                continue
            if len(p) < 3:
                sys.exit(f"convert: malformed line {line!r} in {path}")
            u.append(int(p[0])); i.append(int(p[1])); ts.append(float(p[2]))
            if max_events and len(u) >= max_events:
                break
    if not u:
        sys.exit(f"convert: no events in {path}")
    return (np.asarray(u, dtype=np.int64), np.asarray(i, dtype=np.int64),
            np.asarray(ts, dtype=np.float64))


def write_ml_files(out, name, u, i, ts, feature_dim):
    """The TGN preprocessing's files in `out`: ml_NAME.csv (u, i, ts, label
    0, idx 1..n), ml_NAME.npy (zero edge features, row 0 unused) and
    ml_NAME_node.npy (zero node features, ids 0..max id); returns n."""
    import numpy as np
    import pandas as pd
    os.makedirs(out, exist_ok=True)
    n = len(u)
    df = pd.DataFrame({"u": u, "i": i, "ts": ts, "label": np.zeros(n), "idx": np.arange(1, n + 1)})
    df.to_csv(os.path.join(out, f"ml_{name}.csv"))
    np.save(os.path.join(out, f"ml_{name}.npy"), np.zeros((n + 1, feature_dim)))
    np.save(os.path.join(out, f"ml_{name}_node.npy"), np.zeros((int(max(u.max(), i.max())) + 1, feature_dim)))
    return n


def cmd_convert(a):
    import numpy as np
    u, i, ts = read_events(a.input, a.max_events)
    if np.any(np.diff(ts) < 0):
        sys.exit("convert: events are not in time order (the reference assumes they are)")
    # The reference's ids: users 1..U, items U+1..U+I (utils/preprocess_data.py
    # reindexes bipartite data so); our Wikipedia file already uses them.
    if u.min() < 1 or u.max() >= i.min():
        sys.exit(f"convert: ids are not the reference's bipartite ids (users {u.min()}..{u.max()}, "
                 f"items {i.min()}..{i.max()})")
    n = write_ml_files(a.out, a.name, u, i, ts, FEATURE_DIM)
    info = {"input": a.input, "events": n, "users": [int(u.min()), int(u.max())],
            "items": [int(i.min()), int(i.max())], "time": [float(ts[0]), float(ts[-1])],
            "feature_dim": FEATURE_DIM, "features": "zero"}
    json.dump(info, sys.stdout)
    print()


LINE = re.compile(r" - root - INFO - (.*)$")
FLOAT = r"([-+0-9.eE]+|nan)"


def cmd_parse(a):
    logs = sorted(glob.glob(os.path.join(a.dir, "log", "*.log")), key=os.path.getmtime)
    if not logs:
        sys.exit(f"parse: no log in {a.dir}/log")
    runs = []
    train_events = None
    for raw in open(logs[-1]):
        m = LINE.search(raw.rstrip("\n"))
        if not m:
            continue
        msg = m.group(1)
        if mm := re.match(r"num of training instances: (\d+)", msg):
            train_events = int(mm.group(1))
            runs.append({"run": len(runs), "epochs": [], "test": {}})
        elif mm := re.match(r"epoch: (\d+) took ([0-9.]+)s", msg):
            runs[-1]["epochs"].append({"epoch": int(mm.group(1)) + 1, "total_seconds": float(mm.group(2))})
        elif mm := re.match(r"Epoch mean loss: " + FLOAT, msg):
            runs[-1]["epochs"][-1]["train_loss"] = float(mm.group(1))
        elif mm := re.match(r"val auc: " + FLOAT + r", new node val auc: " + FLOAT, msg):
            runs[-1]["epochs"][-1].update(val_auc=float(mm.group(1)), val_new_node_auc=float(mm.group(2)))
        elif mm := re.match(r"val ap: " + FLOAT + r", new node val ap: " + FLOAT, msg):
            runs[-1]["epochs"][-1].update(val_ap=float(mm.group(1)), val_new_node_ap=float(mm.group(2)))
        elif mm := re.match(r"Test statistics: Old nodes -- auc: " + FLOAT + r", ap: " + FLOAT, msg):
            runs[-1]["test"].update(auc=float(mm.group(1)), ap=float(mm.group(2)))
        elif mm := re.match(r"Test statistics: New nodes -- auc: " + FLOAT + r", ap: " + FLOAT, msg):
            runs[-1]["test"].update(new_node_auc=float(mm.group(1)), new_node_ap=float(mm.group(2)))
    if len(runs) != a.runs:
        sys.exit(f"parse: {logs[-1]} has {len(runs)} runs, expected {a.runs}")
    for r in runs:
        # results/P.pkl (run 0), results/P_i.pkl: epoch_times is training only
        # (the log's "took" includes validation).
        pkl = os.path.join(a.dir, "results", f"{a.prefix}.pkl" if r["run"] == 0 else f"{a.prefix}_{r['run']}.pkl")
        times = pickle.load(open(pkl, "rb"))["epoch_times"]
        if len(times) != len(r["epochs"]) or not r["test"]:
            sys.exit(f"parse: run {r['run']} incomplete in {logs[-1]} / {pkl}")
        for e, t in zip(r["epochs"], times):
            e["seconds"] = t
            e["eval_seconds"] = e["total_seconds"] - t
            e["train_events"] = train_events
            e["train_events_per_second"] = train_events / t
        r["train_events_per_second"] = train_events * len(times) / sum(times)
    json.dump({"log": logs[-1], "train_events": train_events, "runs": runs}, sys.stdout, indent=1)
    print()


LIBBLAS = "/usr/lib/x86_64-linux-gnu/libblas.so.3"


def cmd_blas(a):
    system = os.path.realpath(LIBBLAS) if os.path.exists(LIBBLAS) else None
    if a.chosen:
        json.dump({"chosen": a.chosen, "env": a.env or "", "how": "chosen (--reference-blas)",
                   "system_libblas": system, "probe": None}, sys.stdout, indent=1)
        print()
        return
    envs = dict(e.split("=", 1) for e in a.envs)
    configs = {}
    for item in a.probe:
        name, path = item.split("=", 1)
        run = json.load(open(path))["runs"][0]
        configs.setdefault(name, []).append(run["train_events_per_second"])
    rows = [{"name": n, "env": envs.get(n, ""), "train_events_per_second": v, "best": max(v)}
            for n, v in configs.items()]
    chosen = max(rows, key=lambda r: r["best"])
    json.dump({"chosen": chosen["name"], "env": chosen["env"], "how": "the fastest configuration of the probe below",
               "system_libblas": system,
               "probe": {"command": a.command, "events": a.events, "rounds": a.rounds,
                         "configurations": rows}}, sys.stdout, indent=1)
    print()


def blas_lines(blas):
    """The report's lines on the reference's BLAS."""
    if not blas:
        return []
    env = f"`{blas['env'].strip()}`" if blas["env"].strip() else "environment unchanged"
    L = [f"Reference BLAS: **{blas['chosen']}** ({env}; the system's libblas.so.3 is "
         f"{blas.get('system_libblas') or 'absent'}), {blas['how']}."]
    p = blas.get("probe")
    if p:
        L.append("")
        L.append(f"The probe: one epoch of the reference's TGN on the first {p['events']} events, "
                 f"{p['rounds']} round(s) per configuration, alternating (`{p['command']}`):")
        L.append("")
        L.append("| BLAS | environment | training events/s per round | best |")
        L.append("|---|---|---|---|")
        for r in sorted(p["configurations"], key=lambda r: -r["best"]):
            L.append(f"| {r['name']} | `{r['env'].strip() or '(unchanged)'}` | "
                     f"{', '.join(f'{v:.0f}' for v in r['train_events_per_second'])} | {r['best']:.0f} |")
    L.append("")
    return L


# Two-sided 95% quantiles of Student's t for 1..30 degrees of freedom (a
# fractional Welch df is rounded down: the wider interval).
T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
        2.045, 2.042]


def ci95_difference(ref, ours):
    """95% confidence interval of mean(ours) - mean(ref) (Welch's t), or None
    with fewer than 2 values on a side: {"difference", "low", "high", "df"}."""
    ref = [v for v in ref if v is not None]
    ours = [v for v in ours if v is not None]
    if len(ref) < 2 or len(ours) < 2:
        return None
    va, vb = statistics.variance(ref) / len(ref), statistics.variance(ours) / len(ours)
    d = statistics.mean(ours) - statistics.mean(ref)
    se = (va + vb) ** 0.5
    if se == 0:
        return {"difference": d, "low": d, "high": d, "df": None}
    df = (va + vb) ** 2 / (va ** 2 / (len(ref) - 1) + vb ** 2 / (len(ours) - 1))
    t = T975[min(max(int(df), 1), 30) - 1] if df < 31 else 1.960
    return {"difference": d, "low": d - t * se, "high": d + t * se, "df": df}


def stats(values):
    values = [v for v in values if v is not None]
    if not values:
        return {"mean": None, "sd": None, "n": 0}
    return {"mean": statistics.fmean(values),
            "sd": statistics.stdev(values) if len(values) > 1 else None,
            "n": len(values)}


def pm(s, digits=4):
    if s["mean"] is None:
        return "–"
    if s["sd"] is None:
        return f"{s['mean']:.{digits}f}"
    return f"{s['mean']:.{digits}f} ± {s['sd']:.{digits}f}"


def diff(a, b):
    return None if a["mean"] is None or b["mean"] is None else b["mean"] - a["mean"]


def fmt_diff(d):
    return "–" if d is None else f"{d:+.4f}"


def cpu_model():
    try:
        return [l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")][0]
    except Exception:
        return ""


def cmd_report(a):
    ref = json.load(open(a.reference))
    def load_runs(paths):
        runs = []
        for path in paths:
            s = json.load(open(path))
            runs.append({
                "seed": s["config"]["seed"],
                "summary": path,
                "version": s.get("version"),
                "epochs": [{"epoch": e["epoch"], "val_ap": e["val_ap_batch_mean"],
                            "val_new_node_ap": e["val_new_node_ap_batch_mean"],
                            "val_ap_pooled": e["val_ap"], "val_new_node_ap_pooled": e["val_new_node_ap"],
                            "val_auc": e["val_auc"], "val_new_node_auc": e["val_new_node_auc"],
                            "train_loss": e["train_loss"], "seconds": e["seconds"],
                            "eval_seconds": e.get("eval_seconds"), "train_events": e["train_events"],
                            "train_events_per_second": e["train_events_per_second"]} for e in s["epochs"]],
                "best_epoch": s.get("best_epoch"),
                "test": {"ap": s["test"]["ap_batch_mean"], "new_node_ap": s["test"]["new_node_ap_batch_mean"],
                         "auc": s["test"]["auc_batch_mean"], "new_node_auc": s["test"]["new_node_auc_batch_mean"],
                         "ap_pooled": s["test"]["ap"], "new_node_ap_pooled": s["test"]["new_node_ap"]},
                "train_events_per_second": s["train_events_per_second"],
                "peak_rss_bytes": s.get("peak_rss_bytes"),
                "data_path": s.get("data_path"),
            })
        return runs

    # mnemo's figures comparable with what the reference prints: mean of per-batch AP.
    mruns = load_runs(a.mnemo)
    bruns = load_runs(a.baseline) if a.baseline else []
    n_epochs = min(min(len(r["epochs"]) for r in ref["runs"]), min(len(r["epochs"]) for r in mruns))

    def per_epoch(runs, key):
        return [stats([r["epochs"][k][key] for r in runs]) for k in range(n_epochs)]

    cmp_epochs = []
    for k in range(n_epochs):
        row = {"epoch": k + 1}
        for key in ("val_ap", "val_new_node_ap", "seconds", "train_events_per_second"):
            rs = stats([r["epochs"][k][key] for r in ref["runs"]])
            ms = stats([r["epochs"][k][key] for r in mruns])
            row[key] = {"reference": rs, "mnemo": ms, "difference": diff(rs, ms)}
        cmp_epochs.append(row)
    test = {}
    for key in ("ap", "new_node_ap", "auc", "new_node_auc"):
        rs = stats([r["test"][key] for r in ref["runs"]])
        ms = stats([r["test"][key] for r in mruns])
        test[key] = {"reference": rs, "mnemo": ms, "difference": diff(rs, ms)}
    ev_ref = stats([r["train_events_per_second"] for r in ref["runs"]])
    ev_mn = stats([r["train_events_per_second"] for r in mruns])
    ratio = ev_mn["mean"] / ev_ref["mean"] if ev_ref["mean"] else None
    # On a shared machine the fastest epoch is the one least slowed by other load.
    fast_ref = max(e["train_events_per_second"] for r in ref["runs"] for e in r["epochs"])
    fast_mn = max(e["train_events_per_second"] for r in mruns for e in r["epochs"])
    tol = a.tolerance
    val_diffs = [row["val_ap"]["difference"] for row in cmp_epochs]
    nn_diffs = [row["val_new_node_ap"]["difference"] for row in cmp_epochs]
    goal = {"metric": "val AP, mean of per-batch AP, mean over runs, every epoch",
            "tolerance": tol,
            "max_abs_difference": max(abs(d) for d in val_diffs),
            "met": all(abs(d) <= tol for d in val_diffs),
            "new_node_max_abs_difference": max(abs(d) for d in nn_diffs),
            "new_node_met": all(abs(d) <= tol for d in nn_diffs)}
    speed = {"goal_ratio": a.speed_goal,
             "met": (ratio is not None and a.speed_goal is not None and ratio >= a.speed_goal)}
    baseline = None
    if bruns:
        # mnemo against an earlier build of itself, same seeds, same data: the accuracy
        # criterion of a speed change (test AP, mean of per-batch AP, mean over seeds).
        ev_b = stats([r["train_events_per_second"] for r in bruns])
        bt = {}
        for key in ("ap", "new_node_ap", "auc", "new_node_auc"):
            bs = stats([r["test"][key] for r in bruns])
            bt[key] = {"baseline": bs, "mnemo": test[key]["mnemo"], "difference": diff(bs, test[key]["mnemo"])}
        bv = [{"epoch": k + 1,
               "val_ap": {"baseline": per_epoch(bruns, "val_ap")[k], "mnemo": per_epoch(mruns, "val_ap")[k]}}
              for k in range(min(n_epochs, min(len(r["epochs"]) for r in bruns)))]
        for row in bv:
            row["val_ap"]["difference"] = diff(row["val_ap"]["baseline"], row["val_ap"]["mnemo"])
        # The runs of a seed ran back to back (train_reference.sh alternates
        # the builds): the median of the per-seed ratios compares the builds
        # under the same machine state, where a 2-CPU guest's speed drifts.
        by_seed = {r["seed"]: r["train_events_per_second"] for r in bruns}
        paired = [r["train_events_per_second"] / by_seed[r["seed"]]
                  for r in mruns if by_seed.get(r["seed"])]
        baseline = {"command": a.baseline_command, "version": bruns[0]["version"],
                    "paired_speedup": {"per_seed": paired,
                                       "median": statistics.median(paired) if paired else None},
                    "seeds": [r["seed"] for r in bruns], "runs": bruns,
                    "test": bt, "val": bv,
                    "train_events_per_second": ev_b,
                    "speedup_mnemo_over_baseline": ev_mn["mean"] / ev_b["mean"] if ev_b["mean"] else None,
                    "reference_ratio": ev_b["mean"] / ev_ref["mean"] if ev_ref["mean"] else None,
                    "goal": {"metric": "test AP (mean of per-batch AP), mean over seeds",
                             "tolerance": a.baseline_tolerance,
                             "difference": bt["ap"]["difference"],
                             "met": abs(bt["ap"]["difference"]) <= a.baseline_tolerance}}
    machine = {"host": socket.gethostname(), "nproc": os.cpu_count(), "cpu": cpu_model()}
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()
    out = {
        "benchmark": "reference_" + a.which,
        "script": a.script,
        "date": now,
        "machine": machine,
        "load": json.loads(a.load) if a.load else None,
        "reference": {"implementation": "twitter-research/tgn", "source": a.ref_source,
                      "commit": a.ref_commit, "command": a.ref_command, "threads": a.threads,
                      "patch": json.load(open(a.ref_patch)) if a.ref_patch else None,
                      "data": json.load(open(a.ref_data)) if a.ref_data else None,
                      "python": a.ref_python, "torch": a.ref_torch,
                      "blas": json.load(open(a.ref_blas)) if a.ref_blas else None,
                      "log": ref.get("log"), "train_events": ref.get("train_events"),
                      "runs": ref["runs"],
                      "mean": {"val_ap": per_epoch(ref["runs"], "val_ap"),
                               "val_new_node_ap": per_epoch(ref["runs"], "val_new_node_ap"),
                               "test": {k: test[k]["reference"] for k in test},
                               "train_events_per_second": ev_ref}},
        "mnemo": {"command": a.mnemo_command, "seeds": [r["seed"] for r in mruns],
                  "version": mruns[0]["version"], "data_path": mruns[0]["data_path"],
                  "runs": mruns,
                  "mean": {"val_ap": per_epoch(mruns, "val_ap"),
                           "val_new_node_ap": per_epoch(mruns, "val_new_node_ap"),
                           "test": {k: test[k]["mnemo"] for k in test},
                           "train_events_per_second": ev_mn}},
        "comparison": {"epochs": cmp_epochs, "test": test,
                       "train_events_per_second": {"reference": ev_ref, "mnemo": ev_mn,
                                                   "ratio_mnemo_over_reference": ratio,
                                                   "fastest_epoch": {"reference": fast_ref, "mnemo": fast_mn,
                                                                     "ratio_mnemo_over_reference": fast_mn / fast_ref},
                                                   "goal": speed},
                       "goal": goal},
        "baseline": baseline,
        "notes": [
            "AP figures are means of per-batch AP over evaluation batches of 200 (what the reference prints); "
            "mnemo's AP over all evaluation events is kept as *_pooled.",
            "sd: sample standard deviation over runs (none for one run). Reference runs are its own "
            "consecutive runs in one process (torch/numpy seeded 0 once); mnemo runs use --seed 0..N-1.",
            "Training events/s: training events of an epoch / the epoch's training seconds, evaluation "
            "excluded (reference: epoch_times of its results file).",
            "Test: the reference tests the last epoch's model, mnemo the best epoch's (the same when the "
            "last epoch has the best val AP).",
        ],
    }
    json.dump(out, open(a.out_json, "w"), indent=1)

    nr, nm = len(ref["runs"]), len(mruns)
    L = []
    L.append(f"# {a.which}: mnemo vs the TGN reference (twitter-research/tgn)")
    L.append("")
    L.append(f"{now}, {machine['cpu']}, {machine['nproc']} CPUs ({machine['host']}); "
             f"reference: {nr} run(s) of `{a.ref_command}` ({a.threads} threads, commit {a.ref_commit or 'unknown'}); "
             f"mnemo: seeds {', '.join(str(r['seed']) for r in mruns)} of `{a.mnemo_command}`.")
    L.append("")
    L.extend(blas_lines(json.load(open(a.ref_blas)) if a.ref_blas else None))
    L.append("AP: mean of per-batch AP (batches of 200), mean ± sample sd over runs; "
             "difference = mnemo − reference.")
    L.append("")
    L.append("| epoch | reference val AP | mnemo val AP | diff | reference new-node val AP | mnemo new-node val AP | diff | reference train s | mnemo train s |")
    L.append("|---|---|---|---|---|---|---|---|---|")
    for row in cmp_epochs:
        L.append(f"| {row['epoch']} | {pm(row['val_ap']['reference'])} | {pm(row['val_ap']['mnemo'])} | "
                 f"{fmt_diff(row['val_ap']['difference'])} | {pm(row['val_new_node_ap']['reference'])} | "
                 f"{pm(row['val_new_node_ap']['mnemo'])} | {fmt_diff(row['val_new_node_ap']['difference'])} | "
                 f"{pm(row['seconds']['reference'], 1)} | {pm(row['seconds']['mnemo'], 1)} |")
    L.append("")
    L.append("| test | reference | mnemo | diff |")
    L.append("|---|---|---|---|")
    for key, name in (("ap", "AP"), ("new_node_ap", "new-node AP"), ("auc", "AUC"), ("new_node_auc", "new-node AUC")):
        L.append(f"| {name} | {pm(test[key]['reference'])} | {pm(test[key]['mnemo'])} | {fmt_diff(test[key]['difference'])} |")
    L.append("")
    L.append("| training events/s | reference | mnemo | mnemo / reference |")
    L.append("|---|---|---|---|")
    L.append(f"| all epochs | {pm(ev_ref, 0)} | {pm(ev_mn, 0)} | {ratio:.1f} |" if ratio else
             f"| all epochs | {pm(ev_ref, 0)} | {pm(ev_mn, 0)} | – |")
    L.append(f"| fastest epoch | {fast_ref:.0f} | {fast_mn:.0f} | {fast_mn / fast_ref:.1f} |")
    L.append("")
    if a.speed_goal is not None and ratio:
        L.append(f"Speed goal mnemo / reference ≥ {a.speed_goal:g} (all epochs): "
                 f"{'met' if speed['met'] else 'NOT met'} ({ratio:.2f}).")
        L.append("")
    if baseline:
        b = baseline
        L.append(f"mnemo against an earlier build of itself (`{a.baseline_command}`, version "
                 f"{b['version']}), same seeds and data:")
        L.append("")
        L.append("| | earlier build | this build | diff |")
        L.append("|---|---|---|---|")
        for row in b["val"]:
            L.append(f"| epoch {row['epoch']} val AP | {pm(row['val_ap']['baseline'])} | {pm(row['val_ap']['mnemo'])} | "
                     f"{fmt_diff(row['val_ap']['difference'])} |")
        for key, name in (("ap", "test AP"), ("new_node_ap", "test new-node AP")):
            L.append(f"| {name} | {pm(b['test'][key]['baseline'])} | {pm(b['test'][key]['mnemo'])} | "
                     f"{fmt_diff(b['test'][key]['difference'])} |")
        sp = b["speedup_mnemo_over_baseline"]
        L.append(f"| training events/s | {pm(b['train_events_per_second'], 0)} | {pm(ev_mn, 0)} | "
                 f"{sp:.2f} x |" if sp else "| training events/s | – | – | – |")
        ps = b["paired_speedup"]
        if ps["median"]:
            L.append("")
            L.append(f"Per seed, the two builds back to back: this build / earlier build "
                     f"training events/s {', '.join(f'{x:.2f}' for x in ps['per_seed'])} "
                     f"(median {ps['median']:.2f} x).")
        L.append("")
        L.append(f"Accuracy goal |test AP − earlier build| ≤ {a.baseline_tolerance}: "
                 f"{'met' if b['goal']['met'] else 'NOT met'} ({b['goal']['difference']:+.4f}).")
        L.append("")
    L.append(f"Goal |mnemo − reference| ≤ {tol} on every epoch's val AP: "
             f"{'met' if goal['met'] else 'NOT met'} (max {goal['max_abs_difference']:.4f}); "
             f"new-node val AP: {'within' if goal['new_node_met'] else 'NOT within'} (max {goal['new_node_max_abs_difference']:.4f}).")
    L.append("")
    if a.load:
        L.append(f"Load average (1 min) at the start/end of each side: {a.load}. On a shared machine "
                 "events/s depend on the other load (the fastest epoch is the least disturbed one); "
                 "the per-run figures are in the JSON file.")
        L.append("")
    L.append("The reference tests its last epoch's model, mnemo its best epoch's. Reference runs are its own "
             "consecutive runs (one process, seeded once); mnemo's are `--seed 0..N-1`.")
    open(a.out_md, "w").write("\n".join(L) + "\n")
    print("\n".join(L))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("patch"); s.add_argument("dir"); s.set_defaults(f=cmd_patch)
    s = sub.add_parser("convert"); s.add_argument("--input", required=True); s.add_argument("--out", required=True)
    s.add_argument("--name", default="wikipedia"); s.add_argument("--max-events", type=int, default=0)
    s.set_defaults(f=cmd_convert)
    s = sub.add_parser("parse"); s.add_argument("dir"); s.add_argument("--prefix", required=True)
    s.add_argument("--runs", type=int, required=True); s.set_defaults(f=cmd_parse)
    s = sub.add_parser("blas")
    s.add_argument("--probe", nargs="+", default=[], help="NAME=parse output of a probe run")
    s.add_argument("--envs", nargs="+", default=[], help="NAME=environment of each configuration")
    s.add_argument("--command", default=None); s.add_argument("--events", type=int, default=None)
    s.add_argument("--rounds", type=int, default=None)
    s.add_argument("--chosen", default=None); s.add_argument("--env", default=None)
    s.set_defaults(f=cmd_blas)
    s = sub.add_parser("report")
    for k in ("--which", "--reference", "--out-json", "--out-md", "--mnemo-command", "--ref-command", "--script"):
        s.add_argument(k, required=True)
    s.add_argument("--mnemo", nargs="+", required=True)
    for k in ("--ref-source", "--ref-commit", "--ref-patch", "--ref-data", "--ref-python", "--ref-torch", "--load",
              "--ref-blas"):
        s.add_argument(k, default=None)
    s.add_argument("--threads", type=int, default=None)
    s.add_argument("--tolerance", type=float, default=0.01)
    s.add_argument("--baseline", nargs="*", default=[],
                   help="summary.json files of an earlier mnemo build, same seeds")
    s.add_argument("--baseline-command", default=None)
    s.add_argument("--baseline-tolerance", type=float, default=0.005)
    s.add_argument("--speed-goal", type=float, default=None,
                   help="goal for mnemo / reference training events/s")
    s.set_defaults(f=cmd_report)
    a = p.parse_args()
    a.f(a)


if __name__ == "__main__":
    main()
