// Child process of node_state_store_test's crash tests. It pushes a
// deterministic stream of batches into a store and prints one line per
// acknowledged push, until the test kills it with SIGKILL.
//
//   memstore_crash_helper write-through DIR
//       pushes batches 1, 2, ... printing "ack B" after each.
//   memstore_crash_helper write-back DIR CHECKPOINT_DIR
//       pushes batches 1..kCheckpointAfter, checkpoints, prints "checkpoint",
//       then pushes more printing "ack B".
#include <cstdio>
#include <cstdlib>
#include <string>

#include "memstore/node_state_store.h"
#include "tests/unit/memstore/crash_stream.h"

using namespace mnemo::memstore;

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  const std::string mode = argv[1];
  auto policy = ParseWritePolicy(mode);
  if (!policy.ok()) return 2;
  auto store = Open(crash_stream::Options(argv[2], *policy));
  if (!store.ok()) {
    std::fprintf(stderr, "open: %s\n", store.status().ToString().c_str());
    return 3;
  }
  for (int64_t b = 1;; ++b) {
    crash_stream::Batch batch = crash_stream::MakeBatch(b);
    absl::Status s = (*store)->Push(batch.ids, batch.states, batch.versions,
                                    batch.times, batch.writer);
    if (!s.ok()) {
      std::fprintf(stderr, "push: %s\n", s.ToString().c_str());
      return 4;
    }
    if (*policy == WritePolicy::kWriteBack) {
      if (b == crash_stream::kCheckpointAfter) {
        if (argc < 4) return 2;
        s = (*store)->Checkpoint(argv[3]);
        if (!s.ok()) {
          std::fprintf(stderr, "checkpoint: %s\n", s.ToString().c_str());
          return 5;
        }
        std::printf("checkpoint\n");
        std::fflush(stdout);
      }
      if (b <= crash_stream::kCheckpointAfter) continue;
    }
    std::printf("ack %lld\n", static_cast<long long>(b));
    std::fflush(stdout);
  }
}
