#include "trainer/data/synthetic.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "util/splitmix64.h"

namespace mnemo::data {
namespace {

using Rng = SplitMix64;

// Weighted choice by inverse transform over cumulative weights.
int64_t Pick(const double* cumulative, int64_t n, double u) {
  const double target = u * cumulative[n - 1];
  const double* it = std::upper_bound(cumulative, cumulative + n, target);
  return std::min<int64_t>(it - cumulative, n - 1);
}

}  // namespace

absl::Status ValidateSyntheticOptions(const SyntheticOptions& o) {
  auto bad = [](const char* flag, const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " must be ", what));
  };
  if (o.nodes < 2 || o.nodes > (int64_t{1} << 31) - 1) {
    return bad("--nodes", absl::StrCat(">= 2 and < 2^31, got ", o.nodes));
  }
  if (o.events < 1)
    return bad("--events", absl::StrCat(">= 1, got ", o.events));
  if (!(o.degree_exponent == 0 || o.degree_exponent > 1) ||
      !std::isfinite(o.degree_exponent)) {
    return bad("--degree-exponent",
               absl::StrCat("> 1, or 0 for uniform activity, got ",
                            o.degree_exponent));
  }
  if (o.communities < 1 || o.communities > o.nodes) {
    return bad("--communities",
               absl::StrCat("between 1 and --nodes, got ", o.communities));
  }
  if (!(o.mixing >= 0 && o.mixing <= 1)) {
    return bad("--mixing", absl::StrCat("in [0, 1], got ", o.mixing));
  }
  if (o.bursts < 0)
    return bad("--bursts", absl::StrCat(">= 0, got ", o.bursts));
  if (o.burst_events < 1) {
    return bad("--burst-events", absl::StrCat(">= 1, got ", o.burst_events));
  }
  if (!(o.burst_factor >= 1) || !std::isfinite(o.burst_factor)) {
    return bad("--burst-factor", absl::StrCat(">= 1, got ", o.burst_factor));
  }
  if (!(o.mean_gap > 0) || !std::isfinite(o.mean_gap)) {
    return bad("--mean-gap", absl::StrCat("> 0, got ", o.mean_gap));
  }
  return absl::OkStatus();
}

absl::Status GenerateSynthetic(
    const SyntheticOptions& o,
    const std::function<void(int64_t, int64_t, int64_t)>& emit) {
  if (absl::Status s = ValidateSyntheticOptions(o); !s.ok()) return s;
  const int64_t n = o.nodes, c = o.communities;
  Rng rng(o.seed);
  // Activity ranks: a random permutation (Fisher-Yates with our Rng).
  std::vector<int32_t> rank(n);
  std::iota(rank.begin(), rank.end(), 0);
  for (int64_t i = n - 1; i > 0; --i) {
    std::swap(rank[i], rank[rng.Below(i + 1)]);
  }
  const double s =
      o.degree_exponent == 0 ? 0.0 : 1.0 / (o.degree_exponent - 1.0);
  auto weight = [&](int64_t u) {
    return s == 0 ? 1.0 : std::pow(static_cast<double>(rank[u]) + 1.0, -s);
  };
  // Cumulative weights over all nodes, and per community over its members
  // (community k holds k, k + c, k + 2c, ...: member j is node k + j * c).
  std::vector<double> all(n);
  double acc = 0;
  for (int64_t u = 0; u < n; ++u) all[u] = acc += weight(u);
  std::vector<int64_t> begin(c + 1, 0);
  for (int64_t k = 0; k < c; ++k) {
    begin[k + 1] = begin[k] + (n - k + c - 1) / c;
  }
  std::vector<double> within(n);
  for (int64_t k = 0; k < c; ++k) {
    double a = 0;
    for (int64_t j = 0; begin[k] + j < begin[k + 1]; ++j) {
      within[begin[k] + j] = a += weight(k + j * c);
    }
  }
  // Burst episodes: sorted start positions.
  std::vector<int64_t> burst_start(o.bursts);
  for (int64_t& b : burst_start) b = rng.Below(o.events);
  std::sort(burst_start.begin(), burst_start.end());
  size_t next_burst = 0;
  int64_t burst_left = 0;

  double time = 0;
  for (int64_t e = 0; e < o.events; ++e) {
    while (next_burst < burst_start.size() && burst_start[next_burst] <= e) {
      burst_left = std::max(burst_left, o.burst_events);
      ++next_burst;
    }
    double gap = -std::log1p(-rng.Uniform()) * o.mean_gap;
    if (burst_left > 0) {
      gap /= o.burst_factor;
      --burst_left;
    }
    time += gap;
    const int64_t src = Pick(all.data(), n, rng.Uniform());
    int64_t dst = src;
    const bool global = c == 1 || rng.Uniform() < o.mixing;
    const int64_t k = src % c;
    const int64_t size = begin[k + 1] - begin[k];
    for (int attempt = 0; dst == src && attempt < 8; ++attempt) {
      if (global || size < 2) {
        dst = Pick(all.data(), n, rng.Uniform());
      } else {
        dst = k + Pick(within.data() + begin[k], size, rng.Uniform()) * c;
      }
    }
    // Still a self-loop (a hub drawing itself): the next node instead.
    if (dst == src) dst = (global || size < 2) ? (src + 1) % n : (src + c) % n;
    if (dst == src) dst = (src + 1) % n;
    emit(src, dst, static_cast<int64_t>(std::floor(time)));
  }
  return absl::OkStatus();
}

absl::Status WriteSynthetic(const SyntheticOptions& o,
                            const std::string& path) {
  if (absl::Status s = ValidateSyntheticOptions(o); !s.ok()) return s;
  const bool gz =
      path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  const std::string tmp = path + ".tmp";
  std::FILE* plain = nullptr;
  gzFile zipped = nullptr;
  if (gz) {
    zipped = gzopen(tmp.c_str(), "wb6");
  } else {
    plain = std::fopen(tmp.c_str(), "wb");
  }
  if (plain == nullptr && zipped == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot write ", tmp, ": ", std::strerror(errno)));
  }
  std::string buffer;
  bool ok = true;
  auto flush = [&] {
    if (buffer.empty() || !ok) return;
    if (gz) {
      ok = gzwrite(zipped, buffer.data(),
                   static_cast<unsigned>(buffer.size())) ==
           static_cast<int>(buffer.size());
    } else {
      ok = std::fwrite(buffer.data(), 1, buffer.size(), plain) == buffer.size();
    }
    buffer.clear();
  };
  absl::Status s = GenerateSynthetic(o, [&](int64_t u, int64_t v, int64_t t) {
    absl::StrAppendFormat(&buffer, "%d %d %d\n", u, v, t);
    if (buffer.size() >= (1 << 20)) flush();
  });
  flush();
  const bool closed = gz ? gzclose(zipped) == Z_OK : std::fclose(plain) == 0;
  if (s.ok() && !(ok && closed)) {
    s = absl::InternalError(
        absl::StrCat("cannot write ", tmp, ": ", std::strerror(errno)));
  }
  if (s.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) {
    s = absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ", path,
                                         ": ", std::strerror(errno)));
  }
  if (!s.ok()) std::remove(tmp.c_str());
  return s;
}

}  // namespace mnemo::data
