// Helpers shared by the libFuzzer targets in tests/fuzz (scripts/fuzz).
#ifndef MNEMO_TESTS_FUZZ_FUZZ_UTIL_H_
#define MNEMO_TESTS_FUZZ_FUZZ_UTIL_H_

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace mnemo::fuzz {

// Stops the fuzzer with a message: libFuzzer records the input as a crash.
[[noreturn]] inline void Fail(const std::string& what) {
  std::fprintf(stderr, "fuzz invariant violated: %s\n", what.c_str());
  std::abort();
}

// Replaces the content of `path` with `data`.
inline void WriteFileOrDie(const std::string& path, std::string_view data) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) Fail("cannot write " + path);
  const bool ok = std::fwrite(data.data(), 1, data.size(), f) == data.size();
  if (std::fclose(f) != 0 || !ok) Fail("cannot write " + path);
}

// A file in memory for APIs that read a path: a memfd, opened by path as
// /proc/self/fd/N (a disk file is ~20x slower per input).
class MemFile {
 public:
  explicit MemFile(const char* name) : fd_(::memfd_create(name, 0)) {
    if (fd_ < 0) Fail("memfd_create failed");
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;
  ~MemFile() { ::close(fd_); }

  // Replaces the content.
  void Write(std::string_view data) {
    if (::ftruncate(fd_, 0) != 0) Fail("ftruncate failed");
    size_t done = 0;
    while (done < data.size()) {
      const ssize_t n =
          ::pwrite(fd_, data.data() + done, data.size() - done, done);
      if (n <= 0) Fail("pwrite failed");
      done += static_cast<size_t>(n);
    }
  }
  const std::string& path() const { return path_; }

 private:
  int fd_;
  std::string path_;
};

// Seed corpora that cannot be cut from ../shared/data are written by the
// targets themselves: with MNEMO_FUZZ_WRITE_SEEDS=DIR set, the target's
// LLVMFuzzerInitialize calls `write(DIR)` and exits (scripts/fuzz does this
// before fuzzing).
template <typename WriteSeeds>
void MaybeWriteSeedsAndExit(WriteSeeds write) {
  const char* dir = std::getenv("MNEMO_FUZZ_WRITE_SEEDS");
  if (dir == nullptr || *dir == '\0') return;
  write(std::string(dir));
  std::exit(0);
}

// Writes seed number `index` as DIR/seed-INDEX.
inline void WriteSeed(const std::string& dir, int index,
                      std::string_view data) {
  WriteFileOrDie(dir + "/seed-" + std::to_string(index), data);
}

}  // namespace mnemo::fuzz

#endif  // MNEMO_TESTS_FUZZ_FUZZ_UTIL_H_
