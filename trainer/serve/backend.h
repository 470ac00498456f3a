// What the Inference server (inference_server.h) asks of the model it
// serves: torch-free, so that the gRPC side builds without LibTorch's
// headers (whose bundled protobuf headers clash with the system's). The
// implementation is ServingModel (serving_model.h). Called from one thread.
#ifndef MNEMO_TRAINER_SERVE_BACKEND_H_
#define MNEMO_TRAINER_SERVE_BACKEND_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "services/serving_ids.h"

namespace mnemo::serve {

// What a batch of queries or events read or left.
struct Version {
  int64_t events_applied = 0;  // ingested since start (the replay included)
  int64_t batches_applied = 0;
  double time = 0;  // the memory's time, on the data's clock
  // The checkpoint epoch whose parameters answer, how often they were
  // reloaded, and when that checkpoint was written (Unix seconds).
  int model_epoch = 0;
  int64_t model_reloads = 0;
  double model_written = 0;
  // Following a training job's memory (--follow): its epoch and how many of
  // its log's events its newest stored state has applied.
  int job_epoch = 0;
  int64_t job_events = 0;
};

struct Scored {
  std::vector<float> logits;  // per pair
  Version version;
};

struct Embedded {
  int64_t dim = 0;
  std::vector<float> values;  // nodes x dim, row-major
  Version version;
};

struct Ingested {
  std::vector<float> pos, neg;    // logits per event, before the update
  std::vector<int32_t> negative;  // dense ids
  Version version;
  // DecodedBatch::online_figures: over the last --online-window events
  // (NaN: not asked for, none, or off).
  double online_ap = 0, online_mrr = 0;
};

class ServingBackend {
 public:
  virtual ~ServingBackend() = default;
  // The logits of (src[i], dst[i]) at t[i] (on the log's clock, none before
  // now()), all in one model batch. Changes nothing.
  virtual absl::StatusOr<Scored> Score(const std::vector<int32_t>& src,
                                       const std::vector<int32_t>& dst,
                                       const std::vector<double>& t) = 0;
  // The embeddings of `nodes` at `t` (the log's clock, not before now()),
  // in one model batch. Changes nothing.
  virtual absl::StatusOr<Embedded> Embed(const std::vector<int32_t>& nodes,
                                         double t) = 0;
  // Scores the batch's events against their negatives (drawing those not
  // given), then applies it. On an error nothing is applied.
  virtual absl::StatusOr<Ingested> Ingest(
      const services::DecodedBatch& batch) = 0;
  // Between batches, at least once a second: a newer checkpoint's
  // parameters (--reload), where a followed job stands (--follow). An
  // error leaves the model as it was.
  virtual absl::Status Refresh() { return absl::OkStatus(); }
  // The online AP and MRR over the last --online-window events ingested
  // (NaN: none, or off): a sort of the window's scores.
  virtual void OnlineFigures(double* ap, double* mrr) const = 0;
  virtual const services::ServingIds& ids() const = 0;
  virtual const services::RequestLimits& limits() const = 0;
  // The memory's time on the log's clock (the data's less its first
  // timestamp).
  virtual double now() const = 0;
  virtual Version version() const = 0;
  // Every destination of the run's data (TopK's default candidates).
  virtual const std::vector<int32_t>& destinations() const = 0;
};

}  // namespace mnemo::serve

#endif  // MNEMO_TRAINER_SERVE_BACKEND_H_
