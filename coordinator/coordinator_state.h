// The coordinator's state machines: membership, barriers, per-batch reports
// and sync/skip decisions. No gRPC, no torch: services/ wraps this in the
// Coordinator gRPC service; tests drive it directly with a fake clock.
//
// The coordinator never carries node states or tensors (like ps-lite's
// scheduler). Thread-safe: every public method may be called concurrently.
// Callbacks are invoked without the internal lock held, possibly on the
// calling thread of whichever call completed the event; see Subscribe() and
// Unsubscribe() for the lifetime contract of subscriptions.
#ifndef MNEMO_COORDINATOR_COORDINATOR_STATE_H_
#define MNEMO_COORDINATOR_COORDINATOR_STATE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace mnemo::coordinator {

// One worker's report after a training batch, or after the last batch of a
// synchronization window of K batches (DepTGL Algorithm 2: workers report at
// the end of each window, with no per-batch round trip). g_r, its EMA and the
// batch time feed the sync decision; the rest feeds metrics.
struct BatchReport {
  int rank = 0;
  int64_t batch = 0;         // global batch index within the run
  double grad_norm = 0;      // ||g_r|| after the all-reduce
  double batch_seconds = 0;  // wall time of the batch on this worker
  // Over the batches this report covers:
  int64_t events = 0;       // events processed (targets + auxiliaries)
  int64_t targets = 0;      // target events (their loss counts)
  int64_t auxiliaries = 0;  // replayed dependency events
  // Index of the reported batch within its epoch, and whether it is the
  // epoch's last (the next boundary then starts an epoch: r = 0).
  int64_t epoch_batch = 0;
  bool last_of_epoch = false;
  // The worker's EMA of the all-reduced gradient norm over every batch so
  // far, reported or not (DepTGL Eq. 6); 0 when the worker computes none
  // (the coordinator then uses its own EMA over the reported norms).
  double grad_norm_ema = 0;
  // The worker's own compute time of the reported batch, waits excluded.
  double compute_seconds = 0;
  // Batches this report covers (>= 1): `batch` and the batches - 1 before
  // it. A window report covers K. Every rank reports the same windows.
  int64_t batches = 1;
  // Of those, the batches run in heavy-load mode (DepTGL Eq. 9), and the
  // auxiliary replay events pruned in them (Eq. 10-11).
  int64_t heavy_load_batches = 0;
  int64_t pruned = 0;
};

// Inputs a policy sees when deciding boundary `boundary`.
struct PolicyView {
  int64_t boundary = 0;  // the global batch index the boundary precedes
  int world_size = 0;
  double grad_norm = 0;  // mean over ranks of the last batch's ||g||
  // The gradient-norm EMA: the mean over ranks of the workers' reported
  // EMAs (DepTGL Eq. 6, over every batch) when they report one, else the
  // coordinator's own EMA over the reported norms.
  double grad_norm_ema = 0;
  // Batches since the last boundary that synced (counting the batches the
  // reports covered).
  int64_t batches_since_sync = 0;
  // Epoch-relative index r of the boundary's batch: 0 when the reported
  // batch was its epoch's last, else the reported epoch_batch + 1.
  int64_t epoch_batch = 0;
};

// Decides, at each candidate sync boundary, whether every worker refreshes
// its cache (sync) or skips. Called under the coordinator's lock: keep it
// cheap and never block.
class DecisionPolicy {
 public:
  virtual ~DecisionPolicy() = default;
  virtual std::string name() const = 0;
  virtual bool Decide(const PolicyView& view) = 0;
};

// The papers' Vanilla DDP: always sync.
std::unique_ptr<DecisionPolicy> MakeAlwaysSyncPolicy();
// Never sync (the full-cache reference: workers replay instead).
std::unique_ptr<DecisionPolicy> MakeNeverSyncPolicy();
// DepTGL's gradient-aware sync (Eq. 7), name "gradient-ema": skips the
// boundary (false) iff r > 0, the EMA is positive and the last gradient norm
// is below tau_g times its EMA; syncs otherwise. With tau_g = 1.6 (the
// paper's reference configuration) it skips unless the gradient norm spikes
// 60% above its EMA, and it always syncs at r = 0 (the first boundary of an
// epoch: node memory restarts every epoch). tau_g <= 0 never skips.
std::unique_ptr<DecisionPolicy> MakeGradientEmaPolicy(double tau_g);

// The most workers one job may have: far beyond a real job (the
// coordinator keeps a few hundred bytes and, with metrics, two histograms
// per worker), far below what would exhaust its memory.
inline constexpr int kMaxWorldSize = 65536;

