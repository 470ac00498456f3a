// The mnemo.v1.Inference gRPC server (`mnemo serve`): a ServingModel driven
// by one serving loop, with grpc.health.v1, server reflection, TLS, mutual
// TLS or a bearer token as the other services, and Prometheus metrics.
//
// Every call becomes a job on the loop's queue (Serve runs it), run in
// arrival order: a
// query waits for the batches ingested before it and never sees one half
// applied. Dynamic batching: the queries waiting when the loop is free (up
// to --batch-pairs candidate pairs, and for up to --max-delay-us after the
// first of them arrived) are computed as one model batch and answered
// one by one; an ingested batch runs alone.
#ifndef MNEMO_TRAINER_SERVE_INFERENCE_SERVER_H_
#define MNEMO_TRAINER_SERVE_INFERENCE_SERVER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "services/metrics.h"
#include "services/security.h"
#include "trainer/serve/backend.h"
#include "trainer/serve/ingest_journal.h"

namespace mnemo::serve {

struct InferenceServerOptions {
  std::string listen = "127.0.0.1:50061";  // port 0: a free one
  services::ServerSecurity security;
  // Dynamic batching: off, each query is a model batch of its own.
  bool batching = true;
  // Most candidate pairs a model batch of queries holds (a query with more
  // runs alone, in pieces of this size).
  int64_t batch_pairs = 4096;
  // How long the loop waits for more queries after the first one it took
  // (0: it batches what is already waiting).
  int64_t max_delay_us = 0;
  int64_t max_message_bytes = 64 << 20;
  // Ingested batches are made durable here before their ack, and applied
  // again at start (--journal; not owned, null: off).
  IngestJournal* journal = nullptr;
  // The journal's batches to apply again before serving (IngestJournal::
  // Open's), and where to say how that went.
  std::vector<std::string> recovered;
  std::function<void(const std::string&)> log;
};

class InferenceServer {
 public:
  // Applies options.recovered (DATA_LOSS naming the batch where one no
  // longer applies), then starts serving `model` (owned; ServingModel).
  // `metrics` (may be null) outlives the server.
  static absl::StatusOr<std::unique_ptr<InferenceServer>> Start(
      std::unique_ptr<ServingBackend> model, InferenceServerOptions options,
      services::MetricsRegistry* metrics);
  ~InferenceServer();

  int port() const;
  // The memory's version, before Serve (the loop owns the model after).
  Version version() const;
  // Runs the serving loop on the calling thread until Shutdown (called
  // from another thread). Call it from the thread that loaded the model:
  // LibTorch's CPU kernels ran at half speed on a thread started later
  // (bench/results/serve_wikipedia.md).
  void Serve();
  // Stops taking calls; the call the loop runs ends, queued ones end
  // UNAVAILABLE. Serve returns.
  void Shutdown();

  struct Impl;

 private:
  explicit InferenceServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mnemo::serve

#endif  // MNEMO_TRAINER_SERVE_INFERENCE_SERVER_H_
