#include "trainer/data/python_random.h"

#include <cmath>
#include <unordered_set>

namespace mnemo::data::py {

// --- Mersenne Twister as CPython's _randommodule.c -------------------------

void Random::InitGenRand(uint32_t s) {
  mt_[0] = s;
  for (int i = 1; i < 624; ++i) {
    mt_[i] = 1812433253u * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + i;
  }
  index_ = 624;
}

Random::Random(uint64_t seed) {
  // random.seed(int): init_by_array over the 32-bit chunks of |seed|, least
  // significant first (at least one chunk).
  std::vector<uint32_t> key;
  do {
    key.push_back(static_cast<uint32_t>(seed));
    seed >>= 32;
  } while (seed != 0);
  InitGenRand(19650218u);
  const int n = 624, key_length = static_cast<int>(key.size());
  int i = 1, j = 0;
  for (int k = std::max(n, key_length); k; --k) {
    mt_[i] =
        (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1664525u)) + key[j] + j;
    ++i;
    ++j;
    if (i >= n) {
      mt_[0] = mt_[n - 1];
      i = 1;
    }
    if (j >= key_length) j = 0;
  }
  for (int k = n - 1; k; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1566083941u)) - i;
    ++i;
    if (i >= n) {
      mt_[0] = mt_[n - 1];
      i = 1;
    }
  }
  mt_[0] = 0x80000000u;
  index_ = 624;
}

uint32_t Random::GenRandUint32() {
  static constexpr uint32_t kMag01[2] = {0x0u, 0x9908b0dfu};
  constexpr int n = 624, m = 397;
  if (index_ >= n) {
    int kk = 0;
    uint32_t y;
    for (; kk < n - m; ++kk) {
      y = (mt_[kk] & 0x80000000u) | (mt_[kk + 1] & 0x7fffffffu);
      mt_[kk] = mt_[kk + m] ^ (y >> 1) ^ kMag01[y & 1];
    }
    for (; kk < n - 1; ++kk) {
      y = (mt_[kk] & 0x80000000u) | (mt_[kk + 1] & 0x7fffffffu);
      mt_[kk] = mt_[kk + (m - n)] ^ (y >> 1) ^ kMag01[y & 1];
    }
    y = (mt_[n - 1] & 0x80000000u) | (mt_[0] & 0x7fffffffu);
    mt_[n - 1] = mt_[m - 1] ^ (y >> 1) ^ kMag01[y & 1];
    index_ = 0;
  }
  uint32_t y = mt_[index_++];
  y ^= (y >> 11);
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= (y >> 18);
  return y;
}

uint32_t Random::GetRandBits(int k) { return GenRandUint32() >> (32 - k); }

uint32_t Random::RandBelow(uint32_t n) {
  int k = 0;
  while (k < 32 && (n >> k) != 0) ++k;  // n.bit_length()
  uint32_t r = GetRandBits(k);
  while (r >= n) r = GetRandBits(k);
  return r;
}

std::vector<int64_t> Random::Sample(const std::vector<int64_t>& population,
                                    int64_t k) {
  const int64_t n = static_cast<int64_t>(population.size());
  std::vector<int64_t> result(k);
  int64_t setsize = 21;
  if (k > 5) {
    setsize += static_cast<int64_t>(std::pow(
        4.0, std::ceil(std::log(static_cast<double>(k) * 3) / std::log(4.0))));
  }
  if (n <= setsize) {
    std::vector<int64_t> pool = population;
    for (int64_t i = 0; i < k; ++i) {
      const uint32_t j = RandBelow(static_cast<uint32_t>(n - i));
      result[i] = pool[j];
      pool[j] = pool[n - i - 1];
    }
  } else {
    std::unordered_set<uint32_t> selected;
    for (int64_t i = 0; i < k; ++i) {
      uint32_t j = RandBelow(static_cast<uint32_t>(n));
      while (selected.count(j)) j = RandBelow(static_cast<uint32_t>(n));
      selected.insert(j);
      result[i] = population[j];
    }
  }
  return result;
}

// --- set of ints as CPython's setobject.c ----------------------------------

namespace {
constexpr int64_t kMinSize = 8;
constexpr int kLinearProbes = 9;
constexpr int kPerturbShift = 5;
}  // namespace

IntSet::IntSet() : table_(kMinSize) {}

void IntSet::InsertClean(std::vector<Slot>* table, int64_t key) {
  const uint64_t mask = table->size() - 1;
  uint64_t perturb = static_cast<uint64_t>(key);
  uint64_t i = static_cast<uint64_t>(key) & mask;
  while (true) {
    if (!(*table)[i].full) break;
    bool found = false;
    if (i + kLinearProbes <= mask) {
      for (int j = 0; j < kLinearProbes; ++j) {
        if (!(*table)[i + j + 1].full) {
          i = i + j + 1;
          found = true;
          break;
        }
      }
    }
    if (found) break;
    perturb >>= kPerturbShift;
    i = (i * 5 + 1 + perturb) & mask;
  }
  (*table)[i] = {true, key};
}

void IntSet::Resize(int64_t min_used) {
  int64_t size = kMinSize;
  while (size <= min_used) size <<= 1;
  std::vector<Slot> fresh(size);
  for (const Slot& s : table_) {
    if (s.full) InsertClean(&fresh, s.key);
  }
  table_ = std::move(fresh);
  fill_ = used_;
}

void IntSet::Add(int64_t key) {
  const uint64_t mask = table_.size() - 1;
  uint64_t perturb = static_cast<uint64_t>(key);
  uint64_t i = static_cast<uint64_t>(key) & mask;
  while (true) {
    const int probes = i + kLinearProbes <= mask ? kLinearProbes : 0;
    for (int p = 0; p <= probes; ++p) {
      Slot& s = table_[i + p];
      if (!s.full) {
        s = {true, key};
        ++fill_;
        ++used_;
        if (fill_ * 5 >= static_cast<int64_t>(mask) * 3) {
          Resize(used_ > 50000 ? used_ * 2 : used_ * 4);
        }
        return;
      }
      if (s.key == key) return;
    }
    perturb >>= kPerturbShift;
    i = (i * 5 + 1 + perturb) & mask;
  }
}

void IntSet::Merge(const IntSet& other) {
  if (&other == this || other.used_ == 0) return;
  const int64_t mask = static_cast<int64_t>(table_.size()) - 1;
  if ((fill_ + other.used_) * 5 >= mask * 3) Resize((used_ + other.used_) * 2);
  if (fill_ == 0 && table_.size() == other.table_.size() &&
      other.fill_ == other.used_) {
    table_ = other.table_;
    fill_ = other.fill_;
    used_ = other.used_;
    return;
  }
  if (fill_ == 0) {
    for (const Slot& s : other.table_) {
      if (s.full) InsertClean(&table_, s.key);
    }
    fill_ = used_ = other.used_;
    return;
  }
  for (const Slot& s : other.table_) {
    if (s.full) Add(s.key);
  }
}

std::vector<int64_t> IntSet::Keys() const {
  std::vector<int64_t> keys;
  keys.reserve(used_);
  for (const Slot& s : table_) {
    if (s.full) keys.push_back(s.key);
  }
  return keys;
}

}  // namespace mnemo::data::py
