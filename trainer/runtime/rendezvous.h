// Hosting the c10d TCPStore that the collective backend rendezvouses
// through (the coordinator does this at MASTER_ADDR:MASTER_PORT). Torch-free
// header.
#ifndef MNEMO_TRAINER_RUNTIME_RENDEZVOUS_H_
#define MNEMO_TRAINER_RUNTIME_RENDEZVOUS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace mnemo::runtime {

class RendezvousStore {
 public:
  // Listens on `host`:`port` (port 0: any free port). UNAVAILABLE when the
  // port cannot be bound.
  static absl::StatusOr<std::unique_ptr<RendezvousStore>> Host(
      const std::string& host, int port, int world_size);
  ~RendezvousStore();
  int port() const;

 private:
  struct Impl;
  RendezvousStore() = default;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_RENDEZVOUS_H_
