#!/usr/bin/env python3
"""Helpers for bench/tgl_reference.sh: run TGL's APAN and DySAT
(amazon-research/tgl, not part of this project) next to mnemo's and compare.

  tgl.py patch DIR --model M --epochs E --threads T [--dgl FILE]
      minimal patch of a copy of TGL, in place, idempotent, so that it runs
      on a CPU-only machine with DGL 1.1: every .cuda() becomes .cpu() and
      every 'cuda:0' 'cpu' (train.py, utils.py, layers.py, memorys.py);
      DGL 1.x's copy_u/copy_e for the removed copy_src/copy_edge;
      torch_scatter imported only where present (only mail_combine 'mean'
      uses it; APAN's is 'last'); gen_graph.py's np.int (gone from numpy
      1.24) as np.int64; train.py seeds from TGL_SEED (its set_seed(0) is
      commented out), keeps the epoch of the best val AP over all epochs
      (TGL's 'e > 2' keeps none in 3 epochs), and with TGL_LEARN_NODE_FEATS=1
      makes the node features a parameter of the model (a learned embedding
      per node, as mnemo's DySAT has for featureless data; trained, saved
      and restored with the model); with TGL_NEG=destinations (an ablation,
      off by default) it draws negatives as mnemo does: from the training
      events' unique destinations in training, from all events' in
      evaluation; with TGL_TEST=continue (an ablation, off by default) it
      also tests after each epoch's validation, from the memory validation
      left (as mnemo tests the best epoch), before its own final test, which
      replays training and validation from a reset memory; with
      TGL_PER_ROOT_WINDOWS=1 (an ablation, off by default; sampler_core.cpp,
      rebuilt) its sampler finds every root's window by binary search at the
      root's own time instead of through the per-node pointers it advances
      to the latest time of the node in the batch; with TGL_MASK_EMPTY_MAILS=1
      (an ablation, off by default) APAN's memory attends over the mailbox
      slots that hold a mail (mail time > 0), as mnemo's does, instead of
      all of them; TGAT's first layer on data without edge features
      reads the time encoding alone as keys and values (TGL reads edge
      features there unconditionally); with TGL_MAIL_ORDER=latest (an ablation, off by default)
      APAN keeps, of the mails that reach a node in a batch, the one mnemo
      keeps (the latest event's; of one event, the node's own mail before a
      neighbour's) instead of the last one it lists (its roots, then every
      root's neighbours in root order: a node's copy as the neighbour of a
      later-listed root wins over its own mail). Writes config/M-bench.yml: TGL's
      config/M.yml with E epochs and T sampler threads. --dgl FILE: DGL
      1.1.3's backend/pytorch/tensor.py, whose version check refuses
      Debian's torch '1.13.0a0' (a pre-release tag of 1.13.0).
  tgl.py convert --input FILE --out DIR --name NAME [--node-features D]
      our "u i ts" event file -> TGL's DATA/NAME/edges.csv with mnemo's
      chronological split (70/15/15 by time quantiles, numpy's; 10% of the
      nodes seen after the validation cut-off held out as new nodes with
      Python's random.seed(2020), as the TGN reference and mnemo's
      tgn-reference protocol draw them): the training events that touch a
      held-out node are dropped (mnemo does not train on them), ext_roll
      0/1/2 = train/val/test. Ids are renumbered 0..N-1 (TGL draws negatives
      uniformly from 0..N-1); times are rebased to the first event (TGL's
      sampler keeps times in float32). --node-features D also writes
      node_features.pt, N x D standard normal (seed 0; the initial value of
      the learned embedding under TGL_LEARN_NODE_FEATS=1, as torch's
      Embedding initializes mnemo's). No edge features.
  tgl.py window-counts DIR --data NAME --config FILE [--batch B]
      neighbours per root that TGL's sampler returns for the test events
      (positive roots, batches of B in order), by snapshot, with its
      per-node pointers and with TGL_PER_ROOT_WINDOWS=1, against the events
      each root's window holds (capped at the neighbours asked for) -> JSON.
      DIR: the patched, built copy with its DATA.
  tgl.py parse OUT... --train-events N [--test-after-val]
      TGL's stdout (one file per seed, named tgl-seedS.out) -> JSON: per
      epoch train loss, val AP/AUC (means of per-batch values over batches
      of the training batch size, as TGL logs them), training seconds (TGL's
      'total time': sampling, preparation, step and memory update,
      evaluation excluded), and the final (best-epoch) test AP/AUC;
      --test-after-val: the best epoch's test after validation instead
      (TGL_TEST=continue runs; the replayed final test kept as test_replay).
  tgl.py report --model M --which W --reference REF.json --mnemo S.json...
      [--ablation REF2.json] [--ablation-test REF3.json]
      [--ablation-windows REF4.json] [--ablation-masked REF5.json]
      [--ablation-mail REF6.json] [--window-counts COUNTS.json] [--as-mnemo] ...
      bench/results/reference_M-tgl-W.json and .md; REF2: TGL's runs with
      TGL_NEG=destinations, REF3: with TGL_TEST=continue (parse
      --test-after-val), REF4: with TGL_PER_ROOT_WINDOWS=1 (APAN: and
      TGL_TEST=continue), REF5 (--ablation-masked, APAN): with
      TGL_MASK_EMPTY_MAILS=1 and TGL_NEG=destinations as well, REF6
      (--ablation-mail, APAN): REF5's with TGL_MAIL_ORDER=latest, rows of
      their own; --as-mnemo: REF is TGL as mnemo (APAN: the REF5
      variables, parsed with --test-after-val), said in the title and notes;
      COUNTS:
      window-counts' output.

Run with the Python that runs TGL (a venv over /usr/bin/python3 with DGL).
"""
import argparse
import datetime
import json
import os
import random
import re
import socket
import sys

sys.dont_write_bytecode = True  # no bench/__pycache__ from importing reference.py
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference import stats, pm, diff, fmt_diff, cpu_model, read_events, ci95_difference  # noqa: E402

