// Just enough of CPython to redraw the TGN reference's new-node hold-out
// exactly (twitter-research/tgn utils/data_processing.py):
//   random.seed(2020)
//   test_node_set = set(sources[ts > val_time]).union(
//       set(destinations[ts > val_time]))
//   random.sample(test_node_set, k)   # tuple(set) on Python >= 3.11
// The draw depends on Python's Mersenne Twister seeding (init_by_array),
// random.sample's algorithm and the iteration order of a set of ints, all
// reproduced here for non-negative int keys (CPython 3.7-3.12).
#ifndef MNEMO_TRAINER_DATA_PYTHON_RANDOM_H_
#define MNEMO_TRAINER_DATA_PYTHON_RANDOM_H_

#include <cstdint>
#include <vector>

namespace mnemo::data::py {

// random.Random with an int seed.
class Random {
 public:
  explicit Random(uint64_t seed);
  uint32_t GenRandUint32();
  // getrandbits(k), 1 <= k <= 32.
  uint32_t GetRandBits(int k);
  // _randbelow(n), n >= 1 and < 2^32.
  uint32_t RandBelow(uint32_t n);
  // random.sample(population, k) (k <= population size).
  std::vector<int64_t> Sample(const std::vector<int64_t>& population,
                              int64_t k);

 private:
  void InitGenRand(uint32_t s);
  uint32_t mt_[624];
  int index_ = 625;
};

// A CPython set of non-negative ints (hash(x) == x), for its iteration order.
class IntSet {
 public:
  IntSet();
  // set.add(x).
  void Add(int64_t key);
  // set.update(other) / union with another set (set_merge).
  void Merge(const IntSet& other);
  // Keys in iteration order (tuple(s)).
  std::vector<int64_t> Keys() const;
  int64_t size() const { return used_; }

 private:
  struct Slot {
    bool full = false;
    int64_t key = 0;
  };
  void Resize(int64_t min_used);
  static void InsertClean(std::vector<Slot>* table, int64_t key);

  std::vector<Slot> table_;
  int64_t fill_ = 0, used_ = 0;
};

}  // namespace mnemo::data::py

#endif  // MNEMO_TRAINER_DATA_PYTHON_RANDOM_H_
