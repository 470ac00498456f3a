// Gradient all-reduce and other collectives over c10d: gloo for CPU tensors,
// NCCL for CUDA tensors. Rendezvous through the coordinator's key-value
// store (coordinator/rendezvous_kv.h), or a c10d TCPStore. A cluster worker
// forms two groups: the gradients' (NCCL on a GPU) and a gloo one for the
// control collectives (control.h), which carry host values NCCL cannot.
#ifndef MNEMO_TRAINER_RUNTIME_CLUSTER_COLLECTIVES_H_
#define MNEMO_TRAINER_RUNTIME_CLUSTER_COLLECTIVES_H_

#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/rendezvous_kv.h"

namespace mnemo::runtime {

struct CollectiveOptions {
  // The rendezvous store (not owned); null: the c10d TCPStore at
  // master_addr:master_port.
  coordinator::RendezvousKv* rendezvous = nullptr;
  std::string master_addr = "127.0.0.1";  // host of the c10d TCPStore
  int master_port = 29500;
  int rank = 0;
  int world_size = 1;
  // Address this worker's gloo transport binds to (peers connect to it).
  std::string bind_host = "127.0.0.1";
  // Every collective and the rendezvous fail after this long (a dead peer
  // never hangs the job).
  std::chrono::milliseconds timeout{60000};
  // Key prefix in the store, so several groups can share one store.
  std::string prefix = "mnemo";
  // kNccl: the tensors are on this rank's current CUDA device.
  enum class Backend { kGloo, kNccl };
  Backend backend = Backend::kGloo;
};

// A process group of `world_size` workers. Collectives must be called by all
// ranks in the same order. Not thread-safe.
class Collectives {
 public:
  // Connects to the store (retrying until `timeout`) and forms the group.
  // UNAVAILABLE / DEADLINE_EXCEEDED when peers or the store do not come.
  static absl::StatusOr<std::unique_ptr<Collectives>> Connect(
      const CollectiveOptions& options);
  ~Collectives();

  // Sum over ranks, in place.
  absl::Status AllReduceSum(torch::Tensor& tensor);
  // Starts a sum over ranks of `tensor` in place and returns at once (gloo
  // runs it on its own thread; NCCL on its stream). `tensor` must not be
  // read or written until WaitStarted() returns. Every rank starts the
  // same sums in the same order.
  absl::Status StartAllReduceSum(const torch::Tensor& tensor);
  // Waits for every started sum, in the order they were started (on a GPU:
  // the current stream waits; the host does not).
  absl::Status WaitStarted();
  // Copies `root`'s tensors to every rank, in place (one broadcast for all
  // of them where they share a type and device).
  absl::Status Broadcast(const std::vector<torch::Tensor>& tensors, int root);
  absl::Status Barrier();

  // Point to point (a gloo group: host tensors). StartSend sends `tensor`
  // (contiguous) to rank `dst` under `tag` and returns at once; the tensor
  // must stay unchanged until WaitSends() returns, which waits for every
  // send started so far. Recv fills `tensor` (the size of the matching
  // send) from rank `src` under `tag`, blocking until it has arrived or the
  // group's timeout passes (UNAVAILABLE: a peer is gone). Sends from one
  // rank to another under one tag arrive in the order they were started.
  absl::Status StartSend(const torch::Tensor& tensor, int dst, int tag);
  absl::Status WaitSends();
  // Waits for the `n` sends started first of those not yet waited for.
  absl::Status WaitOldestSends(int n);
  absl::Status Recv(torch::Tensor& tensor, int src, int tag);
  // Recv that returns at once: `tensor` is filled, and must not be touched,
  // until WaitOldestRecv() has returned for it (receives started this way
  // are waited for in the order they were started).
  absl::Status StartRecv(const torch::Tensor& tensor, int src, int tag);
  absl::Status WaitOldestRecv();
  // Bytes this rank sent point to point.
  int64_t bytes_sent() const { return bytes_sent_; }

  int rank() const { return rank_; }
  // "gloo" or "nccl".
  const char* backend_name() const;
  int world_size() const { return world_size_; }
  // Bytes this rank sent into collectives (payload, not protocol).
  int64_t bytes_reduced() const { return bytes_reduced_; }
  // Whether the sums run on the host (gloo), so that waiting for them
  // blocks this thread; NCCL's make only the device wait.
  bool reduces_on_host() const;

 private:
  struct Impl;
  Collectives() = default;
  // Nothing to exchange (one gloo rank).
  bool Trivial() const;
  std::unique_ptr<Impl> impl_;
  int rank_ = 0, world_size_ = 1;
  int64_t bytes_reduced_ = 0;
  int64_t bytes_sent_ = 0;
};

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_CLUSTER_COLLECTIVES_H_
