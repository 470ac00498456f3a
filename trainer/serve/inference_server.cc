#include "trainer/serve/inference_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <numeric>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "mnemo/v1/inference.grpc.pb.h"
#include "services/grpc_util.h"
#include "services/inference_requests.h"
#include "util/proc.h"

namespace mnemo::serve {
namespace {

// One call's work on the serving loop.
struct Job {
  enum class Kind { kScore, kTopK, kEmbed, kIngest };
  Kind kind = Kind::kScore;
  const v1::ScoreRequest* score = nullptr;
  v1::ScoreResponse* score_out = nullptr;
  const v1::TopKRequest* topk = nullptr;
  v1::TopKResponse* topk_out = nullptr;
  const v1::EmbedRequest* embed = nullptr;
  v1::EmbedResponse* embed_out = nullptr;
  const v1::IngestRequest* ingest = nullptr;
  v1::IngestAck* ack = nullptr;
  double arrived = 0;  // MonotonicSeconds
  // The loop's.
  services::DecodedQuery query;
  std::vector<float> logits;  // per candidate
  absl::Status status;
  absl::Notification done;
};

void SetVersion(const Version& v, v1::MemoryVersion* out) {
  out->set_events_applied(v.events_applied);
  out->set_batches_applied(v.batches_applied);
  out->set_time(v.time);
  out->set_model_epoch(v.model_epoch);
  out->set_job_epoch(v.job_epoch);
  out->set_job_events(v.job_events);
}

float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

const char* MethodName(Job::Kind k) {
  switch (k) {
    case Job::Kind::kScore:
      return "Score";
    case Job::Kind::kTopK:
      return "TopK";
    case Job::Kind::kEmbed:
      return "Embed";
    case Job::Kind::kIngest:
      return "Ingest";
  }
  return "?";
}

// Powers of two from 1 to 65536: pairs in a model batch, events in an
// ingested one.
std::vector<double> SizeBuckets() {
  std::vector<double> b;
  for (double x = 1; x <= 65536; x *= 2) b.push_back(x);
  return b;
}

}  // namespace

struct InferenceServer::Impl {
  InferenceServerOptions options;
  std::unique_ptr<ServingBackend> model;
  services::MetricsRegistry* registry = nullptr;
  // The service outlives the server it is registered with (members go in
  // reverse order).
  std::unique_ptr<v1::Inference::Service> service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;

  absl::Mutex mu;
  std::deque<Job*> queue ABSL_GUARDED_BY(mu);
  bool stopping ABSL_GUARDED_BY(mu) = false;
  bool shut_down = false;

  // Metrics (null without a registry).
  prometheus::Histogram* batch_pairs = nullptr;
  prometheus::Histogram* ingest_events = nullptr;
  prometheus::Counter* ingested = nullptr;
  double figures_at = -1e300;  // when the online gauges were last set
  // The journal could not be written: ingestion stops (a batch applied but
  // not durable was not acknowledged).
  bool journal_failed = false;
  prometheus::Gauge *online_ap = nullptr, *online_mrr = nullptr,
                    *memory_time = nullptr, *new_nodes = nullptr,
                    *last_ingest = nullptr, *model_epoch = nullptr,
                    *model_written = nullptr, *model_reloads = nullptr,
                    *job_epoch = nullptr, *job_events = nullptr;
  double refreshed_at = -1e300;  // when the loop last called Refresh

  // The model's Refresh (a newer checkpoint, a followed job's position),
  // at most every 100 ms, and the gauges that follow it.
  void Refresh() {
    const double now = MonotonicSeconds();
    if (now - refreshed_at < 0.1) return;
    refreshed_at = now;
    // An error (a followed job's shard down) is the next request's to
    // report; the model stays as it was.
    model->Refresh().IgnoreError();
    if (registry == nullptr) return;
    const Version v = model->version();
    model_epoch->Set(v.model_epoch);
    model_written->Set(v.model_written);
    model_reloads->Set(static_cast<double>(v.model_reloads));
    job_epoch->Set(v.job_epoch);
    job_events->Set(static_cast<double>(v.job_events));
    memory_time->Set(v.time);
  }

