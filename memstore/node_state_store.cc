#include "memstore/node_state_store.h"

#include "absl/strings/str_cat.h"
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
  if (o.cold_read_threads < -1)
    return absl::InvalidArgumentError(absl::StrCat(
        "cold_read_threads must be >= -1, got ", o.cold_read_threads));
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
