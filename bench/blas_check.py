"""Matrix product speed of the Python torch that runs the reference
implementations (bench/train_reference.sh, bench/dyglib_reference.sh,
scripts/device-check's dry run): one 2000x172 @ 172x172 float32 product,
the shape of TGN's projections at width 172, mean of 200 after 3 warm-ups.

Side by side on Debian's python3-torch, which calls whichever libblas.so.3
it finds:
  OMP_NUM_THREADS=2 /usr/bin/python3 bench/blas_check.py
  OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 \\
    LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-pthread \\
    /usr/bin/python3 bench/blas_check.py
"""
import time

import torch

a = torch.randn(2000, 172)
b = torch.randn(172, 172)
for _ in range(3):
    a @ b
t = time.time()
for _ in range(200):
    a @ b
ms = (time.time() - t) / 200 * 1e3
print(f"{ms:.2f} ms per 2000x172 @ 172x172 product "
      f"({2 * 2000 * 172 * 172 / ms / 1e6:.1f} GFLOP/s), "
      f"{torch.get_num_threads()} threads")
