#!/usr/bin/env python3
"""Helpers for bench/dyglib_reference.sh: run DyGLib's TGAT (yule-BUAA/DyGLib,
not part of this project) next to mnemo's TGAT and compare.

  dyglib.py patch DIR
      minimal patch of a copy of DyGLib, in place, idempotent: Python 3.11
      (random.sample() no longer accepts a set; older Pythons converted it
      with tuple(), so the same new-node hold-out is drawn), one log line
      per epoch with the training seconds (evaluation excluded), which
      DyGLib does not log, and DYGLIB_FIRST_RUN=S in the environment to run
      only its runs S..N-1 (a run's results depend only on its seed: its
      samplers are re-seeded at every epoch and evaluation).
  dyglib.py convert --input FILE --out DIR --name NAME [--max-events N]
      our "u i ts" event file -> DyGLib's processed_data/NAME/ml_NAME.csv,
      ml_NAME.npy (edge features, row 0 unused) and ml_NAME_node.npy, with
      zero features (DyGLib pads every data set to 172 columns anyway). Ids
      are kept (they start at 1; 0 is DyGLib's padding node); times are
      rebased to the first event, as mnemo does (DyGLib keeps sampled
      neighbour times in float32, whose resolution at Unix times is 64 s).
  dyglib.py parse DIR --model TGAT --dataset NAME --runs N
      DyGLib's logs (logs/MODEL/NAME/MODEL_seedS/*.log) -> JSON on stdout:
      per run, per epoch train loss, val AP/AUC, new-node val AP/AUC (means
      of per-batch values over batches of --batch_size, as it logs them),
      training seconds (from the patch's log line), and the final
      (best-model) test AP/AUC and new-node test AP/AUC.
  dyglib.py report --which W --reference REF.json --mnemo S.json... ...
      bench/results/reference_tgat-dyglib-W.json and .md.

Run with the Python that runs DyGLib (/usr/bin/python3 on Debian 12).
"""
import argparse
import datetime
import glob
import json
import os
import re
import socket
import sys

sys.dont_write_bytecode = True  # no bench/__pycache__ from importing reference.py
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference import stats, pm, diff, fmt_diff, cpu_model, apply_patches, read_events, write_ml_files  # noqa: E402

FEATURE_DIM = 172  # DyGLib pads node and edge features to 172 columns

# (file, old, new): the whole patch.
PATCHES = [
    ("utils/DataLoader.py",
     "new_test_node_set = set(random.sample(test_node_set, ",
     "new_test_node_set = set(random.sample(tuple(test_node_set), "),
    ("train_link_prediction.py",
     "    for run in range(args.num_runs):\n",
     "    for run in range(int(os.environ.get('DYGLIB_FIRST_RUN', '0')), args.num_runs):  # mnemo bench\n"),
    ("train_link_prediction.py",
     "            train_idx_data_loader_tqdm = tqdm(train_idx_data_loader, ncols=120)\n",
     "            train_start_time = time.time()  # mnemo bench: training seconds\n"
     "            train_idx_data_loader_tqdm = tqdm(train_idx_data_loader, ncols=120)\n"),
    ("train_link_prediction.py",
     "            if args.model_name in ['JODIE', 'DyRep', 'TGN']:\n"
     "                # backup memory bank after training so it can be used for new validation nodes\n",
     "            logger.info(f'mnemo bench: epoch {epoch + 1} train seconds {time.time() - train_start_time:.3f} '\n"
     "                        f'train events {train_data.num_interactions}')\n"
     "            if args.model_name in ['JODIE', 'DyRep', 'TGN']:\n"
     "                # backup memory bank after training so it can be used for new validation nodes\n"),
]


def cmd_patch(a):
    apply_patches(a.dir, PATCHES, "DyGLib 3aacc36")


