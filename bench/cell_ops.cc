// The memory updaters' cells, fused (trainer/model/cell_ops.h) against
// LibTorch's operators, at the shapes of a training step: forward and
// backward of one cell call with the weights' gradients (the message and
// previous state are stored data, as in ApplyMail), in float32 and, where
// the CPU computes bf16 natively (AVX512_BF16 or AMX), under bf16 autocast.
// The two run alternately, call by call, so both see one machine state;
// the figure is the median of the per-pair ratios (LibTorch's call time
// over the fused call's beside it), with the two medians for scale.
//
// Usage: bench_cell_ops [--rows N] [--threads T] [--reps R] [OUT_JSON]
//   (defaults: 400 rows, the mail rows of a batch of 200 events; 2
//   threads; 600 calls each; bench/results/cell_ops.json)
#include "trainer/model/cell_ops.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "bench/bench_util.h"
#include "trainer/platform/autocast.h"
#include "trainer/platform/cpu_isa.h"

namespace {

using mnemo::bench::Median;
using mnemo::bench::Now;
using mnemo::model::CellKind;

struct Shape {
  const char* name;
  CellKind kind;
  int64_t x, m;  // message width, memory width
};

struct Weights {
  torch::Tensor w_ih, w_hh, b_ih, b_hh;
};

// Seconds of one forward and backward pass.
double Time(bool fused, CellKind kind, const torch::Tensor& x,
            const torch::Tensor& h, const Weights& w, bool bf16) {
  const double t0 = Now();
  torch::Tensor out;
  {
    mnemo::platform::AutocastScope autocast(bf16);
    out = fused ? mnemo::model::Cell(kind, x, h, w.w_ih, w.w_hh, w.b_ih, w.b_hh)
                : mnemo::model::CellOperators(kind, x, h, w.w_ih, w.w_hh,
                                              w.b_ih, w.b_hh);
    out.sum().backward();
  }
  const double t = Now() - t0;
  for (torch::Tensor p : {w.w_ih, w.w_hh, w.b_ih, w.b_hh}) {
    p.mutable_grad() = torch::Tensor();
  }
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t rows = 400;
  int threads = 2, reps = 600;
  std::string out_path =
      std::string(MNEMO_REPO_ROOT) + "/bench/results/cell_ops.json";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--rows") {
      rows = std::atoll(next());
    } else if (a == "--threads") {
      threads = std::atoi(next());
    } else if (a == "--reps") {
      reps = std::atoi(next());
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    } else {
      out_path = a;
    }
  }
  if (rows <= 0 || threads <= 0 || reps <= 0) {
    std::fprintf(stderr, "--rows, --threads and --reps must be positive\n");
    return 2;
  }
  at::set_num_threads(threads);
  const auto cpu = mnemo::platform::DetectCpuFeatures();
  const bool native_bf16 = cpu.avx512_bf16 || cpu.amx();
  // TGN's reference configuration (memory 172, time 172, Wikipedia's 172
  // edge features: a message of 2*172 + 172 + 172) and without edge
  // features; JODIE's defaults (memory 100, time 100, no edge features).
  const Shape shapes[] = {
      {"tgn gru, edge features", CellKind::kGru, 688, 172},
      {"tgn gru, no edge features", CellKind::kGru, 516, 172},
      {"jodie rnn", CellKind::kRnnTanh, 300, 100}};
  std::vector<std::string> json_rows;
  std::printf(
      "| cell | precision | rows | LibTorch us | fused us | speedup (median of "
      "pairs) |\n"
      "|---|---|---|---|---|---|\n");
  for (const Shape& s : shapes) {
    for (bool bf16 : {false, true}) {
      if (bf16 && !native_bf16) continue;  // emulated: not what users run
      torch::manual_seed(1);
      const int64_t g = s.kind == CellKind::kGru ? 3 : 1;
      const torch::Tensor x = torch::randn({rows, s.x});
      const torch::Tensor h = torch::randn({rows, s.m}).tanh();
      Weights w{(torch::randn({g * s.m, s.x}) * 0.05).requires_grad_(),
                (torch::randn({g * s.m, s.m}) * 0.05).requires_grad_(),
                (torch::randn({g * s.m}) * 0.05).requires_grad_(),
                (torch::randn({g * s.m}) * 0.05).requires_grad_()};
      for (int i = 0; i < 20; ++i) {  // warm-up: allocator, oneDNN
        Time(false, s.kind, x, h, w, bf16);
        Time(true, s.kind, x, h, w, bf16);
      }
      std::vector<double> lib, fused, ratio;
      for (int i = 0; i < reps; ++i) {
        // Alternate which goes first.
        const bool lib_first = i % 2 == 0;
        const double a = Time(!lib_first, s.kind, x, h, w, bf16);
        const double b = Time(lib_first, s.kind, x, h, w, bf16);
        lib.push_back(lib_first ? a : b);
        fused.push_back(lib_first ? b : a);
        ratio.push_back(lib.back() / fused.back());
      }
      const double l = Median(lib) * 1e6, f = Median(fused) * 1e6;
      const double speedup = Median(ratio);
      std::printf("| %s | %s | %lld | %.1f | %.1f | %.2fx |\n", s.name,
                  bf16 ? "bf16" : "fp32", static_cast<long long>(rows), l, f,
                  speedup);
      json_rows.push_back(absl::StrFormat(
          "{\"cell\": \"%s\", \"precision\": \"%s\", \"rows\": %d, "
          "\"message_width\": %d, \"memory_width\": %d, \"libtorch_us\": "
          "%.2f, \"fused_us\": %.2f, \"speedup\": %.3f}",
          s.name, bf16 ? "bf16" : "fp32", rows, s.x, s.m, l, f, speedup));
    }
  }
  if (!native_bf16) {
    std::printf(
        "(bf16 rows skipped: this CPU has neither AVX512_BF16 nor "
        "AMX, so LibTorch emulates bf16)\n");
  }
  return mnemo::bench::WriteRowsJson(
             out_path, argc, argv,
             absl::StrFormat("\"threads\": %d, \"reps\": %d, "
                             "\"native_bf16\": %s",
                             threads, reps, native_bf16 ? "true" : "false"),
             json_rows)
             ? 0
             : 1;
}