  // Runs `job` on the loop and waits for it.
  absl::Status Submit(Job* job) {
    job->arrived = MonotonicSeconds();
    {
      absl::MutexLock lock(&mu);
      if (stopping) {
        return absl::UnavailableError("the server is shutting down");
      }
      queue.push_back(job);
    }
    job->done.WaitForNotification();
    if (registry != nullptr) {
      const char* method = MethodName(job->kind);
      registry
          ->Counter("mnemo_serve_requests_total",
                    "Inference calls answered (an Ingest stream: each batch)",
                    {{"method", method},
                     {"code", absl::StatusCodeToString(job->status.code())}})
          .Increment();
      registry
          ->Histogram("mnemo_serve_request_seconds",
                      "Time from a call's arrival to its answer",
                      {{"method", method}}, services::LatencyBucketsSeconds())
          .Observe(MonotonicSeconds() - job->arrived);
    }
    return job->status;
  }

  bool Ready() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return stopping || !queue.empty();
  }

  // A decoded query's candidates: its own, or (a TopK without any) every
  // destination of the data.
  const std::vector<int32_t>& Candidates(const Job& j) const {
    return j.query.dst.empty() ? model->destinations() : j.query.dst;
  }

  // Candidate pairs a query asks for (its share of a model batch).
  int64_t Pairs(const Job& j) const {
    if (j.kind == Job::Kind::kScore) return j.score->dst_size();
    if (j.kind == Job::Kind::kTopK) {
      return j.topk->candidates_size() > 0
                 ? j.topk->candidates_size()
                 : static_cast<int64_t>(model->destinations().size());
    }
    return 0;
  }

  // The jobs the loop runs next: an ingested batch alone, or the queries
  // waiting (dynamic batching). Empty once stopping.
  // Also empty after a second without any, so that the loop refreshes the
  // model (`*stop` then false).
  std::vector<Job*> Take(bool* stop) {
    std::vector<Job*> take;
    absl::MutexLock lock(&mu);
    const absl::Condition ready(this, &Impl::Ready);
    *stop = false;
    if (!mu.AwaitWithTimeout(ready, absl::Seconds(1))) return take;
    *stop = stopping;
    if (stopping) return take;
    Job* first = queue.front();
    queue.pop_front();
    take.push_back(first);
    if (first->kind == Job::Kind::kIngest || first->kind == Job::Kind::kEmbed ||
        !options.batching) {
      return take;
    }
    int64_t pairs = Pairs(*first);
    const absl::Time deadline =
        absl::Now() +
        absl::Microseconds(std::max<int64_t>(
            0, options.max_delay_us -
                   static_cast<int64_t>((MonotonicSeconds() - first->arrived) *
                                        1e6)));
    while (pairs < options.batch_pairs) {
      if (queue.empty()) {
        if (options.max_delay_us <= 0 ||
            !mu.AwaitWithDeadline(ready, deadline) || stopping) {
          break;
        }
        continue;
      }
      Job* next = queue.front();
      // An ingested batch waits for the queries before it, and the queries
      // after it wait for it; an Embed runs alone.
      if (next->kind == Job::Kind::kIngest || next->kind == Job::Kind::kEmbed) {
        break;
      }
      const int64_t p = Pairs(*next);
      if (pairs + p > options.batch_pairs) break;
      queue.pop_front();
      take.push_back(next);
      pairs += p;
    }
    return take;
  }

  void Loop() {
    while (true) {
      Refresh();
      bool stop = false;
      std::vector<Job*> jobs = Take(&stop);
      if (stop) break;
      if (jobs.empty()) continue;
      if (jobs[0]->kind == Job::Kind::kIngest) {
        RunIngest(jobs[0]);
      } else if (jobs[0]->kind == Job::Kind::kEmbed) {
        RunEmbed(jobs[0]);
      } else {
        RunQueries(jobs);
      }
      for (Job* j : jobs) j->done.Notify();
    }
    FailQueued();
  }

  // Shutting down: whatever is queued is answered UNAVAILABLE.
  void FailQueued() {
    absl::MutexLock lock(&mu);
    for (Job* j : queue) {
      j->status = absl::UnavailableError("the server is shutting down");
      j->done.Notify();
    }
    queue.clear();
  }