# (file, old, new): each `old` must occur exactly once (or `new` be there).
PATCHES = [
    ("layers.py", "dgl.function.copy_src('v', 'm')", "dgl.function.copy_u('v', 'm')"),
    ("layers.py", "dgl.function.copy_edge('v', 'm')", "dgl.function.copy_e('v', 'm')"),
    ("memorys.py", "from torch_scatter import scatter\n",
     "try:\n    from torch_scatter import scatter\n"
     "except ImportError:  # mnemo bench: only mail_combine 'mean' uses it\n    scatter = None\n"),
    ("train.py", "# set_seed(0)\n",
     "set_seed(int(os.environ.get('TGL_SEED', '0')))  # mnemo bench\n"),
    ("train.py", "    if e > 2 and ap > best_ap:\n",
     "    if ap > best_ap:  # mnemo bench: the best val AP over all epochs, as mnemo\n"),
    ("train.py", "mailbox = MailBox(memory_param,",
     "if os.environ.get('TGL_LEARN_NODE_FEATS') == '1' and node_feats is not None:  # mnemo bench\n"
     "    model.node_emb = torch.nn.Parameter(node_feats)\n"
     "    node_feats = model.node_emb\n"
     "mailbox = MailBox(memory_param,"),
    ("train.py", "neg_link_sampler = NegLinkSampler(g['indptr'].shape[0] - 1)\n",
     "neg_link_sampler = NegLinkSampler(g['indptr'].shape[0] - 1)\n"
     "if os.environ.get('TGL_NEG') == 'destinations':  # mnemo bench ablation: mnemo's negatives\n"
     "    class DestinationNegSampler:\n"
     "        pools = {True: np.unique(df.dst.values[:train_edge_end]), False: np.unique(df.dst.values)}\n"
     "        def sample(self, n):\n"
     "            return np.random.choice(self.pools[model.training], size=n)\n"
     "    neg_link_sampler = DestinationNegSampler()\n"),
    ("train.py", "    ap, auc = eval('val')\n",
     "    ap, auc = eval('val')\n"
     "    if os.environ.get('TGL_TEST') == 'continue':  # mnemo bench ablation: test from the post-validation memory\n"
     "        test_ap, test_auc = eval('test')\n"
     "        print('\\ttest after val AP:{:4f}  AUC:{:4f}'.format(test_ap, test_auc))\n"),
]
PATCHES.append(
    ("memorys.py", "            att = torch.nn.functional.softmax(att, dim=1)\n",
     "            if __import__('os').environ.get('TGL_MASK_EMPTY_MAILS') == '1':  # mnemo bench ablation: filled slots only\n"
     "                filled = (b.srcdata['mail_ts'] > 0)[:, :, None]\n"
     "                att = torch.nan_to_num(torch.nn.functional.softmax(att.masked_fill(~filled, float('-inf')), dim=1), nan=0.0)\n"
     "            else:\n"
     "                att = torch.nn.functional.softmax(att, dim=1)\n"))
PATCHES.append(
    ("memorys.py", "                    nid = block.dstdata['ID']\n",
     "                    nid = block.dstdata['ID']\n"
     "                    if __import__('os').environ.get('TGL_MAIL_ORDER') == 'latest':  # mnemo bench ablation: mnemo's mail per node\n"
     "                        # listed so that the last one of a node (the one kept) is mnemo's: the latest event's,\n"
     "                        # its own mail (source, destination) before a neighbour's (of the source, the destination)\n"
     "                        nr = num_true_edges * 2\n"
     "                        root = torch.cat([torch.arange(nr, device=nid.device), block.edges()[0].long()])\n"
     "                        key = 4 * (root % num_true_edges) + (root < num_true_edges).long()\n"
     "                        key[:nr] += 2\n"
     "                        order = torch.sort(key, stable=True)[1]\n"
     "                        nid, mail, mail_ts = nid[order], mail[order], mail_ts[order]\n"))
# TGAT on featureless data: the first layer (no node features) reads edge
# features unconditionally; without them its keys and values are the time
# encoding alone, as mnemo's.
for w in ("k", "v"):
    PATCHES.append(
        ("layers.py", f"                {w.upper()} = self.w_{w}(torch.cat([b.edata['f'], time_feat], dim=1))\n",
         f"                {w.upper()} = self.w_{w}(torch.cat(([b.edata['f']] if self.dim_edge_feat > 0 else []) + [time_feat], dim=1))"
         "  # mnemo bench: no edge features\n"))
PATCHES.append(
    ("sampler_core.cpp",
     "                if (i==0)\n                    sample_layer(root_nodes, root_ts, num_neighbors[i], use_ptr, true);",
     "                if (std::getenv(\"TGL_PER_ROOT_WINDOWS\") != nullptr)  // mnemo bench ablation: per-root windows\n"
     "                    use_ptr = false;\n"
     "                if (i==0)\n                    sample_layer(root_nodes, root_ts, num_neighbors[i], use_ptr, true);"))
# (file, old, new): every occurrence.
REPLACE_ALL = [(f, ".cuda()", ".cpu()") for f in ("train.py", "utils.py", "memorys.py")] + \
              [(f, "'cuda:0'", "'cpu'") for f in ("utils.py", "layers.py", "memorys.py")] + \
              [("gen_graph.py", "dtype=np.int)", "dtype=np.int64)")]
DGL_CHECK = ('if version.parse(th.__version__) < version.parse("1.13.0"):',
             'if version.parse(th.__version__) < version.parse("1.13.0a0"):  # mnemo bench: Debian\'s 1.13.0a0')


def patch_file(path, old, new, every, log):
    text = open(path).read()
    n = text.count(old)
    # every: done when `old` is gone (`new` may occur in the original: .cpu());
    # once: done when `new` is there (`new` may contain `old`).
    if (n == 0 if every else new in text):
        log.append({"file": path, "change": f"{old!r} -> {new!r}", "status": "already applied"})
        return
    if n == 0 or (n != 1 and not every):
        sys.exit(f"patch: expected {'some' if every else 'one'} {old!r} in {path}, found {n}")
    open(path, "w").write(text.replace(old, new))
    log.append({"file": path, "change": f"{old!r} -> {new!r}", "status": f"applied ({n}x)"})


