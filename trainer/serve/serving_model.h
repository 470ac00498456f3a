// A trained model on live node memory (`mnemo serve`): the run's model at
// its best epoch, the memory that epoch's validation left, and the event
// log and neighbour index, which grow as events are ingested. Queries score
// candidate links without changing anything; ingestion scores a batch of
// events, then applies it, exactly as an evaluation pass applies one (the
// same batch builder, model and memory calls: trainer/runtime/eval/
// evaluator.h), so that ingesting the test period reproduces the run's
// test figures.
//
// Not thread-safe: one thread drives it (InferenceServer's serving loop).
#ifndef MNEMO_TRAINER_SERVE_SERVING_MODEL_H_
#define MNEMO_TRAINER_SERVE_SERVING_MODEL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "services/serving_ids.h"
#include "trainer/batch/builder.h"
#include "trainer/data/negative_sampler.h"
#include "trainer/data/neighbor_sampler.h"
#include "trainer/memory/worker_memory.h"
#include "trainer/model/model.h"
#include "trainer/runtime/eval/metrics.h"
#include "trainer/runtime/task.h"
#include "trainer/runtime/train.h"
#include "trainer/serve/backend.h"

namespace mnemo::serve {

struct ServingOptions {
  // The run's options (OptionsOfRun: its data, model and evaluation flags).
  runtime::TrainOptions train;
  // The checkpoint file to load (a single process's, or rank 0's of a
  // cluster set): its best epoch's parameters and memory.
  std::string checkpoint;
  // Nodes ingestion may add after the run's (their memory rows are made at
  // start).
  int64_t max_new_nodes = 10000;
  // The run built its model with intra-batch refinement (DepBloom's IMR,
  // --refine-chunks > 1): its parameters include the refiner's.
  bool refine = false;
  services::RequestLimits limits;  // edge_feature_dim and time_offset: set
  // Whether to apply the data's test period at start (predict, then update,
  // as the run's test pass): the memory then stands at the data's last
  // event. Off: at the end of validation, where the run's test began.
  bool replay_test = true;
  // The online AP and MRR (acks that ask, metrics) are over the last this
  // many events ingested (0: not kept).
  int64_t online_window = 10000;
  // Where the node memory lives (`--memstore`): the memory-store shards
  // (not owned; their states as wide as the run's records). Every batch
  // pulls the states it reads from them, and an ingested batch pushes the
  // states it changed before it is acknowledged. Null: serve holds the
  // memory itself.
  memstore::NodeStateStore* store = nullptr;
  // With `store`: read the memory a training job writes into it instead
  // (--follow). Nothing is written there, Ingest is refused, and the
  // parameters are the checkpoint's latest (those the job's memory is
  // computed with), not its best epoch's.
  bool follow = false;
  // With `follow`: look for a newer checkpoint of the run in `run_dir`
  // this often (seconds; 0: never) and take its parameters (--reload).
  std::string run_dir;
  double reload_seconds = 0;
  std::function<void(const std::string&)> log;
};

class ServingModel : public ServingBackend {
 public:
  static absl::StatusOr<std::unique_ptr<ServingModel>> Load(
      ServingOptions options);

  // The logits of (src[i], dst[i]) at t[i] (on the log's clock, none before
  // now()), all in one model batch. Changes nothing.
  absl::StatusOr<Scored> Score(const std::vector<int32_t>& src,
                               const std::vector<int32_t>& dst,
                               const std::vector<double>& t) override;
  // Scores the batch's events against their negatives (drawing those not
  // given), then applies it to memory, mailboxes and the neighbour index.
  // On an error nothing is applied.
  absl::StatusOr<Embedded> Embed(const std::vector<int32_t>& nodes,
                                 double t) override;
  absl::StatusOr<Ingested> Ingest(const services::DecodedBatch& batch) override;
  absl::Status Refresh() override;

  void OnlineFigures(double* ap, double* mrr) const override;
  const services::ServingIds& ids() const override { return ids_; }
  const services::RequestLimits& limits() const override { return o_.limits; }
  double now() const override { return now_; }
  Version version() const override;
  const std::vector<int32_t>& destinations() const override {
    return destinations_;
  }
  const runtime::Task& task() const { return *task_; }
  int64_t test_begin() const { return test_begin_; }
  // The replay's figures (replay_test; NaN otherwise).
  double replay_ap() const { return replay_ap_; }
  double replay_auc() const { return replay_auc_; }

