#!/usr/bin/env python3
"""The include graph: nothing includes from a layer above it.

Each folder may include its own headers and those of the layers listed for
it (docs/design.md "Layout"). Torch stays out of the headers of memstore,
coordinator and services, and out of the torch-free headers the launcher
and flag parsing use (compile time: LibTorch's headers are slow).

Usage: python3 tests/layering/include_graph_test.py [REPO_ROOT]
"""

import os
import re
import sys

# folder -> the project folders its files may include from (besides itself)
ALLOWED = {
    "util": set(),
    "memstore": {"util"},
    "coordinator": {"util"},
    "trainer/data": {"util"},
    "trainer/plan": {"util", "trainer/data"},
    "trainer/memory": {"util", "memstore"},
    "trainer/model": {"util", "trainer/data", "trainer/memory"},
    "trainer/runtime": {"util", "memstore", "coordinator", "trainer/data",
                        "trainer/plan", "trainer/memory", "trainer/model"},
}
PROJECT = {"util", "memstore", "coordinator", "trainer", "services", "proto",
           "tests", "bench", "mnemo"}
TORCH_FREE_HEADERS = [
    "trainer/memory/record_layout.h",
    "trainer/model/model_kind.h",
    "trainer/runtime/train.h",
    "trainer/runtime/train_enums.h",
    "trainer/runtime/distributed.h",
]
TORCH = re.compile(r'#include\s*[<"](torch|ATen|c10)/')
INCLUDE = re.compile(r'#include\s*"([^"]+)"')


def folder_of(path):
    """The layer a project include path belongs to."""
    parts = path.split("/")
    if parts[0] == "trainer" and len(parts) > 2:
        return "/".join(parts[:2])
    return parts[0]


def sources(root, folder):
    for d, _, files in os.walk(os.path.join(root, folder)):
        for f in files:
            if f.endswith((".h", ".cc")):
                yield os.path.join(d, f)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..")
    errors = []
    for folder, allowed in ALLOWED.items():
        for path in sources(root, folder):
            rel = os.path.relpath(path, root)
            with open(path, encoding="utf-8") as f:
                for n, line in enumerate(f, 1):
                    m = INCLUDE.search(line)
                    if not m or m.group(1).split("/")[0] not in PROJECT:
                        continue
                    target = folder_of(m.group(1))
                    if target != folder and target not in allowed:
                        errors.append(f"{rel}:{n}: {folder} includes "
                                      f"{m.group(1)} (layer {target})")
    torch_free = list(TORCH_FREE_HEADERS)
    for folder in ("memstore", "coordinator", "services"):
        torch_free += [os.path.relpath(p, root)
                       for p in sources(root, folder) if p.endswith(".h")]
    for rel in torch_free:
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if TORCH.search(line):
                    errors.append(f"{rel}:{n}: includes LibTorch in a "
                                  "torch-free header")
    for e in errors:
        print(e)
    if errors:
        print(f"{len(errors)} include(s) break the layering")
        return 1
    print("include graph: every folder includes only from the layers below it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