def cmd_patch(a):
    import yaml
    log = []
    for rel, old, new in REPLACE_ALL:
        patch_file(os.path.join(a.dir, rel), old, new, True, log)
    for rel, old, new in PATCHES:
        patch_file(os.path.join(a.dir, rel), old, new, False, log)
    if a.dgl:
        patch_file(a.dgl, *DGL_CHECK, False, log)
    conf = yaml.safe_load(open(os.path.join(a.dir, "config", f"{a.model}.yml")))
    conf["train"][0]["epoch"] = a.epochs
    conf["sampling"][0]["num_thread"] = a.threads
    with open(os.path.join(a.dir, "config", f"{a.model}-bench.yml"), "w") as f:
        yaml.safe_dump(conf, f, sort_keys=False)
    log.append({"file": f"config/{a.model}-bench.yml", "change": f"config/{a.model}.yml with train.epoch {a.epochs}, "
                f"sampling.num_thread {a.threads}", "config": conf})
    json.dump(log, sys.stdout, indent=1)
    print()


def numpy_quantile_split(ts):
    import numpy as np
    return [float(q) for q in np.quantile(ts, [0.70, 0.85])]


def reference_split(path):
    """mnemo's tgn-reference split of an event file: its events ordered by
    time (stably) and rebased to the first, the validation and test
    cut-offs, the held-out new nodes, which events are kept (not a
    training-period event touching a held-out node) and each event's part
    (0 train, 1 val, 2 test)."""
    import numpy as np
    u, i, ts = read_events(path)
    order = np.argsort(ts, kind="stable")  # mnemo orders events by time, stably
    u, i, ts = u[order], i[order], ts[order]
    t0 = float(ts[0])
    ts = ts - t0
    val_time, test_time = numpy_quantile_split(ts)
    # The TGN reference's new-node hold-out (mnemo's ReferenceHoldOut): the
    # file's ids of the nodes seen after the validation cut-off.
    late = ts > val_time
    n_nodes = len(set(u.tolist()) | set(i.tolist()))
    random.seed(2020)
    test_nodes = set(u[late].tolist()).union(set(i[late].tolist()))
    held = set(random.sample(tuple(test_nodes), int(0.1 * n_nodes)))
    in_train_time = ts <= val_time
    touches = np.array([a_ in held or b_ in held for a_, b_ in zip(u.tolist(), i.tolist())])
    keep = ~(in_train_time & touches)
    roll = np.where(in_train_time, 0, np.where(ts <= test_time, 1, 2))
    return u, i, ts, t0, val_time, test_time, held, keep, roll


def cmd_convert(a):
    import numpy as np
    import pandas as pd
    u, i, ts, t0, val_time, test_time, held, keep, roll = reference_split(a.input)
    ids = {v: k for k, v in enumerate(sorted(set(u.tolist()) | set(i.tolist())))}
    src = np.array([ids[v] for v in u.tolist()])[keep]
    dst = np.array([ids[v] for v in i.tolist()])[keep]
    roll, tk = roll[keep], ts[keep]
    out = os.path.join(a.out, a.name)
    os.makedirs(out, exist_ok=True)
    df = pd.DataFrame({"src": src, "dst": dst, "time": tk, "int_roll": roll, "ext_roll": roll})
    df.to_csv(os.path.join(out, "edges.csv"))  # the index is TGL's 'Unnamed: 0' (edge id)
    if a.node_features:
        import torch
        g = torch.Generator().manual_seed(0)
        torch.save(torch.randn(len(ids), a.node_features, generator=g), os.path.join(out, "node_features.pt"))
    in_train = np.zeros(len(ids), dtype=bool)
    in_train[src[roll == 0]] = True
    in_train[dst[roll == 0]] = True
    new_val = int(((roll == 1) & (~in_train[src] | ~in_train[dst])).sum())
    new_test = int(((roll == 2) & (~in_train[src] | ~in_train[dst])).sum())
    info = {"input": a.input, "name": a.name, "events": int(len(u)), "nodes": len(ids),
            "train_events": int((roll == 0).sum()), "val_events": int((roll == 1).sum()),
            "test_events": int((roll == 2).sum()), "new_node_val_events": new_val,
            "new_node_test_events": new_test, "held_out_nodes": len(held),
            "dropped_training_events": int((~keep).sum()), "time_offset": t0,
            "val_time": val_time, "test_time": test_time,
            "node_features": f"{a.node_features} (standard normal, seed 0)" if a.node_features else None,
            "edge_features": None}
    json.dump(info, sys.stdout)
    print()


FLOAT = r"([-+0-9.eE]+|nan)"


def parse_out(path):
    run = {"epochs": [], "out": path}
    for line in open(path, errors="replace"):
        line = line.strip()
        if mm := re.match(r"Epoch (\d+):$", line):
            run["epochs"].append({"epoch": int(mm.group(1)) + 1})
        elif mm := re.match(r"train loss:" + FLOAT + r"\s+val ap:" + FLOAT + r"\s+val auc:" + FLOAT, line):
            run["epochs"][-1].update(train_loss=float(mm.group(1)), val_ap=float(mm.group(2)),
                                     val_auc=float(mm.group(3)))
        elif mm := re.match(r"total time:([0-9.]+)s sample time:([0-9.]+)s prep time:([0-9.]+)s", line):
            run["epochs"][-1].update(train_seconds=float(mm.group(1)), sample_seconds=float(mm.group(2)),
                                     prep_seconds=float(mm.group(3)))
        elif mm := re.match(r"Loading model at epoch (\d+)", line):
            run["best_epoch"] = int(mm.group(1)) + 1
        elif mm := re.match(r"test after val AP:" + FLOAT + r"\s+AUC:" + FLOAT, line):
            run["epochs"][-1].update(test_after_val_ap=float(mm.group(1)), test_after_val_auc=float(mm.group(2)))
        elif mm := re.match(r"test AP:" + FLOAT + r"\s+test AUC:" + FLOAT, line):
            run["test"] = {"ap": float(mm.group(1)), "auc": float(mm.group(2))}
    return run