  void RunIngest(Job* job) {
    if (journal_failed) {
      job->status = absl::FailedPreconditionError(absl::StrCat(
          "ingestion stopped: the journal ", options.journal->path(),
          " could not be written; restart the server"));
      return;
    }
    auto decoded = services::DecodeIngest(*job->ingest, model->ids(),
                                          model->limits(), model->now());
    if (!decoded.ok()) {
      job->status = decoded.status();
      return;
    }
    auto r = model->Ingest(*decoded);
    if (!r.ok()) {
      job->status = r.status();
      return;
    }
    if (options.journal != nullptr) {
      // Durable before the ack: the batch as the client sent it (applied
      // again at a restart, it draws what it drew).
      absl::Status s =
          options.journal->Append(job->ingest->SerializeAsString());
      if (!s.ok()) {
        journal_failed = true;
        job->status = absl::UnavailableError(absl::StrCat(
            "the batch is applied but could not be made durable (", s.message(),
            "): it is not acknowledged, and a restart will not have it; "
            "ingestion stops until the server restarts"));
        return;
      }
    }
    v1::IngestAck* ack = job->ack;
    ack->set_events(decoded->size());
    for (size_t i = 0; i < r->pos.size(); ++i) {
      ack->add_positive_logit(r->pos[i]);
      ack->add_negative_logit(r->neg[i]);
      ack->add_negative(model->ids().original(r->negative[i]));
    }
    SetVersion(r->version, ack->mutable_version());
    ack->set_online_ap(r->online_ap);
    ack->set_online_mrr(r->online_mrr);
    if (registry != nullptr) {
      ingest_events->Observe(static_cast<double>(decoded->size()));
      ingested->Increment(static_cast<double>(decoded->size()));
      // The online figures sort the window: for the gauges, at most once a
      // second (or with an ack that has them anyway).
      const double now = MonotonicSeconds();
      double ap = r->online_ap, mrr = r->online_mrr;
      if (!decoded->online_figures && now - figures_at >= 1.0) {
        model->OnlineFigures(&ap, &mrr);
        figures_at = now;
      }
      if (!std::isnan(ap)) online_ap->Set(ap);
      if (!std::isnan(mrr)) online_mrr->Set(mrr);
      memory_time->Set(r->version.time);
      new_nodes->Set(static_cast<double>(model->ids().new_nodes()));
      last_ingest->SetToCurrentTime();
    }
  }

  void RunEmbed(Job* job) {
    auto q = services::DecodeEmbed(*job->embed, model->ids(), model->limits(),
                                   model->now());
    if (!q.ok()) {
      job->status = q.status();
      return;
    }
    auto e = model->Embed(q->dst, q->t);
    if (!e.ok()) {
      job->status = e.status();
      return;
    }
    job->embed_out->set_dim(static_cast<int32_t>(e->dim));
    job->embed_out->mutable_embedding()->Assign(e->values.begin(),
                                                e->values.end());
    SetVersion(e->version, job->embed_out->mutable_version());
  }

  void RunQueries(const std::vector<Job*>& jobs) {
    // Every valid query's pairs, in time order (a batch's events are).
    struct Pair {
      double t;
      int32_t src, dst;
      Job* job;
      int64_t index;
    };
    std::vector<Pair> pairs;
    for (Job* j : jobs) {
      auto q = j->kind == Job::Kind::kScore
                   ? services::DecodeScore(*j->score, model->ids(),
                                           model->limits(), model->now())
                   : services::DecodeTopK(*j->topk, model->ids(),
                                          model->limits(), model->now());
      if (!q.ok()) {
        j->status = q.status();
        continue;
      }
      j->query = *std::move(q);
      const std::vector<int32_t>& dst = Candidates(*j);
      j->logits.assign(dst.size(), 0.0f);
      for (size_t i = 0; i < dst.size(); ++i) {
        pairs.push_back(
            {j->query.t, j->query.src, dst[i], j, static_cast<int64_t>(i)});
      }
    }
    std::stable_sort(pairs.begin(), pairs.end(),
                     [](const Pair& a, const Pair& b) { return a.t < b.t; });
    Version version = model->version();
    const size_t piece =
        static_cast<size_t>(std::max<int64_t>(1, options.batch_pairs));
    for (size_t b = 0; b < pairs.size(); b += piece) {
      const size_t e = std::min(pairs.size(), b + piece);
      std::vector<int32_t> src, dst;
      std::vector<double> t;
      for (size_t i = b; i < e; ++i) {
        src.push_back(pairs[i].src);
        dst.push_back(pairs[i].dst);
        t.push_back(pairs[i].t);
      }
      auto scored = model->Score(src, dst, t);
      if (registry != nullptr) {
        batch_pairs->Observe(static_cast<double>(e - b));
      }
      for (size_t i = b; i < e; ++i) {
        Job* j = pairs[i].job;
        if (!scored.ok()) {
          j->status = scored.status();
        } else {
          j->logits[pairs[i].index] = scored->logits[i - b];
        }
      }
      if (scored.ok()) version = scored->version;
    }
    for (Job* j : jobs) {
      if (!j->status.ok()) continue;
      if (j->kind == Job::Kind::kScore) {
        for (float l : j->logits) {
          j->score_out->add_logit(l);
          j->score_out->add_probability(Sigmoid(l));
        }
        SetVersion(version, j->score_out->mutable_version());
        continue;
      }
      const std::vector<int32_t>& dst = Candidates(*j);
      std::vector<int64_t> order(dst.size());
      std::iota(order.begin(), order.end(), 0);
      const size_t k = std::min<size_t>(j->query.k, order.size());
      // Best first; ties by candidate order.
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](int64_t a, int64_t b) {
                          return j->logits[a] > j->logits[b] ||
                                 (j->logits[a] == j->logits[b] && a < b);
                        });
      for (size_t i = 0; i < k; ++i) {
        j->topk_out->add_dst(model->ids().original(dst[order[i]]));
        j->topk_out->add_logit(j->logits[order[i]]);
        j->topk_out->add_probability(Sigmoid(j->logits[order[i]]));
      }
      SetVersion(version, j->topk_out->mutable_version());
    }
  }
};

