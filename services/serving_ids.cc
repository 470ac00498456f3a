#include "services/serving_ids.h"

#include <utility>

namespace mnemo::services {

ServingIds::ServingIds(std::vector<int64_t> original_ids, int64_t max_new_nodes)
    : originals_(std::move(original_ids)),
      run_nodes_(static_cast<int64_t>(originals_.size())),
      max_new_(max_new_nodes) {
  dense_.reserve(originals_.size());
  for (size_t i = 0; i < originals_.size(); ++i) {
    dense_.emplace(originals_[i], static_cast<int32_t>(i));
  }
}

std::optional<int32_t> ServingIds::Find(int64_t original) const {
  auto it = dense_.find(original);
  if (it == dense_.end()) return std::nullopt;
  return it->second;
}

void ServingIds::Add(const std::vector<int64_t>& originals) {
  for (int64_t o : originals) {
    dense_.emplace(o, static_cast<int32_t>(originals_.size()));
    originals_.push_back(o);
  }
}

}  // namespace mnemo::services