struct CoordinatorOptions {
  int world_size = 1;  // in [1, kMaxWorldSize]
  // Hash of the run configuration; a worker with another one is refused.
  // Empty: the first worker to join fixes it.
  std::string config_hash;
  // A worker silent for longer than this is declared dead (job fails).
  double heartbeat_timeout_s = 10;
  // Smoothing of the gradient-norm EMA (weight of the newest value).
  double ema_alpha = 0.1;
  // (Last: callers initialize the fields above in order.) Once a worker has
  // joined, the rest must join within this many seconds or the job fails naming
  // them (a worker hung or dead before it joined is not left for the others'
  // rendezvous timeout to find, blaming them). 0: no limit.
  double join_timeout_s = 0;
};

struct WorkerInfo {
  int rank = 0;
  std::string address;  // where the worker can be reached (informational)
  std::string host;
  double last_seen = 0;
  bool joined = false;
  bool finished = false;
};

struct Decision {
  int64_t boundary = 0;
  bool sync = true;
};

// Per-rank report aggregates, for metrics.
struct RankStats {
  int64_t reports = 0;           // reports counted (duplicates are not)
  int64_t batches = 0;           // batches they covered
  double batch_seconds_ema = 0;  // EMA over reports (ema_alpha)
  double last_batch_seconds = 0;
  double last_compute_seconds = 0;
  double grad_norm = 0;
  int64_t heavy_load_batches = 0;
  int64_t pruned = 0;
};

class CoordinatorState {
 public:
  using Clock = std::function<double()>;  // seconds, monotonic

  CoordinatorState(CoordinatorOptions options,
                   std::unique_ptr<DecisionPolicy> policy, Clock clock);

  // A worker joins. Errors: INVALID_ARGUMENT (rank out of range, empty
  // configuration hash), ALREADY_EXISTS (the rank is already joined and
  // alive; checked before the hash, so a second join for a live rank never
  // fails the job), FAILED_PRECONDITION (configuration hash differs: the
  // message names both hashes), ABORTED (the job has failed). Only OK
  // changes the state.
  absl::Status Join(int rank, const std::string& address,
                    const std::string& host, const std::string& config_hash);
  absl::Status Heartbeat(int rank);
  // A worker finished cleanly (it will send no more heartbeats).
  absl::Status Finish(int rank);
  // A worker reports a fatal error: the job fails everywhere.
  void ReportError(int rank, const std::string& message);
  // Fails the job with `status` (not OK) for a reason that is no worker's,
  // e.g. the coordinator shutting down. The first failure wins.
  void Abort(absl::Status status);
  // The connection to a worker broke (its process died or its network went)
  // before it finished: the job fails, naming it. Ignored for workers that
  // finished or never joined.
  void WorkerLost(int rank, const std::string& reason);

  // What one Report() call did (for metrics: each decision is taken by
  // exactly one call).
  struct ReportOutcome {
    // The report was a duplicate (its rank already reported that batch, or
    // the batch was already decided) and was ignored.
    bool duplicate = false;
    // This report completed its batch: the decision it took, and what
    // the policy saw.
    bool decided = false;
    Decision decision;
    PolicyView view;
  };

  // Records a batch report. When every rank has reported batch b, the
  // decision for boundary b + 1 is taken and delivered to subscribers; the
  // batches the reports covered (b - batches + 1 .. b, the fewest any rank
  // claimed) count as decided too, so window reports (one per K batches)
  // release exactly the boundary after each window. Boundaries whose
  // previous batch nobody reports are never decided.
  // Idempotent per (rank, batch): a repeated report (a retried RPC) is
  // ignored and does not count towards the decision, also once the batch
  // has been decided or covered by a decided window (then it is late and
  // changes nothing); it still counts as a sign of life of its rank.
  // Errors: INVALID_ARGUMENT (rank out of range, negative batch or
  // epoch_batch, batches < 1 or reaching below batch 0, heavy_load_batches
  // outside [0, batches], negative pruned), the job's failure once it has
  // failed.
  // `outcome`, when not null, receives what the call did.
  absl::Status Report(const BatchReport& report,
                      ReportOutcome* outcome = nullptr);

  // Calls `done` once all world_size ranks arrived at barrier `name` (OK),
  // or the job failed (the failure). A rank arriving twice at the same
  // barrier generation gets FAILED_PRECONDITION.
  void ArriveAtBarrier(const std::string& name, int rank,
                       std::function<void(absl::Status)> done);

  // Delivers every decision (those already taken first, on the calling
  // thread before Subscribe returns), then the job's failure if it fails
  // (`on_end`, at most once; no decision follows it). Returns a
  // subscription id.
  //
  // Callbacks run without the internal lock, on the thread of whichever
  // call took the decision or failed the job. Calls for one subscription
  // may run concurrently on several threads and in any boundary order:
  // they must be thread-safe, cheap and non-blocking. A callback must not
  // call Unsubscribe() for its own subscription (Unsubscribe would wait for
  // the very call that makes it; it is detected and does not deadlock, but
  // the caller then still runs inside the callback it is ending).
  int Subscribe(std::function<void(const Decision&)> on_decision,
                std::function<void(absl::Status)> on_end);
  // Ends subscription `id`. When it returns, no callback of the
  // subscription is running (on any other thread) and none will start, so
  // the subscriber may destroy whatever its callbacks use. Blocks while a
  // delivery to it is in flight. An unknown or already ended id (e.g. after
  // the job failed and `on_end` ran) is fine: it only waits for deliveries
  // still in flight.
  void Unsubscribe(int id);