def cmd_window_counts(a):
    import numpy as np
    import pandas as pd
    import yaml
    sys.path.insert(0, os.path.abspath(a.dir))
    from sampler_core import ParallelSampler
    conf = yaml.safe_load(open(a.config))["sampling"][0]
    hist, dur = int(conf.get("history", 1)), float(conf.get("duration", 0))
    neigh = int(conf["neighbor"][0])
    recent = conf["strategy"] == "recent"
    g = np.load(os.path.join(a.dir, "DATA", a.data, "ext_full.npz"))
    df = pd.read_csv(os.path.join(a.dir, "DATA", a.data, "edges.csv"))
    indptr, ts_all = g["indptr"], g["ts"].astype(np.float32)
    test = df[df.ext_roll == 2]
    counts = {"pointers": np.zeros(hist), "per_root": np.zeros(hist), "window": np.zeros(hist)}
    spans, n_roots = [], 0
    for mode in ("pointers", "per_root"):
        if mode == "per_root":
            os.environ["TGL_PER_ROOT_WINDOWS"] = "1"
        else:
            os.environ.pop("TGL_PER_ROOT_WINDOWS", None)
        # One layer: the first-hop sample (later layers search per root in TGL anyway).
        sampler = ParallelSampler(g["indptr"], g["indices"], g["eid"], ts_all, 1, 1, 1, [neigh], recent,
                                  bool(conf.get("prop_time", False)), hist, dur)
        for start in range(0, len(test), a.batch):
            rows = test.iloc[start:start + a.batch]
            root = np.concatenate([rows.src.values, rows.dst.values]).astype(np.int32)
            ts = np.concatenate([rows.time.values, rows.time.values]).astype(np.float32)
            sampler.sample(root, ts)
            ret = sampler.get_ret()
            for i in range(hist):  # ret[hist - 1 - i]: snapshot i, 0 the newest
                counts[mode][i] += len(ret[hist - 1 - i].row())
            if mode == "pointers":
                spans.append(float(rows.time.values[-1] - rows.time.values[0]))
                n_roots += len(root)
                for i in range(hist):
                    for n, t in zip(root, ts):
                        seg = ts_all[indptr[n]:indptr[n + 1]]
                        hi = np.searchsorted(seg, t - i * dur, "left")
                        lo = np.searchsorted(seg, t - (i + 1) * dur, "left") if dur > 0 else 0
                        counts["window"][i] += min(hi - lo, neigh)
    out = {"data": a.data, "events": len(test), "batch": a.batch, "roots": n_roots, "snapshots": hist,
           "snapshot_span": dur, "neighbors": neigh, "strategy": conf["strategy"],
           "median_batch_span": float(np.median(spans)),
           "per_root_by_snapshot_newest_first": {k: [float(x) / n_roots for x in v] for k, v in counts.items()}}
    json.dump(out, sys.stdout, indent=1)
    print()


def cmd_parse(a):
    runs = []
    for path in a.out:
        r = parse_out(path)
        mm = re.search(r"seed(\d+)", os.path.basename(path))
        r["seed"] = int(mm.group(1)) if mm else None
        if not r["epochs"] or "test" not in r or any("train_seconds" not in e for e in r["epochs"]):
            sys.exit(f"parse: {path} is incomplete")
        for e in r["epochs"]:
            e["train_events"] = a.train_events
            e["train_events_per_second"] = a.train_events / e["train_seconds"]
        if a.test_after_val:
            # The test mnemo's protocol makes: the best epoch's, from its post-validation memory.
            best = r["epochs"][r["best_epoch"] - 1]
            if "test_after_val_ap" not in best:
                sys.exit(f"parse: {path} has no test after validation (TGL_TEST=continue)")
            r["test_replay"] = r["test"]
            r["test"] = {"ap": best["test_after_val_ap"], "auc": best["test_after_val_auc"]}
        r["train_events_per_second"] = a.train_events * len(r["epochs"]) / sum(e["train_seconds"] for e in r["epochs"])
        runs.append(r)
    json.dump({"runs": runs, "train_events": a.train_events}, sys.stdout, indent=1)
    print()