def cmd_convert(a):
    import numpy as np
    u, i, ts = read_events(a.input)
    # mnemo orders events by time (stably); so does this.
    order = np.argsort(ts, kind="stable")
    u, i, ts = u[order], i[order], ts[order]
    if a.max_events:
        u, i, ts = u[:a.max_events], i[:a.max_events], ts[:a.max_events]
    if min(u.min(), i.min()) < 1:
        sys.exit("convert: ids must start at 1 (0 is DyGLib's padding node)")
    t0 = float(ts[0])
    ts = ts - t0
    n = write_ml_files(os.path.join(a.out, a.name), a.name, u, i, ts, FEATURE_DIM)
    info = {"input": a.input, "name": a.name, "events": n, "nodes": int(len(set(u) | set(i))),
            "max_id": int(max(u.max(), i.max())), "time_offset": t0, "time": [float(ts[0]), float(ts[-1])],
            "feature_dim": FEATURE_DIM, "features": "zero"}
    json.dump(info, sys.stdout)
    print()


LINE = re.compile(r" - root - INFO - (.*)$")
FLOAT = r"([-+0-9.eE]+|nan)"


def parse_log(path):
    run = {"epochs": [], "final": {}, "log": path}
    final = False
    for raw in open(path):
        m = LINE.search(raw.rstrip("\n"))
        if not m:
            continue
        msg = m.group(1)
        if mm := re.match(r"mnemo bench: epoch (\d+) train seconds ([0-9.]+) train events (\d+)", msg):
            run["epochs"].append({"epoch": int(mm.group(1)), "train_seconds": float(mm.group(2)),
                                  "train_events": int(mm.group(3))})
            continue
        if mm := re.match(r"Epoch: (\d+), learning rate: \S+, train loss: " + FLOAT, msg):
            run["epochs"][-1]["train_loss"] = float(mm.group(2))
            continue
        if msg.startswith("get final performance"):
            final = True
            continue
        if mm := re.match(r"Run \d+ cost ([0-9.]+) seconds", msg):
            run["run_seconds"] = float(mm.group(1))
            continue
        mm = re.match(r"(train|validate|new node validate|test|new node test) (average_precision|roc_auc), " + FLOAT + "$", msg)
        if not mm:
            continue
        what, metric, v = mm.group(1), mm.group(2), float(mm.group(3))
        key = {"train": "train", "validate": "val", "new node validate": "val_new_node",
               "test": "test", "new node test": "test_new_node"}[what] + ("_ap" if metric == "average_precision" else "_auc")
        if final:
            run["final"][key] = v
        elif run["epochs"]:
            run["epochs"][-1][key] = v
    return run


def cmd_parse(a):
    runs = []
    for s in range(a.runs):
        logs = sorted(glob.glob(os.path.join(a.dir, "logs", a.model, a.dataset, f"{a.model}_seed{s}", "*.log")),
                      key=os.path.getmtime)
        if not logs:
            sys.exit(f"parse: no log for seed {s} in {a.dir}/logs/{a.model}/{a.dataset}")
        r = parse_log(logs[-1])
        r["seed"] = s
        for e in r["epochs"]:
            e["train_events_per_second"] = e["train_events"] / e["train_seconds"]
        if not r["epochs"] or "test_ap" not in r["final"]:
            sys.exit(f"parse: {logs[-1]} is incomplete")
        ev = sum(e["train_events"] for e in r["epochs"])
        sec = sum(e["train_seconds"] for e in r["epochs"])
        r["train_events_per_second"] = ev / sec
        r["test"] = {"ap": r["final"]["test_ap"], "new_node_ap": r["final"]["test_new_node_ap"],
                     "auc": r["final"]["test_auc"], "new_node_auc": r["final"]["test_new_node_auc"]}
        runs.append(r)
    # The split DyGLib prints (stdout, not its log): ../dyglib.out next to DIR.
    split = {}
    out = os.path.join(a.dir, "..", "dyglib.out")
    if os.path.exists(out):
        names = {"The dataset": "events", "The training dataset": "train_events",
                 "The validation dataset": "val_events", "The test dataset": "test_events",
                 "The new node validation dataset": "new_node_val_events",
                 "The new node test dataset": "new_node_test_events"}
        for line in open(out, errors="replace"):
            if mm := re.match(r"(The [a-z ]*dataset) has (\d+) interactions", line):
                if mm.group(1) in names:
                    split[names[mm.group(1)]] = int(mm.group(2))
    json.dump({"runs": runs, "train_events": runs[0]["epochs"][0]["train_events"], "split": split},
              sys.stdout, indent=1)
    print()


