#include "services/id_map.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <numeric>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "util/status_macros.h"

namespace mnemo::services {

absl::StatusOr<IdMap> IdMap::Load(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read"));
  IdMap map;
  std::vector<int64_t> dense_ids;
  std::vector<int64_t> lines;  // [i]: the line of entry i, for errors
  bool contiguous = true;
  std::string line;
  int64_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    // A UTF-8 byte-order mark is not part of the header.
    if (lineno == 1 && line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);
    if (line.empty()) continue;
    std::vector<absl::string_view> f = absl::StrSplit(line, ',');
    if (lineno == 1) {
      if (f.size() < 2 || f[0] != "dense_id" || f[1] != "original_id") {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ":1: expected header dense_id,original_id[,kind]"));
      }
      continue;
    }
    int64_t dense = 0, original = 0;
    if (f.size() < 2 || f.size() > 3 || !absl::SimpleAtoi(f[0], &dense) ||
        !absl::SimpleAtoi(f[1], &original) || dense < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ":", lineno, ": expected dense_id,original_id[,kind], got '",
          line, "'"));
    }
    ASSIGN_OR_RETURN(const uint8_t kind,
                     map.KindIndex(path, lineno,
                                   f.size() == 3 ? f[2] : absl::string_view()));
    if (dense != static_cast<int64_t>(map.original_.size())) contiguous = false;
    if (map.original_.size() >= std::numeric_limits<uint32_t>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", lineno, ": more than 2^32 - 1 entries"));
    }
    dense_ids.push_back(dense);
    lines.push_back(lineno);
    map.original_.push_back(original);
    map.kind_.push_back(kind);
    map.dense_end_ = std::max(map.dense_end_, dense + 1);
  }
  if (!contiguous) RETURN_IF_ERROR(map.SortByDense(path, dense_ids, lines));
  map.IndexByOriginal();
  return map;
}

absl::StatusOr<uint8_t> IdMap::KindIndex(const std::string& path,
                                         int64_t lineno,
                                         absl::string_view kind) {
  if (kinds_.empty()) kinds_.emplace_back();  // kind 0: empty
  size_t i = 0;
  while (i < kinds_.size() && kinds_[i] != kind) ++i;
  if (i == kinds_.size()) {
    if (kinds_.size() == 256) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", lineno, ": more than 255 distinct kinds"));
    }
    kinds_.emplace_back(kind);
  }
  return static_cast<uint8_t>(i);
}

absl::Status IdMap::SortByDense(const std::string& path,
                                const std::vector<int64_t>& dense_ids,
                                const std::vector<int64_t>& lines) {
  // Order the columns by dense id; a repeated one is an error.
  const size_t n = original_.size();
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return dense_ids[a] < dense_ids[b];
  });
  for (size_t i = 1; i < n; ++i) {
    if (dense_ids[order[i]] == dense_ids[order[i - 1]]) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", lines[order[i]],
                                                     ": duplicate dense id ",
                                                     dense_ids[order[i]]));
    }
  }
  std::vector<int64_t> original(n);
  std::vector<uint8_t> kind(n);
  dense_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    dense_[i] = dense_ids[order[i]];
    original[i] = original_[order[i]];
    kind[i] = kind_[order[i]];
  }
  original_ = std::move(original);
  kind_ = std::move(kind);
  return absl::OkStatus();
}

void IdMap::IndexByOriginal() {
  by_original_.resize(original_.size());
  std::iota(by_original_.begin(), by_original_.end(), 0u);
  std::sort(by_original_.begin(), by_original_.end(),
            [&](uint32_t a, uint32_t b) {
              return original_[a] != original_[b] ? original_[a] < original_[b]
                                                  : a < b;
            });
}

int64_t IdMap::IndexOf(int64_t dense_id) const {
  if (dense_.empty()) {
    return dense_id >= 0 && dense_id < static_cast<int64_t>(original_.size())
               ? dense_id
               : -1;
  }
  auto it = std::lower_bound(dense_.begin(), dense_.end(), dense_id);
  if (it == dense_.end() || *it != dense_id) return -1;
  return it - dense_.begin();
}

std::vector<int64_t> IdMap::DenseIds(int64_t original_id,
                                     const std::string& kind) const {
  std::vector<int64_t> out;
  auto it =
      std::lower_bound(by_original_.begin(), by_original_.end(), original_id,
                       [&](uint32_t i, int64_t v) { return original_[i] < v; });
  for (; it != by_original_.end() && original_[*it] == original_id; ++it) {
    if (kind.empty() || kinds_[kind_[*it]] == kind) {
      out.push_back(dense_.empty() ? int64_t{*it} : dense_[*it]);
    }
  }
  return out;
}

std::optional<IdMap::Entry> IdMap::Find(int64_t dense_id) const {
  const int64_t i = IndexOf(dense_id);
  if (i < 0) return std::nullopt;
  return Entry{original_[i], kinds_[kind_[i]]};
}

}  // namespace mnemo::services