  // The decision for boundary 0 (before any report) is taken at
  // construction: sync. Declares workers dead whose heartbeats are older
  // than the timeout; returns the job status after the check.
  absl::Status CheckLiveness();

  absl::Status job_status() const;
  bool all_finished() const;
  int joined_count() const;
  // When the first worker joined (the clock's time; -1: none yet).
  double first_join_time() const;
  int world_size() const { return options_.world_size; }
  std::vector<WorkerInfo> workers() const;
  std::vector<RankStats> rank_stats() const;
  int64_t decisions_sync() const;
  int64_t decisions_skip() const;
  double grad_norm_ema() const;
  std::string policy_name() const { return policy_->name(); }
  std::string config_hash() const;

 private:
  // A callback to run once mu_ is released. `subscriber` >= 0: a delivery
  // to that subscription, counted in in_flight_ until it has run.
  struct Delivery {
    int subscriber = -1;
    std::function<void()> call;
  };
  // Queues a call to subscription `id`'s callback and counts it in flight.
  void AddDeliveryLocked(int id, std::function<void()> call,
                         std::vector<Delivery>* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs the calls in order, then marks each subscriber delivery done.
  void Deliver(std::vector<Delivery> deliveries) ABSL_LOCKS_EXCLUDED(mu_);
  // Fails the job (first failure wins); the waiters' callbacks are appended
  // to `calls`, to be run (Deliver) once the lock is released.
  void FailLocked(absl::Status status, std::vector<Delivery>* calls)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Marks batches first..last decided (decided_below_ / decided_above_).
  void MarkDecidedLocked(int64_t first, int64_t last)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool IsDecidedLocked(int64_t batch) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const CoordinatorOptions options_;
  const Clock clock_;

  // The pointer is constant after construction; Decide() runs under mu_.
  const std::unique_ptr<DecisionPolicy> policy_;

  mutable absl::Mutex mu_;
  absl::Status job_status_ ABSL_GUARDED_BY(mu_);
  double first_join_time_ ABSL_GUARDED_BY(mu_) = -1;  // -1: none yet
  std::string config_hash_ ABSL_GUARDED_BY(mu_);
  std::vector<WorkerInfo> workers_ ABSL_GUARDED_BY(mu_);
  std::vector<RankStats> stats_ ABSL_GUARDED_BY(mu_);

  struct BarrierState {
    int64_t generation = 0;
    std::vector<bool> arrived;
    std::vector<std::function<void(absl::Status)>> waiters;
  };
  std::map<std::string, BarrierState> barriers_ ABSL_GUARDED_BY(mu_);

  // Batches some but not all ranks have reported.
  struct BatchAgg {
    std::vector<bool> reported_by;  // per rank
    int reported = 0;
    double grad_norm_sum = 0;
    double grad_norm_ema_sum = 0;  // over the ranks that reported an EMA
    int grad_norm_ema_count = 0;
    int64_t min_batches = 0;     // fewest batches a rank's report covered
    int64_t epoch_batch = 0;     // largest reported
    bool last_of_epoch = false;  // any rank said so
  };
  std::map<int64_t, BatchAgg> pending_ ABSL_GUARDED_BY(mu_);
  // Decided batches: every batch below decided_below_, and the intervals
  // [first, last] in decided_above_ (disjoint, not adjacent, all above the
  // watermark; kept small: the watermark advances over them).
  int64_t decided_below_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<int64_t, int64_t> decided_above_ ABSL_GUARDED_BY(mu_);
  std::vector<Decision> decisions_ ABSL_GUARDED_BY(mu_);
  double grad_norm_ema_ ABSL_GUARDED_BY(mu_) = 0;
  bool ema_initialized_ ABSL_GUARDED_BY(mu_) = false;
  int64_t batches_since_sync_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t sync_count_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t skip_count_ ABSL_GUARDED_BY(mu_) = 0;

  struct Subscriber {
    std::function<void(const Decision&)> on_decision;
    std::function<void(absl::Status)> on_end;
  };
  std::map<int, Subscriber> subscribers_ ABSL_GUARDED_BY(mu_);
  int next_subscriber_ ABSL_GUARDED_BY(mu_) = 0;
  // Deliveries taken under mu_ and not yet finished, per subscription id
  // (no entry: none). Unsubscribe waits on in_flight_done_ until its id has
  // none.
  std::map<int, int> in_flight_ ABSL_GUARDED_BY(mu_);
  absl::CondVar in_flight_done_;
};

}  // namespace mnemo::coordinator

#endif  // MNEMO_COORDINATOR_COORDINATOR_STATE_H_