 private:
  explicit ServingModel(ServingOptions options);
  absl::Status Init();
  // A checkpoint's parameters (its best epoch's, or with `follow` its
  // latest) and best epoch's memory, read into a model of their own.
  struct Checkpoint {
    std::vector<torch::Tensor> params;
    memory::NodeMemory best_state;
    int epoch = 0, best_epoch = 0;
    double best_score = 0;
    double written = 0;  // the file's modification time, Unix seconds
  };
  absl::StatusOr<Checkpoint> ReadCheckpoint(const std::string& file) const;
  // `params` into the served model.
  absl::Status SetParams(const std::vector<torch::Tensor>& params,
                         const std::string& file);
  // Where the followed job stands: its epoch, position and time, from the
  // newest state in its shards (at most once a second unless `force`).
  absl::Status FollowJob(bool force);
  // Runs one batch of the log's events [first, first + n) with `negatives`
  // through the builder and model; with `apply`, its update goes into
  // memory (and, with a store, to the store: on an error there the local
  // memory is put back and nothing is applied).
  // `sampler`: the neighbours' (sampler_ for ingestion, query_sampler_
  // for queries).
  absl::StatusOr<model::ModelOutput> Run(int64_t first, int64_t n,
                                         const int32_t* negatives, bool apply,
                                         data::NeighborSampler* sampler);
  // The batch of the log's events [first, first + n) with `negatives`,
  // built from the memory (Run's first part). With a store, the states the
  // batch reads come from it first; `read` (optional) gets those nodes and
  // `before` what the store gave for them.
  absl::Status Build(int64_t first, int64_t n, const int32_t* negatives,
                     data::NeighborSampler* sampler,
                     batch::BatchTensors* tensors,
                     batch::PositiveUpdate* update,
                     std::vector<int64_t>* read = nullptr,
                     memstore::PulledStates* before = nullptr);
  // Pushes the states an applied batch changed (`update`'s) to the store;
  // on an error puts back the states of `read` as the store gave them
  // (`before`) and has the store written again before it is read.
  absl::Status PushBatch(const batch::PositiveUpdate& update,
                         const std::vector<int64_t>& read,
                         memstore::PulledStates before);
  // The memory lives in the store (connected once the start's replay, which
  // runs locally, is over).
  bool stored() const { return memory_.exchange() != nullptr; }
  // The store's versions of serve's states (a generation of them: see
  // serving_model.cc).
  memory::StateVersions StoreVersions() const;
  // Checks the store against the model and starts a generation above what
  // it holds (Resync).
  absl::Status ConnectStore();
  // Writes every state this memory has (and those of `resync_nodes_`, which
  // a failed push may have left changed in the store) to the store under a
  // new generation, so the store holds this memory and nothing a failed
  // batch left there.
  absl::Status Resync();
  // Scores the log's events [first, first + n), which the log and the
  // neighbour index already hold, against `negative` (-1: drawn), then
  // applies them. On an error nothing is applied and the samplers' draws
  // are as they were.
  absl::StatusOr<Ingested> Apply(int64_t first, std::vector<int32_t> negative,
                                 bool figures);
  // The embeddings [n, d] of nodes[i] at times[i] (the log's clock), in
  // one model batch, as queries' targets: changes nothing.
  absl::StatusOr<torch::Tensor> EmbedAt(const std::vector<int32_t>& nodes,
                                        const std::vector<double>& times);
  // A query's neighbour sampler, drawing the same for the same batch
  // whatever came before (with the recent strategy nothing is drawn).
  data::NeighborSampler* QuerySampler();
  // Appends events to the log (the graph not yet).
  void AppendEvents(const std::vector<int32_t>& src,
                    const std::vector<int32_t>& dst,
                    const std::vector<double>& t,
                    const std::vector<float>* features);
  // Cuts the log back to `events` events.
  void TruncateLog(int64_t events);
  // The run's test period, predict then update.
  absl::Status ReplayTest();

  ServingOptions o_;
  model::ModelOptions mo_;
  std::unique_ptr<runtime::Task> task_;
  data::EventLog log_;  // the run's events up to now, then ingested ones
  std::unique_ptr<data::TemporalGraph> graph_;
  std::optional<data::NeighborSampler> sampler_, query_sampler_;
  std::unique_ptr<data::NegativeSampler> negatives_;
  model::Model model_;
  std::unique_ptr<batch::BatchBuilder> builder_;
  memory::WorkerMemory memory_;
  services::ServingIds ids_;
  std::vector<int32_t> destinations_;
  const batch::TimeGapStats* time_gaps_ = nullptr;
  bool bf16_ = false;
  int64_t test_begin_ = 0;
  double now_ = 0;
  int64_t events_applied_ = 0, batches_applied_ = 0;
  // The online window's scores (a ring of online_window events).
  std::vector<float> window_pos_, window_neg_;
  int64_t window_next_ = 0, window_size_ = 0;
  void AddToWindow(const std::vector<float>& pos,
                   const std::vector<float>& neg);

  double replay_ap_ = 0, replay_auc_ = 0;

  // The store (o_.store): the generation of the versions serve pushes, and
  // whether a failed push left it to be written again (Resync) before it
  // is read.
  memory::StoreTraffic store_traffic_;
  memory::WorkingSetStats store_working_set_;
  uint64_t generation_ = 0;
  bool resync_ = false;
  bool new_generation_ = true;  // the next Resync begins a generation
  std::vector<int64_t> resync_nodes_;

  // The parameters' checkpoint, and --reload's and --follow's clocks.
  int model_epoch_ = 0;
  int64_t model_reloads_ = 0;
  double model_written_ = 0;
  double next_reload_ = 0;
  // A checkpoint that did not load (file, time and size: said once, not
  // read again until it changes).
  std::string failed_reload_;
  int job_epoch_ = 0;
  int64_t job_events_ = 0;
  double next_follow_ = 0;
};

}  // namespace mnemo::serve

#endif  // MNEMO_TRAINER_SERVE_SERVING_MODEL_H_
