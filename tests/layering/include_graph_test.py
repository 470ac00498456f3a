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
    "trainer/platform": {"util"},
    "trainer/data": {"util"},
    "trainer/plan": {"util", "trainer/data"},
    # A batch's plain types (trainer/batch/batch.h) sit below node memory
    # and the models; the rest of trainer/batch above them.
    "trainer/batch:types": set(),
    "trainer/memory": {"util", "memstore", "trainer/platform", "trainer/data",
                       "trainer/plan", "trainer/batch:types"},
    "trainer/model": {"util", "trainer/data", "trainer/memory",
                      "trainer/batch:types"},
    "trainer/batch": {"util", "trainer/platform", "trainer/data",
                      "trainer/memory", "trainer/model", "trainer/batch:types"},
    "trainer/runtime": {"util", "memstore", "coordinator", "trainer/platform",
                        "trainer/data", "trainer/plan", "trainer/memory",
                        "trainer/model", "trainer/batch",
                        "trainer/batch:types"},
    # `mnemo serve`: the model's side (serving_model) over the run's rooms,
    # the gRPC side (inference_server) over the services' decoding.
    "trainer/serve": {"util", "services", "mnemo", "trainer/platform",
                      "trainer/data", "trainer/memory", "trainer/model",
                      "trainer/batch", "trainer/batch:types",
                      "trainer/runtime"},
}
# Files that form a layer of their own inside their folder.
FILE_LAYERS = {"trainer/batch/batch.h": "trainer/batch:types"}

# The rooms of trainer/runtime (docs/design.md), bottom to top: the
# torch-free API, the rooms below a run's parts, the parts (run_parts.h),
# the rooms that run them, and the engine. room -> rooms it may include.
RUNTIME_FILES = {
    "train.h": "api", "train_enums.h": "api", "train_enums.cc": "api",
    "train_options.cc": "api", "depbloom_sizes.h": "api",
    "depbloom_sizes.cc": "api",
    "run_parts.h": "parts", "run_parts.cc": "parts", "task.h": "parts",
    "task.cc": "parts", "record.h": "parts",
    "engine.h": "engine", "engine.cc": "engine", "engine_setup.cc": "engine",
}
RUNTIME_ROOMS = {
    "api": set(),
    "cluster": {"api"},
    "report": {"api"},
    "optim": {"api"},
    "policies": {"api", "cluster", "report"},
    "parts": {"api", "cluster", "report", "optim", "policies"},
    "checkpoint": {"api", "optim", "parts"},
    "eval": {"api", "report", "parts"},
    "step": {"api", "cluster", "report", "optim", "policies", "parts",
             "checkpoint"},
    "engine": {"api", "cluster", "report", "optim", "policies", "parts",
               "checkpoint", "eval", "step"},
}
PROJECT = {"util", "memstore", "coordinator", "trainer", "services", "proto",
           "tests", "bench", "mnemo"}
TORCH_FREE_HEADERS = [
    "trainer/memory/record_layout.h",
    "trainer/memory/transfer_stats.h",
    "trainer/memory/working_set_options.h",
    "trainer/model/model_spec.h",
    "trainer/platform/allocator.h",
    "trainer/platform/build_info.h",
    "trainer/platform/cpu_isa.h",
    "trainer/platform/cpu_setup.h",
    "trainer/platform/cuda_device.h",
    "trainer/runtime/train.h",
    "trainer/runtime/train_enums.h",
    "trainer/runtime/depbloom_sizes.h",
    "trainer/runtime/cluster/distributed.h",
    # The gRPC side of `mnemo serve` builds without LibTorch's headers.
    "trainer/serve/backend.h",
    "trainer/serve/inference_server.h",
]
TORCH = re.compile(r'#include\s*[<"](torch|ATen|c10)/')
INCLUDE = re.compile(r'#include\s*"([^"]+)"')


def folder_of(path):
    """The layer a project include path belongs to."""
    if path in FILE_LAYERS:
        return FILE_LAYERS[path]
    parts = path.split("/")
    if parts[0] == "trainer" and len(parts) > 2:
        return "/".join(parts[:2])
    return parts[0]


def runtime_room(path):
    """The room of trainer/runtime a path belongs to (None: outside it)."""
    parts = path.split("/")
    if parts[:2] != ["trainer", "runtime"] or len(parts) < 3:
        return None
    if len(parts) == 3:
        return RUNTIME_FILES.get(parts[2], "?" + parts[2])
    return parts[2]


def sources(root, folder):
    for d, _, files in os.walk(os.path.join(root, folder)):
        for f in files:
            if f.endswith((".h", ".cc")):
                yield os.path.join(d, f)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..")
    errors = []
    for folder in ALLOWED:
        if ":" in folder:
            continue  # a file layer, checked with its folder's files
        for path in sources(root, folder):
            rel = os.path.relpath(path, root)
            layer = FILE_LAYERS.get(rel, folder)
            allowed = ALLOWED[layer]
            with open(path, encoding="utf-8") as f:
                for n, line in enumerate(f, 1):
                    m = INCLUDE.search(line)
                    if not m or m.group(1).split("/")[0] not in PROJECT:
                        continue
                    target = folder_of(m.group(1))
                    if target != layer and target not in allowed:
                        errors.append(f"{rel}:{n}: {layer} includes "
                                      f"{m.group(1)} (layer {target})")
                    room, to = runtime_room(rel), runtime_room(m.group(1))
                    if room and to and room != to and (
                            room not in RUNTIME_ROOMS or
                            to not in RUNTIME_ROOMS[room]):
                        errors.append(f"{rel}:{n}: runtime room {room} "
                                      f"includes {m.group(1)} (room {to})")
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