namespace {

class InferenceService final : public v1::Inference::Service {
 public:
  explicit InferenceService(InferenceServer::Impl* impl) : impl_(impl) {}

  grpc::Status Score(grpc::ServerContext*, const v1::ScoreRequest* request,
                     v1::ScoreResponse* response) override {
    Job job;
    job.kind = Job::Kind::kScore;
    job.score = request;
    job.score_out = response;
    return services::ToGrpcStatus(impl_->Submit(&job));
  }

  grpc::Status TopK(grpc::ServerContext*, const v1::TopKRequest* request,
                    v1::TopKResponse* response) override {
    Job job;
    job.kind = Job::Kind::kTopK;
    job.topk = request;
    job.topk_out = response;
    return services::ToGrpcStatus(impl_->Submit(&job));
  }

  grpc::Status Embed(grpc::ServerContext*, const v1::EmbedRequest* request,
                     v1::EmbedResponse* response) override {
    Job job;
    job.kind = Job::Kind::kEmbed;
    job.embed = request;
    job.embed_out = response;
    return services::ToGrpcStatus(impl_->Submit(&job));
  }

  grpc::Status Ingest(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<v1::IngestAck, v1::IngestRequest>* stream)
      override {
    v1::IngestRequest request;
    int64_t batches = 0;
    while (stream->Read(&request)) {
      v1::IngestAck ack;
      Job job;
      job.kind = Job::Kind::kIngest;
      job.ingest = &request;
      job.ack = &ack;
      absl::Status s = impl_->Submit(&job);
      if (!s.ok()) {
        // The batches before it stay applied; the stream says how many.
        return services::ToGrpcStatus(absl::Status(
            s.code(),
            absl::StrCat("batch ", batches, " of the stream (", batches,
                         " applied before it): ", s.message())));
      }
      ++batches;
      if (!stream->Write(ack)) break;  // the client went away
    }
    return grpc::Status::OK;
  }

 private:
  InferenceServer::Impl* impl_;
};

}  // namespace

InferenceServer::InferenceServer(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}

