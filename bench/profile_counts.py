#!/usr/bin/env python3
"""Machine-independent counts of a training step from `mnemo train --profile`
tables (bench/profile_step.sh): ATen calls per batch (all `aten::` operators,
nested ones included, as the profiler records them), split into views,
allocations and fills, and the rest (compute and copies), and autograd nodes
evaluated per batch (the `autograd::engine::evaluate_function:` rows).

Usage: bench/profile_counts.py NAME=PROFILE.md [NAME=PROFILE.md ...]
Prints a Markdown table, one column per profile.
"""
import re
import sys

VIEWS = {
    "view", "as_strided", "transpose", "t", "select", "slice", "narrow",
    "expand", "reshape", "_reshape_alias", "unsqueeze", "squeeze", "permute",
    "alias", "detach", "unflatten", "split", "unsafe_split", "chunk",
    "numpy_T", "_unsafe_view", "resolve_conj", "resolve_neg", "unbind",
    "expand_as", "view_as", "contiguous", "lift_fresh", "split_with_sizes",
}
ALLOCATIONS = {
    "empty", "empty_strided", "empty_like", "zeros", "zeros_like", "ones",
    "ones_like", "fill_", "zero_", "full", "new_empty", "new_zeros",
    "new_empty_strided", "scalar_tensor", "new_full", "full_like",
}


def counts(path):
    aten = {"views": 0.0, "allocations and fills": 0.0, "compute and copies": 0.0}
    nodes = 0.0
    batches = None
    with open(path) as f:
        for line in f:
            m = re.search(r"# mnemo operator profile: (\d+) training batches", line)
            if m:
                batches = int(m.group(1))
            if not line.startswith("| ") or line.startswith("| operator"):
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) < 2:
                continue
            try:
                calls = float(cells[1])
            except ValueError:
                continue
            name = cells[0]
            if name.startswith("aten::"):
                op = name[len("aten::"):]
                if op in VIEWS:
                    aten["views"] += calls
                elif op in ALLOCATIONS:
                    aten["allocations and fills"] += calls
                else:
                    aten["compute and copies"] += calls
            elif name.startswith("autograd::engine::evaluate_function:"):
                nodes += calls
    if batches is None:
        sys.exit(f"{path}: not a `mnemo train --profile` table")
    return aten, nodes, batches


def main():
    if len(sys.argv) < 2 or any("=" not in a for a in sys.argv[1:]):
        sys.exit(__doc__)
    cols = []
    for arg in sys.argv[1:]:
        name, path = arg.split("=", 1)
        cols.append((name, *counts(path)))
    print("| per training batch | " + " | ".join(c[0] for c in cols) + " |")
    print("|---|" + "---:|" * len(cols))
    print("| ATen calls | " +
          " | ".join(f"{sum(c[1].values()):.0f}" for c in cols) + " |")
    for key in ("views", "allocations and fills", "compute and copies"):
        print(f"| of which {key} | " +
              " | ".join(f"{c[1][key]:.0f}" for c in cols) + " |")
    print("| autograd nodes | " + " | ".join(f"{c[2]:.0f}" for c in cols) + " |")
    print()
    print("Batches averaged: " + ", ".join(f"{c[0]} {c[3]}" for c in cols) + ".")


if __name__ == "__main__":
    main()
