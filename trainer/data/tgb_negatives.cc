#include "trainer/data/tgb_negatives.h"

#include <algorithm>
#include <charconv>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "util/file.h"
#include "util/splitmix64.h"

namespace mnemo::data {
namespace {

using Rng = SplitMix64;

// k distinct elements of `pool` (all of it, shuffled, when k >= its size;
// then, with `fill`, more drawn with replacement up to k).
void Choose(std::vector<int32_t> pool, int64_t k, bool fill, Rng* rng,
            std::vector<int32_t>* out) {
  const int64_t n = static_cast<int64_t>(pool.size());
  const int64_t take = std::min(k, n);
  for (int64_t i = 0; i < take; ++i) {  // partial Fisher-Yates
    std::swap(pool[i], pool[i + rng->Below(n - i)]);
    out->push_back(pool[i]);
  }
  for (int64_t i = take; fill && n > 0 && i < k; ++i) {
    out->push_back(pool[rng->Below(n)]);
  }
}

uint64_t SrcTimeKey(int32_t src, double t) {
  uint64_t bits;
  std::memcpy(&bits, &t, sizeof bits);
  return (static_cast<uint64_t>(static_cast<uint32_t>(src)) *
          0x9E3779B97F4A7C15ull) ^
         bits;
}

}  // namespace

RankingNegatives::RankingNegatives(std::vector<int64_t> begin,
                                   std::vector<int32_t> dst)
    : begin_(std::move(begin)), dst_(std::move(dst)) {}

RankingNegatives RankingNegatives::EveryOther(
    std::vector<int32_t> all, std::vector<int64_t> excluded_begin,
    std::vector<int32_t> excluded) {
  RankingNegatives r(std::move(excluded_begin), std::move(excluded));
  r.every_other_ = true;
  r.all_ = std::move(all);
  return r;
}

int64_t RankingNegatives::positives() const {
  return begin_.empty() ? 0 : static_cast<int64_t>(begin_.size()) - 1;
}

void RankingNegatives::Get(int64_t i, std::vector<int32_t>* out) const {
  out->clear();
  const auto lo = dst_.begin() + begin_[i], hi = dst_.begin() + begin_[i + 1];
  if (!every_other_) {
    out->assign(lo, hi);
    return;
  }
  out->reserve(all_.size());
  std::set_difference(all_.begin(), all_.end(), lo, hi,
                      std::back_inserter(*out));
}

RankingNegatives MakeTgbNegatives(const EventLog& log,
                                  absl::Span<const int64_t> positives,
                                  absl::Span<const int32_t> destinations,
                                  absl::Span<const int64_t> history,
                                  const TgbNegativeOptions& o) {
  // The split's true destinations of each (src, t).
  absl::flat_hash_map<uint64_t, std::vector<int32_t>> same_time;
  for (const int64_t e : positives) {
    same_time[SrcTimeKey(log.src[e], log.t[e])].push_back(log.dst[e]);
  }
  for (auto& [key, dsts] : same_time) {
    std::sort(dsts.begin(), dsts.end());
    dsts.erase(std::unique(dsts.begin(), dsts.end()), dsts.end());
  }
  auto true_dsts = [&](int64_t e) -> const std::vector<int32_t>& {
    return same_time.find(SrcTimeKey(log.src[e], log.t[e]))->second;
  };
  std::vector<int64_t> begin = {0};
  std::vector<int32_t> dst;
  if (o.strategy == TgbStrategy::kEveryOther) {
    for (const int64_t e : positives) {
      const std::vector<int32_t>& ex = true_dsts(e);
      dst.insert(dst.end(), ex.begin(), ex.end());
      begin.push_back(static_cast<int64_t>(dst.size()));
    }
    return RankingNegatives::EveryOther(
        std::vector<int32_t>(destinations.begin(), destinations.end()),
        std::move(begin), std::move(dst));
  }
  // Each source's historical destinations (sorted, distinct).
  absl::flat_hash_map<int32_t, std::vector<int32_t>> seen;
  for (const int64_t e : history) seen[log.src[e]].push_back(log.dst[e]);
  for (auto& [src, dsts] : seen) {
    std::sort(dsts.begin(), dsts.end());
    dsts.erase(std::unique(dsts.begin(), dsts.end()), dsts.end());
  }
  const std::vector<int32_t> none;
  Rng rng(o.seed);
  const int64_t max_hist =
      static_cast<int64_t>(static_cast<double>(o.per_positive) * o.hist_ratio);
  std::vector<int32_t> pool;
  for (const int64_t e : positives) {
    const std::vector<int32_t>& now = true_dsts(e);
    auto it = seen.find(log.src[e]);
    const std::vector<int32_t>& hist = it == seen.end() ? none : it->second;
    const size_t before = dst.size();
    pool.clear();
    std::set_difference(hist.begin(), hist.end(), now.begin(), now.end(),
                        std::back_inserter(pool));
    Choose(pool, max_hist, /*fill=*/false, &rng, &dst);
    const int64_t rest =
        o.per_positive - static_cast<int64_t>(dst.size() - before);
    // Random: neither historical nor true at t. Rejection while the pool is
    // large; the explicit pool when exclusions crowd it.
    const int64_t excluded = static_cast<int64_t>(hist.size() + now.size());
    const int64_t n = static_cast<int64_t>(destinations.size());
    auto is_excluded = [&](int32_t d) {
      return std::binary_search(hist.begin(), hist.end(), d) ||
             std::binary_search(now.begin(), now.end(), d);
    };
    if (n - excluded >= 4 * rest) {
      absl::flat_hash_set<int32_t> chosen;
      while (static_cast<int64_t>(chosen.size()) < rest) {
        const int32_t d = destinations[rng.Below(n)];
        if (is_excluded(d) || !chosen.insert(d).second) continue;
        dst.push_back(d);
      }
    } else {
      pool.clear();
      for (const int32_t d : destinations) {
        if (!is_excluded(d)) pool.push_back(d);
      }
      Choose(pool, rest, /*fill=*/true, &rng, &dst);
    }
    begin.push_back(static_cast<int64_t>(dst.size()));
  }
  return RankingNegatives(std::move(begin), std::move(dst));
}

absl::Status WriteTgbNegatives(const std::string& path, const EventLog& log,
                               absl::Span<const int64_t> positives,
                               const RankingNegatives& negatives,
                               const std::string& what) {
  std::string text = absl::StrCat("# mnemo tgb negatives: ", what, "\n");
  std::vector<int32_t> negs;
  for (size_t i = 0; i < positives.size(); ++i) {
    const int64_t e = positives[i];
    absl::StrAppendFormat(&text, "%d %d %.17g", log.original_ids[log.src[e]],
                          log.original_ids[log.dst[e]],
                          log.t[e] + log.time_offset);
    negatives.Get(static_cast<int64_t>(i), &negs);
    for (const int32_t d : negs)
      absl::StrAppend(&text, " ", log.original_ids[d]);
    text += "\n";
  }
  return WriteFileDurably(path, {text});
}

absl::StatusOr<RankingNegatives> ReadTgbNegatives(
    const std::string& path, const EventLog& log,
    absl::Span<const int64_t> positives) {
  absl::StatusOr<std::string> text = ReadMaybeGzip(path);
  if (!text.ok()) return text.status();
  // Original id -> dense id among destinations (formats with separate
  // user and item spaces may reuse an original id for a source).
  absl::flat_hash_map<int64_t, int32_t> as_dst;
  for (int64_t e = 0; e < log.num_events(); ++e) {
    as_dst.emplace(log.original_ids[log.dst[e]], log.dst[e]);
  }
  auto bad = [&](int64_t line, const std::string& what) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s:%d: %s", path, line, what));
  };
  std::vector<int64_t> begin = {0};
  std::vector<int32_t> dst;
  int64_t line_no = 0;
  size_t i = 0;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    ++line_no;
    if (line.empty() || line[0] == '#') continue;
    if (i >= positives.size()) {
      return bad(line_no, absl::StrCat("more lines than the ", positives.size(),
                                       " positives of this split"));
    }
    std::vector<absl::string_view> f =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.size() < 3) return bad(line_no, "expected 'src dst t neg...'");
    auto id = [](absl::string_view s, int64_t* v) {
      auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
      return ec == std::errc() && p == s.data() + s.size();
    };
    int64_t src = 0, d = 0;
    double t = 0;
    const std::string t_text(f[2]);
    char* end = nullptr;
    t = std::strtod(t_text.c_str(), &end);
    if (!id(f[0], &src) || !id(f[1], &d) ||
        end != t_text.c_str() + t_text.size()) {
      return bad(line_no, "expected 'src dst t neg...'");
    }
    const int64_t e = positives[i];
    if (src != log.original_ids[log.src[e]] ||
        d != log.original_ids[log.dst[e]] || t != log.t[e] + log.time_offset) {
      return bad(line_no,
                 absl::StrFormat(
                     "holds the negatives of (%d, %d, %.17g), but "
                     "positive %d of this split is (%d, %d, %.17g): "
                     "the file was made for other data, another "
                     "split or --max-events",
                     src, d, t, i, log.original_ids[log.src[e]],
                     log.original_ids[log.dst[e]], log.t[e] + log.time_offset));
    }
    for (size_t j = 3; j < f.size(); ++j) {
      int64_t neg = 0;
      if (!id(f[j], &neg)) return bad(line_no, "a negative is not an id");
      auto it = as_dst.find(neg);
      if (it == as_dst.end()) {
        return bad(line_no, absl::StrCat("negative ", neg,
                                         " is no destination of the data"));
      }
      dst.push_back(it->second);
    }
    begin.push_back(static_cast<int64_t>(dst.size()));
    ++i;
  }
  if (i != positives.size()) {
    return bad(line_no, absl::StrCat("holds ", i, " positives, the split ",
                                     positives.size()));
  }
  return RankingNegatives(std::move(begin), std::move(dst));
}

}  // namespace mnemo::data