absl::StatusOr<std::unique_ptr<InferenceServer>> InferenceServer::Start(
    std::unique_ptr<ServingBackend> model, InferenceServerOptions options,
    services::MetricsRegistry* metrics) {
  if (options.batch_pairs < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--batch-pairs must be at least 1, got ", options.batch_pairs));
  }
  auto credentials = services::MakeServerCredentials(options.security);
  if (!credentials.ok()) return credentials.status();
  // The journal's batches, applied again before anything is served (on the
  // calling thread: the one that loaded the model).
  for (size_t i = 0; i < options.recovered.size(); ++i) {
    v1::IngestRequest request;
    if (!request.ParseFromString(options.recovered[i])) {
      return absl::DataLossError(
          absl::StrCat("journal batch ", i, " is not an IngestRequest"));
    }
    auto decoded = services::DecodeIngest(request, model->ids(),
                                          model->limits(), model->now());
    absl::Status s = decoded.status();
    if (decoded.ok()) s = model->Ingest(*decoded).status();
    if (!s.ok()) {
      return absl::DataLossError(
          absl::StrCat("journal batch ", i, " of ", options.recovered.size(),
                       " no longer applies (", s.message(),
                       "): the journal and this memory disagree"));
    }
  }
  if (!options.recovered.empty() && options.log) {
    const Version v = model->version();
    options.log(absl::StrCat("journal: ", options.recovered.size(),
                             " batches applied again (", v.events_applied,
                             " events ingested; memory at t ", v.time, ")"));
  }
  options.recovered.clear();
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->model = std::move(model);
  impl->registry = metrics;
  if (metrics != nullptr) {
    Impl& m = *impl;
    m.batch_pairs = &metrics->Histogram(
        "mnemo_serve_batch_pairs",
        "Candidate pairs per model batch of queries (dynamic batching)", {},
        SizeBuckets());
    m.ingest_events =
        &metrics->Histogram("mnemo_serve_ingest_batch_events",
                            "Events per ingested batch", {}, SizeBuckets());
    m.ingested = &metrics->Counter("mnemo_serve_ingested_events_total",
                                   "Events ingested (scored, then applied)");
    m.online_ap = &metrics->Gauge(
        "mnemo_serve_online_ap",
        "Average precision of the ingested events against their negatives "
        "(the last --online-window events)");
    m.online_mrr = &metrics->Gauge(
        "mnemo_serve_online_mrr",
        "Mean reciprocal rank of each ingested event among it and its "
        "negative (the last --online-window events)");
    m.memory_time = &metrics->Gauge(
        "mnemo_serve_memory_time",
        "The memory's time: the newest applied event's, in the data's unit");
    m.new_nodes = &metrics->Gauge("mnemo_serve_new_nodes",
                                  "Nodes ingestion added to the run's");
    m.last_ingest = &metrics->Gauge(
        "mnemo_serve_last_ingest_timestamp_seconds",
        "Unix time of the last applied batch (staleness: time() - this)");
    m.model_epoch = &metrics->Gauge(
        "mnemo_serve_model_epoch",
        "The checkpoint epoch whose parameters answer (--reload moves it on)");
    m.model_written = &metrics->Gauge(
        "mnemo_serve_model_checkpoint_timestamp_seconds",
        "Unix time that checkpoint was written (the model's staleness: "
        "time() - this)");
    m.model_reloads = &metrics->Gauge(
        "mnemo_serve_model_reloads",
        "Newer checkpoints whose parameters were taken since start "
        "(--reload)");
    m.job_epoch = &metrics->Gauge(
        "mnemo_serve_job_epoch",
        "--follow: the training job's epoch, by the newest state in its "
        "shards (model staleness in epochs: this - mnemo_serve_model_epoch)");
    m.job_events = &metrics->Gauge(
        "mnemo_serve_job_events",
        "--follow: events of the job's epoch its newest stored state has "
        "applied");
    m.Refresh();
  }
  impl->service = std::make_unique<InferenceService>(impl.get());
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(services::NormalizeAddress(options.listen),
                           *credentials, &impl->port);
  builder.RegisterService(impl->service.get());
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(options.max_message_bytes));
  // A port in use is an error, not a second server sharing it.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  impl->server = builder.BuildAndStart();
  if (impl->server == nullptr || impl->port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.listen));
  }
  if (auto* health = impl->server->GetHealthCheckService()) {
    health->SetServingStatus(v1::Inference::service_full_name(), true);
  }
  return std::unique_ptr<InferenceServer>(new InferenceServer(std::move(impl)));
}

InferenceServer::~InferenceServer() { Shutdown(); }

int InferenceServer::port() const { return impl_->port; }

void InferenceServer::Serve() { impl_->Loop(); }

Version InferenceServer::version() const { return impl_->model->version(); }

void InferenceServer::Shutdown() {
  if (impl_->shut_down) return;
  impl_->shut_down = true;
  if (auto* health = impl_->server->GetHealthCheckService()) {
    health->Shutdown();
  }
  {
    absl::MutexLock lock(&impl_->mu);
    impl_->stopping = true;
  }
  // Queued calls end here (the loop may not be running); the one the loop
  // runs ends with it; then gRPC's.
  impl_->FailQueued();
  // Two seconds for gRPC to close the connections (a client that keeps an
  // idle channel open holds it that long).
  impl_->server->Shutdown(std::chrono::system_clock::now() +
                          std::chrono::seconds(2));
}

}  // namespace mnemo::serve
