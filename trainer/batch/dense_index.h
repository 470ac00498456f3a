// Distinct ids in order of first insertion, each with its dense index
// (0, 1, ...): the batch builder's map from node ids to a batch's slots,
// to the rows of a table of node ids, or to a mailbox's receivers. Ids lie
// in [0, universe); lookups are O(1) through a table of the universe's
// size, and Clear() costs the ids inserted, not the universe.
#ifndef MNEMO_TRAINER_BATCH_DENSE_INDEX_H_
#define MNEMO_TRAINER_BATCH_DENSE_INDEX_H_

#include <cstdint>
#include <vector>

namespace mnemo::batch {

class DenseIndex {
 public:
  DenseIndex() = default;
  explicit DenseIndex(int64_t universe) { Reserve(universe); }

  // Ids may lie in [0, universe) (grows only; keeps what was inserted).
  void Reserve(int64_t universe) {
    if (static_cast<int64_t>(index_.size()) < universe) {
      index_.resize(universe, -1);
    }
  }
  int64_t universe() const { return static_cast<int64_t>(index_.size()); }

  // The index of `id`, inserting it (as the next index) if absent.
  int32_t Insert(int64_t id) {
    int32_t& i = index_[id];
    if (i < 0) {
      i = static_cast<int32_t>(ids_.size());
      ids_.push_back(id);
    }
    return i;
  }
  // The index of `id`, or -1.
  int32_t Find(int64_t id) const { return index_[id]; }

  // The ids by index.
  const std::vector<int64_t>& ids() const { return ids_; }
  int64_t size() const { return static_cast<int64_t>(ids_.size()); }

  void Clear() {
    for (const int64_t id : ids_) index_[id] = -1;
    ids_.clear();
  }

 private:
  std::vector<int32_t> index_;
  std::vector<int64_t> ids_;
};

}  // namespace mnemo::batch

#endif  // MNEMO_TRAINER_BATCH_DENSE_INDEX_H_
