// A fixed table of paths (and an address range each) that a signal handler
// may read: entries are claimed and released with atomics and never
// allocated, so a handler can walk them (async-signal-safe). The SIGBUS
// handler of mapped event files (which file a fault came from) and the
// termination handler of durable writes (which temporary files to remove)
// keep their entries here.
#ifndef MNEMO_UTIL_SIGNAL_SAFE_TABLE_H_
#define MNEMO_UTIL_SIGNAL_SAFE_TABLE_H_

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>

namespace mnemo {

template <int kEntries>
class SignalSafeTable {
 public:
  struct Entry {
    std::atomic<int> state{0};  // 0 free, 1 being filled, 2 in use
    uintptr_t begin = 0, end = 0;
    char path[4096];
  };

  // Claims an entry for `path` and [begin, end); -1 when every entry is in
  // use or the path does not fit (a handler then does without it).
  int Claim(const std::string& path, uintptr_t begin = 0, uintptr_t end = 0) {
    if (path.size() >= sizeof(Entry::path)) return -1;
    for (int i = 0; i < kEntries; ++i) {
      Entry& e = entries_[i];
      int expected = 0;
      if (!e.state.compare_exchange_strong(expected, 1)) continue;
      e.begin = begin;
      e.end = end;
      std::memcpy(e.path, path.c_str(), path.size() + 1);
      e.state.store(2, std::memory_order_release);
      return i;
    }
    return -1;
  }

  void Release(int slot) {
    if (slot >= 0) entries_[slot].state.store(0, std::memory_order_release);
  }

  // Calls f(entry) for each entry in use; async-signal-safe where f is.
  template <typename F>
  void ForEach(F&& f) const {
    for (const Entry& e : entries_) {
      if (e.state.load(std::memory_order_acquire) == 2) f(e);
    }
  }

 private:
  Entry entries_[kEntries];
};

}  // namespace mnemo

#endif  // MNEMO_UTIL_SIGNAL_SAFE_TABLE_H_
