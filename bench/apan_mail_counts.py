#!/usr/bin/env python3
"""Which mail APAN keeps per node and batch: mnemo's rule against TGL's.

  bench/apan_mail_counts.py FILE [FILE...] [--out-md OUT.md]

Replays the training batches (600 events) of an event file under mnemo's
tgn-reference split (70/15/15 by time quantiles, 10% of the nodes seen
after the validation cut-off held out with Python's random.seed(2020), the
training events touching them dropped) and, for every node that a batch's
mails reach (both endpoints of each event and their 10 most recent earlier
neighbours), the mail each rule keeps:
  mnemo: the latest event's; of one event, the node's own mail (source,
         then destination) before a neighbour's (of the source, then of the
         destination);
  TGL:   the last one listed: the batch's roots (sources, then
         destinations), then every root's neighbours in root order.
Counts per receiver kind (an endpoint of the batch, or a neighbour only):
the same mail, the same event with the halves swapped (the other
endpoint's copy), an older or a newer event. Needs numpy (the split is
bench/tgl.py's).
"""
import argparse
import bisect
import os
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tgl import reference_split  # noqa: E402


def count(path):
    u, i, ts, _, _, _, _, keep, roll = reference_split(path)
    U, I, T = u.tolist(), i.tolist(), ts.tolist()
    train = [k for k in range(len(T)) if keep[k] and roll[k] == 0]
    # adjacency over training events, time-sorted
    adj = defaultdict(list)  # node -> list of (t, other)
    for k in train:
        adj[U[k]].append((T[k], I[k])); adj[I[k]].append((T[k], U[k]))
    adjt = {v: [x[0] for x in l] for v, l in adj.items()}
    def recent(v, t, n=10):
        l = adj[v]; e = bisect.bisect_left(adjt[v], t)
        return [l[j][1] for j in range(max(0, e - n), e)]
    B = 600
    stats = defaultdict(int)
    for b0 in range(0, len(train), B):
        ev = train[b0:b0 + B]; n = len(ev)
        roots = [U[k] for k in ev] + [I[k] for k in ev]
        rts = [T[k] for k in ev] * 2
        nbrs = [recent(roots[j], rts[j]) for j in range(2 * n)]
        # mail = (root index j whose memory is 'self' in the mail, i.e. src_mail for j<n, dst_mail for j>=n)
        tgl = {}
        for j in range(2 * n): tgl[roots[j]] = j
        for j in range(2 * n):
            for v in nbrs[j]: tgl[v] = j
        mn = {}; mnpos = {}
        def deliver(v, i, j):
            if v in mnpos and mnpos[v] >= i: return
            mn[v] = j; mnpos[v] = i
        for i in range(n):
            deliver(roots[i], i, i); deliver(roots[n + i], i, n + i)
            for j in (i, n + i):
                for v in nbrs[j]: deliver(v, i, j)
        rootset = set(roots)
        for v, j in tgl.items():
            m = mn[v]
            kind = 'root' if v in rootset else 'nbr'
            stats[kind] += 1
            if j == m: stats[kind + ' same'] += 1; continue
            ej, em = j % n, m % n
            if ej == em: stats[kind + ' same event, swapped'] += 1
            elif ej < em: stats[kind + ' tgl older event'] += 1
            else: stats[kind + ' tgl newer event'] += 1
    return len(train), stats


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--out-md", default=None)
    a = ap.parse_args()
    L = ["# APAN: the mail each rule keeps per node and batch, mnemo's against TGL's", "",
         "Command: `bench/apan_mail_counts.py " + " ".join(a.files) + (f" --out-md {a.out_md}" if a.out_md else "")
         + "` (a count over the data, the same on any machine). Training batches of 600 events under mnemo's "
         "tgn-reference split; receivers: every node a batch's mails reach. See the script's help for the rules.", "",
         "| data | training events | kind | receivers | same mail | same event, halves swapped | TGL older event | TGL newer event |",
         "|---|---|---|---|---|---|---|---|"]
    for path in a.files:
        n, st = count(path)
        for kind, name in (("root", "endpoint"), ("nbr", "neighbour only")):
            tot = st[kind]
            cells = [st[f"{kind} same"], st[f"{kind} same event, swapped"], st[f"{kind} tgl older event"],
                     st[f"{kind} tgl newer event"]]
            L.append(f"| {os.path.basename(path)} | {n} | {name} | {tot} | "
                     + " | ".join(f"{c} ({100 * c / tot:.0f}%)" if tot else "0" for c in cells) + " |")
    text = "\n".join(L) + "\n"
    if a.out_md:
        open(a.out_md, "w").write(text)
    print(text, end="")


if __name__ == "__main__":
    main()