def machine_info():
    flags = []
    try:
        have = next(l for l in open("/proc/cpuinfo") if l.startswith("flags")).split(":", 1)[1].split()
        flags = [f for f in ("avx2", "fma", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16") if f in have]
    except Exception:
        pass
    return {"host": socket.gethostname(), "nproc": os.cpu_count(), "cpu": cpu_model(), "flags": flags}


MODEL_NOTES = {
    "apan": [
        "Architecture, the same on both sides: node memory 100, a mailbox of 10 mails [memory of the node, "
        "memory of the other endpoint] per node with their times; the memory attends over its mails "
        "(query W_q m, keys/values from [mail, cos time encoding 100 of t - mail time], 2 heads, LeakyReLU(0.2) "
        "scores, softmax, attention dropout 0.1), then ReLU(dropout(W LayerNorm(aggregate + m))); the embedding "
        "is the updated memory, layer-normed; an event's mail goes to both endpoints and to their 10 most recent "
        "neighbours (TGL: sampled by its C++ sampler, mail_combine 'last'), one per node and batch (mnemo: the "
        "latest event's, the node's own before a neighbour's; TGL: the last one it lists, its roots first, then "
        "each root's neighbours in root order, so that an endpoint that is also the other endpoint's recent "
        "neighbour keeps that endpoint's copy of the mail, its halves swapped), at the next slot of its ring; link predictor ReLU(W_s h_src + W_d h_dst) -> 1 (mnemo: one Linear over the "
        "concatenation, the same function).",
        "Known model difference: TGL attends over all 10 mailbox slots, the empty ones (zero mails at time 0) "
        "included; mnemo masks the slots not yet filled. Early in the stream (and for nodes with few events) "
        "TGL's attention spreads over zero mails whose time encoding is that of the whole elapsed time.",
    ],
    "tgat": [
        "Architecture, the same on both sides (TGL's config/TGAT.yml): 2 layers of temporal graph attention over "
        "10 neighbours per layer sampled uniformly among all earlier events (the second hop before each "
        "first-hop neighbour's edge time), 2 heads, width 100, a cos time encoding of 100 per layer; query from "
        "[own embedding, time(0)], keys and values from [neighbour embedding, time(dt)], LeakyReLU(0.2) scores, "
        "softmax, attention dropout 0.1, then LayerNorm(ReLU(dropout(W [aggregate, own]))); no node or edge "
        "features (the data have none), so the first layer's queries are the time encoding alone; link "
        "predictor ReLU(W_s h_src + W_d h_dst) -> 1.",
        "Sampling: TGL takes all earlier events, the most recent first, when a node has fewer than 10, and "
        "10 uniform picks with replacement otherwise; mnemo draws 10 slots uniformly with replacement among "
        "the earlier events whenever there is one.",
    ],
    "dysat": [
        "Architecture, the same on both sides: 3 snapshots of 10,000 time units before each event; per "
        "snapshot 2 layers of self-attention without a time encoding (query from the target, keys/values "
        "from the neighbours, 2 heads, LeakyReLU(0.2) scores, softmax, attention dropout 0.1), then "
        "LayerNorm(ReLU(dropout(W [aggregate, own]))), width 100, weights per layer and snapshot; 10 neighbours "
        "per layer sampled uniformly inside the snapshot's window (TGL: prop_time, the second layer at the "
        "first-hop node's window); an Elman RNN (tanh) over the snapshots, oldest first, whose last output is "
        "the embedding; link predictor ReLU(W_s h_src + W_d h_dst) -> 1.",
        "Node input: the data have no features and TGL's layer needs some (it asserts a non-zero input width "
        "when dim_time is 0), so the TGL copy runs with a learned 100-wide vector per node (TGL_LEARN_NODE_FEATS=1: "
        "node_features.pt, standard normal, made a parameter of the model), as mnemo's DySAT has "
        "(torch::nn::Embedding, also standard normal).",
        "Sampling: TGL takes at most the events inside a snapshot's window, without replacement (all of them, "
        "the most recent first, when the window holds fewer than 10), in sparse DGL blocks; mnemo draws 10 "
        "slots per target with replacement whenever the window holds an event, and computes the padded "
        "[targets x 10] and [targets x 10 x 10] slots whatever the window holds. Sparse windows are why TGL's "
        "DySAT trains more events/s than mnemo's (on CollegeMsg's 10,000 s windows TGL's training batches "
        "hold 0.67 first-hop neighbours per target and snapshot on average, with its per-node pointers: see "
        "the note on them).",
    ],
}


def cmd_report(a):
    ref = json.load(open(a.reference))
    data = json.load(open(a.ref_data)) if a.ref_data else {}
    mruns = []
    for path in a.mnemo:
        s = json.load(open(path))
        mruns.append({
            "seed": s["config"]["seed"], "summary": path, "version": s.get("version"),
            "epochs": [{"epoch": e["epoch"], "val_ap": e["val_ap_batch_mean"], "val_ap_pooled": e["val_ap"],
                        "val_new_node_ap": e["val_new_node_ap_batch_mean"], "train_loss": e["train_loss"],
                        "seconds": e["seconds"], "train_events": e["train_events"],
                        "train_events_per_second": e["train_events_per_second"]} for e in s["epochs"]],
            "best_epoch": s.get("best_epoch"),
            "test": {"ap": s["test"]["ap_batch_mean"], "auc": s["test"]["auc_batch_mean"],
                     "new_node_ap": s["test"]["new_node_ap_batch_mean"],
                     "new_node_auc": s["test"]["new_node_auc_batch_mean"],
                     "ap_pooled": s["test"]["ap"]},
            "train_events_per_second": s["train_events_per_second"],
            "data_path": s.get("data_path"),
        })
    rruns = ref["runs"]
    n_epochs = min(min(len(r["epochs"]) for r in rruns), min(len(r["epochs"]) for r in mruns))
    epochs = []
    for k in range(n_epochs):
        rs = stats([r["epochs"][k]["val_ap"] for r in rruns])
        ms = stats([r["epochs"][k]["val_ap"] for r in mruns])
        epochs.append({"epoch": k + 1, "val_ap": {"tgl": rs, "mnemo": ms, "difference": diff(rs, ms)}})
    test = {}
    for key in ("ap", "auc"):
        rs = stats([r["test"][key] for r in rruns])
        ms = stats([r["test"][key] for r in mruns])
        test[key] = {"tgl": rs, "mnemo": ms, "difference": diff(rs, ms),
                     "ci95": ci95_difference([r["test"][key] for r in rruns], [r["test"][key] for r in mruns]),
                     "tgl_per_seed": [r["test"][key] for r in rruns],
                     "mnemo_per_seed": [r["test"][key] for r in mruns]}
    for key in ("new_node_ap", "new_node_auc"):
        test[key] = {"mnemo": stats([r["test"][key] for r in mruns]),
                     "mnemo_per_seed": [r["test"][key] for r in mruns], "tgl": None}
    ablations = []
    windows_what = {"dysat": "TGL with per-root windows", "tgat": "TGL with per-root neighbours",
                    "apan": "TGL with per-root neighbours, tested from the post-validation memory"}[a.model]
    for path, what in ((a.ablation, "TGL with mnemo's negatives"), (a.ablation_test, "TGL tested from the post-validation memory"),
                       (a.ablation_windows, windows_what),
                       (a.ablation_masked, "TGL as mnemo: per-root neighbours, empty mailbox slots masked, "
                        "mnemo's negatives, tested from the post-validation memory"),
                       (a.ablation_mail, "TGL as mnemo, keeping mnemo's mail per node and batch")):
        if not path:
            continue
        aruns = json.load(open(path))["runs"]
        abl = {"what": what, "runs": aruns}
        for key in ("ap", "auc"):
            rs = stats([r["test"][key] for r in aruns])
            abl[key] = {"tgl": rs, "difference": diff(rs, test[key]["mnemo"]),
                        "ci95": ci95_difference([r["test"][key] for r in aruns], test[key]["mnemo_per_seed"]),
                        "tgl_per_seed": [r["test"][key] for r in aruns]}
        ablations.append(abl)
    ev_r = stats([r["train_events_per_second"] for r in rruns])
    ev_m = stats([r["train_events_per_second"] for r in mruns])
    ratio = ev_m["mean"] / ev_r["mean"] if ev_r["mean"] else None
    tol = a.tolerance
    c = test["ap"]["ci95"]
    goal = {"metric": "test AP (mean of per-batch AP, batches of 600), mean over seeds", "tolerance": tol,
            "difference": test["ap"]["difference"], "met": abs(test["ap"]["difference"]) <= tol,
            "ci95_inside_tolerance": (c["low"] >= -tol and c["high"] <= tol) if c else None}
    machine = machine_info()
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()
    msplit = json.load(open(a.mnemo[0]))["data"]
    keys = ("train_events", "val_events", "test_events", "new_node_val_events", "new_node_test_events")
    split = {"tgl": {k: data.get(k) for k in keys}, "mnemo": {k: msplit.get(k) for k in keys}}
    split["same"] = all(split["tgl"][k] == split["mnemo"][k] for k in keys)
    M = {"apan": "APAN", "dysat": "DySAT", "tgat": "TGAT"}[a.model]
    notes = [("The same split on both sides" if split["same"] else "The splits DIFFER") + ": " +
             ", ".join(f"{k.replace('_events', '').replace('_', '-')} {split['tgl'][k]}/{split['mnemo'][k]}" for k in keys) +
             " (TGL/mnemo events; chronological 70/15/15 by time quantiles, 10% of the nodes held out as new nodes "
             "with Python's random.seed(2020) as in the TGN reference; the converter drops the training-period "
             f"events that touch a held-out node ({data.get('dropped_training_events')}), which mnemo does not "
             "train on either. They are also absent from TGL's graph at evaluation, where mnemo's neighbour "
             "sampling sees them).",
             "Evaluation: both sides evaluate in batches of 600 (TGL: its training batch size; mnemo: "
             "--eval-batch-size 600) and report the mean of per-batch AP and AUC, one negative per positive. "
             "Negatives: TGL draws destinations uniformly from all N node ids (training and evaluation, unseeded "
             "draws from numpy's global generator, seeded by TGL_SEED); mnemo draws training negatives from the "
             "training events' unique destinations and evaluation negatives from all events' unique destinations "
             "with fixed seeds (--protocol tgn-reference). TGL reports no new-node AP: mnemo's is given alone.",
             "Model selection: both sides test the epoch with the best val AP over all epochs (TGL patched: it "
             "considers epochs after the third only). Before testing, TGL replays the training and validation "
             "events through its memory (APAN); mnemo's memory carries on from validation.",
             "Training time: TGL's 'total time' per epoch (sampling, preparation, forward, backward, memory "
             "update; evaluation excluded); mnemo's epoch seconds less its evaluation seconds. Training events: "
             f"{ref.get('train_events')} (TGL) and {mruns[0]['epochs'][0]['train_events']} (mnemo) per epoch."]
    notes += MODEL_NOTES[a.model]
    if a.ablation:
        notes.append("Ablation 'TGL with mnemo's negatives' (TGL_NEG=destinations): TGL draws training negatives "
                     "from the training events' unique destinations and evaluation negatives from all events' "
                     "(of its edges.csv), uniformly, from numpy's generator seeded by TGL_SEED.")
    if a.ablation_test:
        notes.append("Ablation 'TGL tested from the post-validation memory' (TGL_TEST=continue): after each epoch's "
                     "validation TGL also tests, continuing from the memory and mailboxes validation left; the row "
                     "gives the best epoch's, the test mnemo makes. TGL's own test (the first row) first resets "
                     "memory and mailboxes and replays the training and validation events through the best "
                     "model in evaluation mode.")
    if a.ablation_windows or a.window_counts:
        wc = json.load(open(a.window_counts)) if a.window_counts else None
        what = {"dysat": "snapshot windows", "tgat": "uniformly sampled neighbours",
                "apan": "10 most recent neighbours (the mail's receivers)"}[a.model]
        n = (f"TGL's sampler finds the {what} of the first hop through one pointer per node, advanced "
             "before each batch to the node's latest time in the batch (update_ts_ptr), and then drops the "
             "events at or after each root's own time: a root earlier in the batch than its node's last "
             "occurrence by more than the window loses its events. mnemo searches each root's own window. ")
        if wc:
            per = wc["per_root_by_snapshot_newest_first"]
            against = (f"against a window of {wc['snapshot_span']:,.0f}" if wc["snapshot_span"] > 0 else
                       "(the most recent events before the root, without a window)")
            n += (f"Measured on the test events ({wc['events']} events in batches of {wc['batch']}; median batch "
                  f"span {wc['median_batch_span']:,.0f} time units {against}; `bench/tgl.py window-counts`): "
                  "first-hop neighbours per root"
                  + (" by snapshot, newest first" if wc["snapshots"] > 1 else "") + ": TGL as is "
                  + ", ".join(f"{x:.2f}" for x in per["pointers"]) + "; with per-root windows "
                  + ", ".join(f"{x:.2f}" for x in per["per_root"]) + "; events in the root's window (capped at "
                  f"{wc['neighbors']}) " + ", ".join(f"{x:.2f}" for x in per["window"]) + ". ")
        if a.ablation_windows:
            n += ("Ablation row (TGL_PER_ROOT_WINDOWS=1" + (", with TGL_TEST=continue" if a.model == "apan" else "")
                  + "): the sampler searches every root's window at the root's own time, as mnemo does.")
        if a.ablation_masked:
            n += (" Ablation row 'TGL as mnemo' (TGL_PER_ROOT_WINDOWS=1 TGL_MASK_EMPTY_MAILS=1 TGL_NEG=destinations "
                  "TGL_TEST=continue): also mnemo's negatives, and the memory attends over the filled mailbox slots "
                  "only (mail time > 0; the stream's first event, at time 0, counts as empty), a node with none "
                  "getting an empty aggregate, as mnemo's does.")
        if a.ablation_mail:
            n += (" Ablation row 'TGL as mnemo, keeping mnemo's mail' (the same with TGL_MAIL_ORDER=latest): of the "
                  "mails that reach a node in a batch, TGL keeps the last one it lists: its roots (sources, then "
                  "destinations), then every root's neighbours in root order, so a node's copy of a mail as the "
                  "neighbour of a later-listed root (for an endpoint, usually the other endpoint's mail of the same "
                  "event, [memory of the other endpoint, memory of the node]) replaces its own [memory of the node, "
                  "memory of the other endpoint]; mnemo keeps the latest event's, the node's own mail before a "
                  "neighbour's. With TGL_MAIL_ORDER=latest TGL lists them so that the one it keeps is mnemo's.")
        notes.append(n)
    if a.mnemo_as_tgl:
        notes.insert(0, "mnemo as TGL (--mnemo-as-tgl): mnemo runs with --apan-mailbox tgl, TGL's mailbox (every "
                     "slot attended, the empty ones as zero mails of time 0; of the mails that reach a node in a "
                     "batch the one TGL lists last, and an endpoint's memory from the row TGL lists last); TGL runs "
                     "with its own mailbox and TGL_PER_ROOT_WINDOWS=1 TGL_NEG=destinations TGL_TEST=continue "
                     "(per-root neighbours, mnemo's negatives, each epoch tested from the memory validation left; "
                     "mnemo has no mode for TGL's choices there). The notes below on the mailbox describe mnemo's "
                     "default, not this run.")
    if a.as_mnemo:
        notes.insert(0, "Reference: TGL as mnemo (--as-mnemo: TGL_PER_ROOT_WINDOWS=1 TGL_MASK_EMPTY_MAILS=1 "
                     "TGL_MAIL_ORDER=latest TGL_NEG=destinations TGL_TEST=continue): per-root neighbours, the "
                     "memory attending over the filled mailbox slots only, mnemo's mail per node and batch (the "
                     "latest event's), mnemo's negatives, each epoch tested from the memory validation "
                     "left (the best val epoch's test is the row; runs from before TGL_MAIL_ORDER=latest was part "
                     "of this mode name their command above). The notes below on TGL's own negatives, its "
                     "replayed test, its per-node sampler pointers and its empty mailbox slots describe what this "
                     "reference does not do.")
    notes += [n for n in (a.note or [])]
    suffix = f"-asmnemo-e{n_epochs}" if a.as_mnemo else f"-mnemoastgl-e{n_epochs}" if a.mnemo_as_tgl else ""
    out = {"benchmark": f"reference_{a.model}-tgl-{a.which}" + suffix,
           "reference_as_mnemo": bool(a.as_mnemo), "mnemo_as_tgl": bool(a.mnemo_as_tgl),
           "script": a.script, "date": now,
           "machine": machine, "split": split, "load": json.loads(a.load) if a.load else None,
           "tgl": {"implementation": "amazon-research/tgl", "source": a.ref_source, "commit": a.ref_commit,
                   "command": a.ref_command, "threads": a.threads,
                   "patch": json.load(open(a.ref_patch)) if a.ref_patch else None, "data": data,
                   "python": a.ref_python, "torch": a.ref_torch, "dgl": a.ref_dgl,
                   "train_events": ref.get("train_events"), "runs": rruns},
           "mnemo": {"command": a.mnemo_command, "seeds": [r["seed"] for r in mruns],
                     "version": mruns[0]["version"], "data_path": mruns[0]["data_path"], "runs": mruns},
           "comparison": {"epochs": epochs, "test": test,
                          "train_events_per_second": {"tgl": ev_r, "mnemo": ev_m, "ratio_mnemo_over_tgl": ratio},
                          "goal": goal, "ablations": ablations},
           "notes": notes}
    json.dump(out, open(a.out_json, "w"), indent=1)

    L = [f"# {M} on {a.which}: mnemo vs TGL (amazon-research/tgl)"
         + (f", TGL as mnemo, {n_epochs} epochs" if a.as_mnemo else "")
         + (f", mnemo as TGL (TGL's mailbox), {n_epochs} epochs" if a.mnemo_as_tgl else ""), ""]
    L.append(f"{machine['cpu']}, {machine['nproc']} CPUs ({', '.join(machine['flags']) or 'flags unknown'}); TGL: seeds "
             f"{', '.join(str(r['seed']) for r in rruns)} of `{a.ref_command}` ({a.threads} thread(s), commit "
             f"{a.ref_commit or 'unknown'}, Python {a.ref_python}, torch {a.ref_torch}, DGL {a.ref_dgl}); "
             f"mnemo: seeds {', '.join(str(r['seed']) for r in mruns)} of `{a.mnemo_command}`.")
    L.append("")
    L.append("AP: mean of per-batch AP over evaluation batches of 600, mean ± sample sd over seeds; "
             "difference = mnemo − TGL.")
    L.append("")
    L.append("| test | TGL | mnemo | diff | TGL per seed | mnemo per seed |")
    L.append("|---|---|---|---|---|---|")
    for key, name in (("ap", "AP"), ("auc", "AUC")):
        t = test[key]
        L.append(f"| {name} | {pm(t['tgl'])} | {pm(t['mnemo'])} | {fmt_diff(t['difference'])} | "
                 f"{', '.join(f'{v:.4f}' for v in t['tgl_per_seed'])} | "
                 f"{', '.join(f'{v:.4f}' for v in t['mnemo_per_seed'])} |")
    for key, name in (("new_node_ap", "new-node AP"), ("new_node_auc", "new-node AUC")):
        t = test[key]
        L.append(f"| {name} | – | {pm(t['mnemo'])} | – | – | {', '.join(f'{v:.4f}' for v in t['mnemo_per_seed'])} |")
    for abl in ablations:
        for key, name in (("ap", "AP"), ("auc", "AUC")):
            t = abl[key]
            L.append(f"| {name}, {abl['what']} | {pm(t['tgl'])} | {pm(test[key]['mnemo'])} | "
                     f"{fmt_diff(t['difference'])} | {', '.join(f'{v:.4f}' for v in t['tgl_per_seed'])} | "
                     f"{', '.join(f'{v:.4f}' for v in test[key]['mnemo_per_seed'])} |")
    L.append("")
    L.append("95% confidence intervals of the test differences, mnemo − TGL (Welch's t over the seeds of each side):")
    L.append("")
    for what, t in [("", test)] + [(f", {abl['what']}", abl) for abl in ablations]:
        for key, name in (("ap", "AP"), ("auc", "AUC")):
            c = t[key].get("ci95")
            if c:
                L.append(f"* {name}{what}: {c['difference']:+.4f} [{c['low']:+.4f}, {c['high']:+.4f}]"
                         + (f" (df {c['df']:.1f})" if c["df"] else ""))
    L.append("")
    L.append("| epoch | TGL val AP | mnemo val AP | diff |")
    L.append("|---|---|---|---|")
    for row in epochs:
        L.append(f"| {row['epoch']} | {pm(row['val_ap']['tgl'])} | {pm(row['val_ap']['mnemo'])} | "
                 f"{fmt_diff(row['val_ap']['difference'])} |")
    L.append("")
    L.append("| training events/s (evaluation excluded) | TGL | mnemo | mnemo / TGL |")
    L.append("|---|---|---|---|")
    L.append(f"| all epochs | {pm(ev_r, 0)} | {pm(ev_m, 0)} | {ratio:.1f} |" if ratio else
             f"| all epochs | {pm(ev_r, 0)} | {pm(ev_m, 0)} | – |")
    L.append("")
    L.append(f"Goal |mnemo − TGL| ≤ {tol} on test AP: {'met' if goal['met'] else 'NOT met'} "
             f"({goal['difference']:+.4f}"
             + ("" if goal["ci95_inside_tolerance"] is None else
                f"; its 95% CI {'lies inside' if goal['ci95_inside_tolerance'] else 'does not lie inside'} ±{tol}")
             + ")" + "".join(
                 f"; against {abl['what']}: {'met' if abs(abl['ap']['difference']) <= tol else 'NOT met'} "
                 f"({abl['ap']['difference']:+.4f})" for abl in ablations
                 if abl["what"].startswith(("TGL with per-root", "TGL as mnemo", "TGL with mnemo's negatives")))
             + ".")
    L.append("")
    if a.load:
        L.append(f"Load average (1 min) at the start/end of each run: {a.load} (a shared 2-CPU machine: "
                 "events/s depend on the other load).")
        L.append("")
    for n in notes:
        L.append(f"* {n}")
    open(a.out_md, "w").write("\n".join(L) + "\n")
    print("\n".join(L))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("patch"); s.add_argument("dir"); s.add_argument("--model", required=True)
    s.add_argument("--epochs", type=int, required=True); s.add_argument("--threads", type=int, required=True)
    s.add_argument("--dgl", default=None); s.set_defaults(f=cmd_patch)
    s = sub.add_parser("convert"); s.add_argument("--input", required=True); s.add_argument("--out", required=True)
    s.add_argument("--name", required=True); s.add_argument("--node-features", type=int, default=0)
    s.set_defaults(f=cmd_convert)
    s = sub.add_parser("window-counts"); s.add_argument("dir"); s.add_argument("--data", required=True)
    s.add_argument("--config", required=True); s.add_argument("--batch", type=int, default=600)
    s.set_defaults(f=cmd_window_counts)
    s = sub.add_parser("parse"); s.add_argument("out", nargs="+"); s.add_argument("--train-events", type=int, required=True)
    s.add_argument("--test-after-val", action="store_true", help="test: the best epoch's test after validation (TGL_TEST=continue)")
    s.set_defaults(f=cmd_parse)
    s = sub.add_parser("report")
    for k in ("--model", "--which", "--reference", "--out-json", "--out-md", "--mnemo-command", "--ref-command", "--script"):
        s.add_argument(k, required=True)
    s.add_argument("--mnemo", nargs="+", required=True)
    for k in ("--ref-source", "--ref-commit", "--ref-patch", "--ref-data", "--ref-python", "--ref-torch", "--ref-dgl", "--load"):
        s.add_argument(k, default=None)
    s.add_argument("--threads", type=int, default=None)
    s.add_argument("--ablation", default=None, help="parse output of TGL runs with TGL_NEG=destinations")
    s.add_argument("--ablation-test", default=None, help="parse --test-after-val output of TGL runs with TGL_TEST=continue")
    s.add_argument("--ablation-windows", default=None, help="parse output of TGL runs with TGL_PER_ROOT_WINDOWS=1")
    s.add_argument("--ablation-masked", default=None,
                   help="parse --test-after-val output of APAN runs with TGL_PER_ROOT_WINDOWS=1 TGL_MASK_EMPTY_MAILS=1 "
                   "TGL_NEG=destinations TGL_TEST=continue")
    s.add_argument("--ablation-mail", default=None,
                   help="parse --test-after-val output of APAN runs as --ablation-masked's, with TGL_MAIL_ORDER=latest")
    s.add_argument("--window-counts", default=None, help="window-counts' output")
    s.add_argument("--as-mnemo", action="store_true",
                   help="the reference runs are TGL as mnemo (APAN), parsed with --test-after-val")
    s.add_argument("--mnemo-as-tgl", action="store_true",
                   help="mnemo ran with --apan-mailbox tgl, TGL with its mailbox and mnemo's other choices "
                   "(APAN), parsed with --test-after-val")
    s.add_argument("--tolerance", type=float, default=0.01)
    s.add_argument("--note", action="append", help="a line for the notes (repeatable)")
    s.set_defaults(f=cmd_report)
    a = p.parse_args()
    a.f(a)


if __name__ == "__main__":
    main()
