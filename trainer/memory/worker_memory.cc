#include "trainer/memory/worker_memory.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "util/file.h"
#include "util/status_macros.h"

namespace mnemo::memory {

WorkerMemory::~WorkerMemory() {
  // The exchange reads the spill store; the spill store goes before its
  // directory (SpillDir's destructor, after the members above it).
  exchange_.reset();
  spill_store_.reset();
}

WorkerMemory::SpillDir::~SpillDir() {
  if (!remove || path.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

void WorkerMemory::Init(const RecordLayout& layout, int64_t num_nodes,
                        torch::Device device) {
  layout_ = layout;
  num_nodes_ = num_nodes;
  device_ = device;
  // No rows until an epoch or a pass begins: a bounded memory (Bound)
  // never holds a row for every node.
  local_.Reset(layout, 0, device);
}

void WorkerMemory::Connect(memstore::NodeStateStore* store,
                           std::function<bool(int64_t)> owned, int rank,
                           StoreTraffic* traffic,
                           WorkingSetStats* working_set) {
  working_set_stats_ = working_set;
  exchange_ = std::make_unique<StoreExchange>(store, &local_, std::move(owned),
                                              rank, traffic, working_set);
}

void WorkerMemory::ResetColumns() {
  if (cache_) {
    local_.ResetCache(layout_, num_nodes_, capacity_, device_);
  } else {
    local_.Reset(layout_, num_nodes_, device_);
  }
}

absl::Status WorkerMemory::Bound(
    const WorkingSetOptions& options, int rank,
    const std::function<void(const std::string&)>& log) {
  namespace fs = std::filesystem;
  const int64_t per_state = HeldStateBytes(layout_);
  capacity_ = std::min(options.budget_bytes / per_state, num_nodes_);
  if (capacity_ < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--memory-cache-bytes %d holds no node state: one takes %d bytes "
        "(memory %d, mails %d floats, times)",
        options.budget_bytes, per_state, layout_.memory_dim,
        layout_.MailboxFloats()));
  }
  if (!options.spill_dir.empty()) {
    spill_dir_.path =
        (fs::path(options.spill_dir) / absl::StrCat("rank-", rank)).string();
    // Scratch space: what an earlier run spilled there means nothing now.
    std::error_code ec;
    fs::remove_all(spill_dir_.path, ec);
    fs::create_directories(spill_dir_.path, ec);
    if (ec) {
      return absl::InvalidArgumentError(
          absl::StrCat("--memory-spill-dir: cannot create ", spill_dir_.path,
                       ": ", ec.message()));
    }
  } else {
    std::string tmpl =
        (fs::temp_directory_path() / "mnemo-spill-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) {
      return absl::InternalError(absl::StrCat(
          "--memory-cache-bytes: cannot create a spill directory under ",
          fs::temp_directory_path().string(), ": ", std::strerror(errno)));
    }
    spill_dir_.path = tmpl;
    spill_dir_.remove = true;
    // Also when the process is killed or fails where no destructor runs.
    if (absl::Status s = RemoveWhenProcessEnds(tmpl); !s.ok()) {
      log(absl::StrCat("warning: ", s.message()));
    }
  }
  memstore::NodeStateStoreOptions so;
  so.dim = static_cast<int>(layout_.RecordFloats());
  so.data_dir = spill_dir_.path;
  // Spilled states go to RocksDB: a small hot tier and block cache, so
  // that the worker's memory stays near its budget.
  so.hot_capacity_bytes = std::max<int64_t>(1 << 20, options.budget_bytes / 8);
  so.block_cache_bytes = std::max<int64_t>(1 << 20, options.budget_bytes / 8);
  // A restored state goes to the working set, not back into the spill
  // store's hot tier; its memtables stay small for the same reason.
  so.promotion = memstore::PromotionPolicy::kNever;
  so.write_buffer_bytes =
      std::clamp<int64_t>(options.budget_bytes / 8, 4ll << 20, 64ll << 20);
  so.write_policy = memstore::WritePolicy::kWriteBack;
  so.cold_read_threads = 0;
  // Restores read with pread: mapped files would count the spill store's
  // pages in the worker's resident memory.
  so.mmap_reads = false;
  auto store = memstore::Open(so);
  if (!store.ok()) {
    return absl::Status(store.status().code(),
                        absl::StrCat("--memory-spill-dir ", spill_dir_.path,
                                     ": ", store.status().message()));
  }
  spill_store_ = std::move(*store);
  cache_ = std::make_unique<plan::WorkingSetCache>(num_nodes_, capacity_,
                                                   options.eviction);
  // With a bounded working set the memory holds rows for its capacity
  // only: a row for every node, even freed again, would stay in the
  // process's heap.
  ResetColumns();
  if (working_set_stats_ != nullptr) {
    working_set_stats_->capacity_states = capacity_;
  }
  log(absl::StrFormat(
      "worker %d: working set of %d node states (%s eviction, %.1f MiB of "
      "%d nodes' %.1f MiB), spilling to %s",
      rank, capacity_, plan::EvictionName(options.eviction),
      capacity_ * per_state / 1048576.0, num_nodes_,
      num_nodes_ * per_state / 1048576.0, spill_dir_.path));
  return absl::OkStatus();
}

void WorkerMemory::BeginEpoch(plan::ReadPredictor predicted,
                              bool pulls_every_read) {
  ResetColumns();
  if (!exchange_) return;
  exchange_->ClearTrained();
  if (!cache_) return;
  exchange_->SetWorkingSet(cache_.get(), spill_store_.get(), pulls_every_read);
  exchange_->BeginEpoch(std::move(predicted));
}

void WorkerMemory::BeginEvaluation(plan::ReadPredictor predicted,
                                   int prefetch_batches) {
  ResetColumns();
  exchange_->SetWorkingSet(cache_.get(), spill_store_.get(),
                           /*pulls_every_read=*/false);
  exchange_->BeginEvaluation(std::move(predicted), prefetch_batches);
  exchange_->Prefetch(0);
}

absl::Status WorkerMemory::Ready(const std::vector<int64_t>& nodes,
                                 const StateVersions& versions) {
  if (!cache_) return absl::OkStatus();
  RETURN_IF_ERROR(exchange_->Acquire(nodes, versions));
  // An evaluation pass's next misses come while this batch runs (a no-op
  // without its prefetch).
  exchange_->Prefetch(exchange_->position() + 1);
  return absl::OkStatus();
}

void WorkerMemory::Advance(const batch::PositiveUpdate& update,
                           const torch::Tensor& batch_memory,
                           const torch::Tensor& rows,
                           const std::vector<int64_t>& events,
                           const std::vector<uint8_t>& target) {
  // A batch with nothing to apply (no event of its own) computed nothing.
  if (batch_memory.defined() || rows.defined()) {
    local_.Apply(update, batch_memory, rows);
  }
  if (!exchange_) return;
  exchange_->MarkTrained(events, target);
  exchange_->MarkChanged(update.node_ids);
}

void WorkerMemory::EndBatch() {
  if (exchange_) exchange_->set_position(exchange_->position() + 1);
}

}  // namespace mnemo::memory