def cmd_report(a):
    ref = json.load(open(a.reference))
    mruns = []
    for path in a.mnemo:
        s = json.load(open(path))
        mruns.append({
            "seed": s["config"]["seed"], "summary": path, "version": s.get("version"),
            "epochs": [{"epoch": e["epoch"], "val_ap": e["val_ap_batch_mean"],
                        "val_new_node_ap": e["val_new_node_ap_batch_mean"],
                        "val_ap_pooled": e["val_ap"], "val_new_node_ap_pooled": e["val_new_node_ap"],
                        "train_loss": e["train_loss"], "seconds": e["seconds"],
                        "train_events": e["train_events"],
                        "train_events_per_second": e["train_events_per_second"]} for e in s["epochs"]],
            "best_epoch": s.get("best_epoch"),
            "test": {"ap": s["test"]["ap_batch_mean"], "new_node_ap": s["test"]["new_node_ap_batch_mean"],
                     "auc": s["test"]["auc_batch_mean"], "new_node_auc": s["test"]["new_node_auc_batch_mean"],
                     "ap_pooled": s["test"]["ap"], "new_node_ap_pooled": s["test"]["new_node_ap"]},
            "train_events_per_second": s["train_events_per_second"],
            "data_path": s.get("data_path"),
        })
    rruns = ref["runs"]
    n_epochs = min(min(len(r["epochs"]) for r in rruns), min(len(r["epochs"]) for r in mruns))
    epochs = []
    for k in range(n_epochs):
        row = {"epoch": k + 1}
        for key in ("val_ap", "val_new_node_ap"):
            rs = stats([r["epochs"][k].get(key) for r in rruns])
            ms = stats([r["epochs"][k][key] for r in mruns])
            row[key] = {"dyglib": rs, "mnemo": ms, "difference": diff(rs, ms)}
        epochs.append(row)
    test = {}
    for key in ("ap", "new_node_ap", "auc", "new_node_auc"):
        rs = stats([r["test"][key] for r in rruns])
        ms = stats([r["test"][key] for r in mruns])
        test[key] = {"dyglib": rs, "mnemo": ms, "difference": diff(rs, ms),
                     "dyglib_per_seed": [r["test"][key] for r in rruns],
                     "mnemo_per_seed": [r["test"][key] for r in mruns]}
    ev_r = stats([r["train_events_per_second"] for r in rruns])
    ev_m = stats([r["train_events_per_second"] for r in mruns])
    ratio = ev_m["mean"] / ev_r["mean"] if ev_r["mean"] else None
    tol = a.tolerance
    goal = {"metric": "test AP (mean of per-batch AP, batches of 200), mean over seeds",
            "tolerance": tol, "difference": test["ap"]["difference"],
            "met": abs(test["ap"]["difference"]) <= tol,
            "new_node_difference": test["new_node_ap"]["difference"],
            "new_node_met": abs(test["new_node_ap"]["difference"]) <= tol}
    flags = []
    try:
        have = next(l for l in open("/proc/cpuinfo") if l.startswith("flags")).split(":", 1)[1].split()
        flags = [f for f in ("avx2", "fma", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16") if f in have]
    except Exception:
        pass
    machine = {"host": socket.gethostname(), "nproc": os.cpu_count(), "cpu": cpu_model(), "flags": flags}
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()
    msplit = json.load(open(a.mnemo[0]))["data"]
    rsplit = ref.get("split") or {}
    keys = ("events", "train_events", "val_events", "new_node_val_events", "test_events", "new_node_test_events")
    split = {"dyglib": {k: rsplit.get(k) for k in keys}, "mnemo": {k: msplit.get(k) for k in keys}}
    split["same"] = all(split["dyglib"][k] == split["mnemo"][k] for k in keys)
    notes = [("The same split on both sides" if split["same"] else "The splits DIFFER") + ": " +
             ", ".join(f"{k.replace('_events', '').replace('_', '-')} {split['dyglib'][k]}/{split['mnemo'][k]}"
                       for k in keys) + " (DyGLib/mnemo events; chronological 70/15/15 by time quantiles, "
             "10% of the nodes held out as new nodes with Python's random.seed(2020), as in the TGN reference).",
             "Evaluation negatives on both sides: the positive source with a destination drawn uniformly "
             "from the unique destinations of all events (val, test) or of the new-node test events "
             "(new-node test), fixed seeds; DyGLib draws new-node validation negatives from the new-node "
             "validation events' destinations, mnemo from all events' (new-node val AP differs in this; "
             "it selects no model on either side). Training negatives: unique destinations of the "
             "training events, one per positive.",
             "Neighbour sampling on both sides: 10 per layer, uniformly with replacement among all "
             "earlier events (strictly before the query time), sorted by time; training on the "
             "training graph, evaluation on all events.",
             "Model selection: DyGLib keeps the epoch whose val AP and AUC are both at least their best "
             "so far, mnemo the epoch with the best val AP; both test that model.",
             "Model differences: DyGLib's TGAT (Xu et al.) attends with scaled dot products over "
             "[node feature 172, edge feature 172, time 100] (attention width 272, zero features padded "
             "to 172), one time encoder shared by the layers, a residual connection and LayerNorm in "
             "the attention and an MLP merge of [attention output, raw node feature] after it; it "
             "re-samples the first-hop neighbours when it computes a node's own first-layer embedding. "
             "mnemo's TGAT follows TGL: LeakyReLU(q . k) scores over [embedding, time], attention width "
             "172 (--embedding-dim), a time encoder per layer, LayerNorm(ReLU(W [aggregate, own "
             "embedding])), no feature columns for featureless data, and a target's first-layer "
             "embedding from the same first-hop sample the second layer attends over.",
             "DyGLib's samplers are seeded independently of its run seed (training 0, evaluation 1, reset "
             "every epoch and evaluation); its run seed sets the initialization and the training "
             "negatives. mnemo's --seed sets initialization, sampling and training negatives."]
    notes += [n for n in (a.note or [])]
    out = {"benchmark": f"reference_tgat-dyglib-{a.which}", "script": a.script, "date": now,
           "machine": machine, "split": split, "load": json.loads(a.load) if a.load else None,
           "dyglib": {"implementation": "yule-BUAA/DyGLib", "source": a.ref_source, "commit": a.ref_commit,
                      "command": a.ref_command, "threads": a.threads,
                      "patch": json.load(open(a.ref_patch)) if a.ref_patch else None,
                      "data": json.load(open(a.ref_data)) if a.ref_data else None,
                      "python": a.ref_python, "torch": a.ref_torch,
                      "train_events": ref.get("train_events"), "runs": rruns},
           "mnemo": {"command": a.mnemo_command, "seeds": [r["seed"] for r in mruns],
                     "version": mruns[0]["version"], "data_path": mruns[0]["data_path"], "runs": mruns},
           "comparison": {"epochs": epochs, "test": test,
                          "train_events_per_second": {"dyglib": ev_r, "mnemo": ev_m,
                                                      "ratio_mnemo_over_dyglib": ratio},
                          "goal": goal},
           "notes": notes}
    json.dump(out, open(a.out_json, "w"), indent=1)

    L = [f"# TGAT on {a.which}: mnemo vs DyGLib (yule-BUAA/DyGLib)", ""]
    L.append(f"{machine['cpu']}, {machine['nproc']} CPUs ({', '.join(machine['flags']) or 'flags unknown'}); DyGLib: seeds "
             f"{', '.join(str(r['seed']) for r in rruns)} of `{a.ref_command}` ({a.threads} thread(s), "
             f"commit {a.ref_commit or 'unknown'}, Python {a.ref_python}, torch {a.ref_torch}); "
             f"mnemo: seeds {', '.join(str(r['seed']) for r in mruns)} of `{a.mnemo_command}`.")
    L.append("")
    L.append("AP: mean of per-batch AP over evaluation batches of 200 (what DyGLib logs), "
             "mean ± sample sd over seeds; difference = mnemo − DyGLib.")
    L.append("")
    L.append("| test | DyGLib | mnemo | diff | DyGLib per seed | mnemo per seed |")
    L.append("|---|---|---|---|---|---|")
    for key, name in (("ap", "AP"), ("new_node_ap", "new-node AP"), ("auc", "AUC"), ("new_node_auc", "new-node AUC")):
        t = test[key]
        L.append(f"| {name} | {pm(t['dyglib'])} | {pm(t['mnemo'])} | {fmt_diff(t['difference'])} | "
                 f"{', '.join(f'{v:.4f}' for v in t['dyglib_per_seed'])} | "
                 f"{', '.join(f'{v:.4f}' for v in t['mnemo_per_seed'])} |")
    L.append("")
    L.append("| epoch | DyGLib val AP | mnemo val AP | diff | DyGLib new-node val AP | mnemo new-node val AP |")
    L.append("|---|---|---|---|---|---|")
    for row in epochs:
        L.append(f"| {row['epoch']} | {pm(row['val_ap']['dyglib'])} | {pm(row['val_ap']['mnemo'])} | "
                 f"{fmt_diff(row['val_ap']['difference'])} | {pm(row['val_new_node_ap']['dyglib'])} | "
                 f"{pm(row['val_new_node_ap']['mnemo'])} |")
    L.append("")
    L.append("| training events/s (evaluation excluded) | DyGLib | mnemo | mnemo / DyGLib |")
    L.append("|---|---|---|---|")
    L.append(f"| all epochs | {pm(ev_r, 0)} | {pm(ev_m, 0)} | {ratio:.1f} |" if ratio else
             f"| all epochs | {pm(ev_r, 0)} | {pm(ev_m, 0)} | – |")
    L.append("")
    L.append(f"Goal |mnemo − DyGLib| ≤ {tol} on test AP: {'met' if goal['met'] else 'NOT met'} "
             f"({goal['difference']:+.4f}); new-node test AP: "
             f"{'within' if goal['new_node_met'] else 'NOT within'} ({goal['new_node_difference']:+.4f}).")
    L.append("")
    if a.load:
        L.append(f"Load average (1 min) at the start/end of each run (mnemo: per seed): {a.load} (a shared 2-CPU machine: "
                 "events/s depend on the other load).")
        L.append("")
    for n in notes:
        L.append(f"* {n}")
    open(a.out_md, "w").write("\n".join(L) + "\n")
    print("\n".join(L))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("patch"); s.add_argument("dir"); s.set_defaults(f=cmd_patch)
    s = sub.add_parser("convert"); s.add_argument("--input", required=True); s.add_argument("--out", required=True)
    s.add_argument("--name", required=True); s.add_argument("--max-events", type=int, default=0)
    s.set_defaults(f=cmd_convert)
    s = sub.add_parser("parse"); s.add_argument("dir"); s.add_argument("--model", default="TGAT")
    s.add_argument("--dataset", required=True); s.add_argument("--runs", type=int, required=True)
    s.set_defaults(f=cmd_parse)
    s = sub.add_parser("report")
    for k in ("--which", "--reference", "--out-json", "--out-md", "--mnemo-command", "--ref-command", "--script"):
        s.add_argument(k, required=True)
    s.add_argument("--mnemo", nargs="+", required=True)
    for k in ("--ref-source", "--ref-commit", "--ref-patch", "--ref-data", "--ref-python", "--ref-torch", "--load"):
        s.add_argument(k, default=None)
    s.add_argument("--threads", type=int, default=None)
    s.add_argument("--tolerance", type=float, default=0.01)
    s.add_argument("--note", action="append", help="a line for the notes (repeatable)")
    s.set_defaults(f=cmd_report)
    a = p.parse_args()
    a.f(a)


if __name__ == "__main__":
    main()
