#include "memstore/node_state_store.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "memstore/store_impl.h"
#include "util/enum_names.h"

namespace mnemo::memstore {
namespace {

absl::Status Validate(const NodeStateStoreOptions& o) {
  if (o.dim <= 0)
    return absl::InvalidArgumentError(
        absl::StrCat("dim must be > 0, got ", o.dim));
  if (o.hot_capacity_bytes < 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "hot_capacity_bytes must be >= 0, got ", o.hot_capacity_bytes));
  if (o.hot_capacity_bytes > 0 && o.data_dir.empty())
    return absl::InvalidArgumentError(
        "hot_capacity_bytes > 0 needs a data_dir for the cold tier");
  if (o.max_batch <= 0)
    return absl::InvalidArgumentError(
        absl::StrCat("max_batch must be > 0, got ", o.max_batch));
  if (o.cold_read_threads < -1 || o.cold_read_threads > kMaxColdReadThreads)
    return absl::InvalidArgumentError(
        absl::StrCat("cold_read_threads must be in [-1, ", kMaxColdReadThreads,
                     "], got ", o.cold_read_threads));
  if (o.write_buffer_bytes < (64 << 10))
    return absl::InvalidArgumentError(absl::StrCat(
        "write_buffer_bytes must be >= 65536, got ", o.write_buffer_bytes));
  if (o.block_cache_bytes < 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "block_cache_bytes must be >= 0, got ", o.block_cache_bytes));
  if (o.journal_limit_bytes <= 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "journal_limit_bytes must be > 0, got ", o.journal_limit_bytes));
  if (o.sync && o.write_policy != WritePolicy::kWriteThrough)
    return absl::InvalidArgumentError("sync needs the write-through policy");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<NodeStateStore>> Open(
    const NodeStateStoreOptions& options) {
  if (absl::Status s = Validate(options); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<StoreImpl>> store = StoreImpl::Open(options);
  if (!store.ok()) return store.status();
  return std::unique_ptr<NodeStateStore>(std::move(store).value());
}

namespace {

// Whether no value is NaN or infinite (exponent bits all ones): one
// branch-free integer pass the compiler vectorizes (std::isfinite per value
// was an eighth of a write-through push).
bool AllFinite(const float* v, size_t n) {
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, v + i, 4);
    bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
  }
  return bad == 0;
}

}  // namespace

absl::Status ValidatePush(absl::Span<const int64_t> ids,
                          absl::Span<const float> states,
                          absl::Span<const uint64_t> versions,
                          absl::Span<const double> times, int32_t writer,
                          int dim, int64_t first_index) {
  const int64_t n = static_cast<int64_t>(ids.size());
  if (writer < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("negative writer rank ", writer));
  }
  if (static_cast<int64_t>(states.size()) != n * dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("push of ", n, " ids carries ", states.size(),
                     " floats, expected ", n * dim, " (dim ", dim, ")"));
  }
  if (static_cast<int64_t>(versions.size()) != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "push of ", n, " ids carries ", versions.size(), " versions"));
  }
  if (static_cast<int64_t>(times.size()) != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("push of ", n, " ids carries ", times.size(), " times"));
  }
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "negative node id %d at index %d", ids[i], first_index + i));
    }
  }
  if (!AllFinite(states.data(), states.size())) {  // then find the offender
    for (int64_t j = 0; j < n * dim; ++j) {
      if (std::isfinite(states[j])) continue;
      return absl::InvalidArgumentError(absl::StrFormat(
          "state of node %d (index %d) holds a non-finite value (%f) at "
          "position %d",
          ids[j / dim], first_index + j / dim, states[j], j % dim));
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    if (versions[i] == 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "version of node %d (index %d) is 0; versions start at 1", ids[i],
          first_index + i));
    }
    if (!std::isfinite(times[i])) {
      return absl::InvalidArgumentError(
          absl::StrFormat("time of node %d (index %d) is %f", ids[i],
                          first_index + i, times[i]));
    }
  }
  return absl::OkStatus();
}

namespace {
constexpr EnumName<WritePolicy> kWritePolicyNames[] = {
    {WritePolicy::kWriteThrough, "write-through"},
    {WritePolicy::kWriteBack, "write-back"}};
}  // namespace

absl::StatusOr<WritePolicy> ParseWritePolicy(std::string_view name) {
  return ParseEnum(kWritePolicyNames, "--write-policy", name);
}

std::string_view WritePolicyName(WritePolicy policy) {
  return EnumToName(kWritePolicyNames, policy);
}

}  // namespace mnemo::memstore
