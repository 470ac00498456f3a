#include "services/memstore_streams.h"

#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "memstore/node_state_store.h"
#include "services/grpc_util.h"
#include "services/memstore_metrics.h"
#include "services/pull_wire.h"
#include "util/executor.h"
#include "util/proc.h"

namespace mnemo::services {
namespace {

// Server side of PullStream: one store read on the executor, and the
// chunks, each a zero-copy view of that read (pull_wire.h). A chunk is sent
// as soon as the store reports its rows final (PullWithProgress), while the
// rest is still being read: the copy out of the store overlaps the network.
// The reactor finishes only after the read has returned and no queued
// Advance() is left, so it outlives every call into it.
class PullStreamReactor : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  PullStreamReactor(StreamHost* svc, const grpc::ByteBuffer* request)
      : svc_(svc), request_(request), t0_(MonotonicSeconds()) {
    svc_->executor().Submit([this] { Begin(); });
  }

  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock l(&mu_);
      writing_ = false;
      if (!ok) cancelled_ = true;
    }
    Advance();  // cheap: no copy, no store access
  }

  void OnDone() override { delete this; }

 private:
  void Begin() {
    absl::Status s = ParseRequest(*request_, "PullStream", &req_);
    if (s.ok()) s = svc_->ValidatePull(req_, /*stream=*/true);
    if (s.ok()) {
      int64_t chunk = svc_->chunk_states();
      if (req_.max_chunk_states() > 0) {
        chunk = std::min<int64_t>(chunk, req_.max_chunk_states());
      }
      std::shared_ptr<memstore::PulledStates> buffer = svc_->GetPullBuffer();
      {
        absl::MutexLock l(&mu_);
        n_ = req_.ids_size();
        chunk_ = chunk;
        pulled_ = buffer;
      }
      s = svc_->StorePull(req_, buffer.get(), [this](int64_t rows) {
        // Not Advance() here: gRPC would send the chunk on this thread,
        // between copies. Another executor thread starts the first write;
        // later ones start from OnWriteDone.
        absl::MutexLock l(&mu_);
        ready_ = rows;
        if (!writing_ && !kicked_ && NextChunkReadLocked()) {
          kicked_ = true;
          svc_->executor().Submit([this] { Advance(/*kick=*/true); });
        }
      });
    }
    // The read's end is published inside Advance's critical section: once
    // read_done_ is set another thread may finish the call (and OnDone
    // delete the reactor), so nothing here may touch `this` after it.
    Advance(/*kick=*/false, &s);
  }

  // The store has read every row of the next chunk.
  bool NextChunkReadLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return ready_ >= next_ + std::min(chunk_, n_ - next_);
  }

  // Starts the next write when its rows are ready and none is in flight,
  // or finishes the call once everything is sent (or failed) and the store
  // read has returned.
  // `kick`: the queued call of the read's progress callback, which clears
  // kicked_ in the same critical section (clearing it before would let
  // another thread finish the call, and OnDone delete the reactor, while
  // this one still runs). `read`: the store read's result, set by Begin
  // when the read returns, for the same reason.
  void Advance(bool kick = false, const absl::Status* read = nullptr) {
    absl::Status finish;
    bool write = false;
    {
      absl::MutexLock l(&mu_);
      if (kick) kicked_ = false;
      if (read != nullptr) {
        read_done_ = true;
        read_status_ = *read;
        if (read->ok()) ready_ = n_;
      }
      if (writing_ || finished_) return;
      if (cancelled_ || (read_done_ && !read_status_.ok())) {
        if (!read_done_) return;  // the store is still writing into pulled_
        finish = cancelled_
                     ? absl::CancelledError("PullStream: the client went away")
                     : read_status_;
      } else if (next_ >= n_) {
        if (!read_done_) return;
        finish = absl::OkStatus();
      } else {
        if (!NextChunkReadLocked()) return;
        const int64_t count = std::min(chunk_, n_ - next_);
        msg_ = EncodePullResponse(pulled_, svc_->dim(), next_, next_, count);
        next_ += count;
        writing_ = write = true;
      }
      if (!write) {
        // A queued kick still holds `this`: it finishes the call when it
        // runs.
        if (kicked_) return;
        finished_ = true;
        pulled_.reset();
      }
    }
    if (write) {
      StartWrite(&msg_);
    } else {
      svc_->metrics().Done("PullStream", finish, MonotonicSeconds() - t0_);
      Finish(ToGrpcStatus(finish));
    }
  }

  StreamHost* const svc_;
  const grpc::ByteBuffer* const request_;
  const double t0_;
  v1::PullRequest req_;
  absl::Mutex mu_;
  std::shared_ptr<memstore::PulledStates> pulled_ ABSL_GUARDED_BY(mu_);
  int64_t n_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t chunk_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t next_ ABSL_GUARDED_BY(mu_) = 0;   // first row not yet sent
  int64_t ready_ ABSL_GUARDED_BY(mu_) = 0;  // rows the store has finished
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool kicked_ ABSL_GUARDED_BY(mu_) = false;  // an Advance() is queued
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool read_done_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status read_status_ ABSL_GUARDED_BY(mu_);
  grpc::ByteBuffer msg_;  // the write in flight (written under mu_)
};

// Server side of PushStream: validates and gathers the chunks as they
// arrive, applies them as one push on the executor at half-close. All or
// nothing: a stream the client cancels, or that passes its deadline,
// before half-close applies none of its chunks.
class PushStreamReactor : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  PushStreamReactor(StreamHost* svc, grpc::CallbackServerContext* ctx,
                    grpc::ByteBuffer* response)
      : svc_(svc), ctx_(ctx), response_(response), t0_(MonotonicSeconds()) {
    StartRead(&raw_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // Reads end at half-close, or because the call was cancelled (by the
      // client, a deadline or a broken connection): only the first commits.
      if (ctx_->IsCancelled()) {
        Done(absl::CancelledError(
            absl::StrCat("PushStream cancelled before half-close: none of ",
                         ids_.size(), " received states applied")));
        return;
      }
      svc_->executor().Submit([this] {
        const int64_t n = ids_.size();
        absl::Status s =
            n == 0 ? absl::OkStatus()
                   : svc_->StorePush(ids_, states_, versions_, times_, writer_);
        if (s.ok()) {
          v1::PushResponse resp;
          resp.set_received(n);
          bool own = false;
          grpc::Status gs =
              grpc::SerializationTraits<v1::PushResponse>::Serialize(
                  resp, response_, &own);
          if (!gs.ok()) s = absl::InternalError(gs.error_message());
        }
        Done(s);
      });
      return;
    }
    absl::Status parsed = ParseRequest(raw_, "PushStream", &msg_);
    if (!parsed.ok()) {
      Done(absl::InvalidArgumentError(
          absl::StrCat(parsed.message(), " (chunk after ", ids_.size(),
                       " states; none applied)")));
      return;
    }
    if (ids_.empty() && !started_) {
      writer_ = msg_.writer();
      started_ = true;
    }
    absl::Status s = svc_->CheckPushMessage(msg_, ids_.size(), writer_);
    if (s.ok()) s = Append();
    if (!s.ok()) {
      Done(s);
      return;
    }
    StartRead(&raw_);
  }

  void OnDone() override { delete this; }

 private:
  // Adds the chunk in msg_ (its message checked) to the push; its contents
  // are checked once copied (aligned): a bad one fails the whole push.
  absl::Status Append() {
    const int64_t first = ids_.size();
    const int64_t n = msg_.ids_size();
    const int dim = svc_->dim();
    if (n > 0) {  // an empty chunk is valid (and memcpy of nothing from an
                  // empty vector's null data() is not)
      ids_.insert(ids_.end(), msg_.ids().begin(), msg_.ids().end());
      states_.resize((first + n) * dim);
      std::memcpy(states_.data() + first * dim, msg_.states().data(),
                  msg_.states().size());
      versions_.resize(first + n);
      std::memcpy(versions_.data() + first, msg_.version().data(),
                  msg_.version().size());
      times_.resize(first + n);
      std::memcpy(times_.data() + first, msg_.time().data(),
                  msg_.time().size());
    }
    return memstore::ValidatePush(
        absl::MakeConstSpan(ids_).subspan(first),
        absl::MakeConstSpan(states_).subspan(first * dim),
        absl::MakeConstSpan(versions_).subspan(first),
        absl::MakeConstSpan(times_).subspan(first), msg_.writer(), dim, first);
  }

  void Done(const absl::Status& s) {
    svc_->metrics().Done("PushStream", s, MonotonicSeconds() - t0_);
    Finish(ToGrpcStatus(s));
  }

  StreamHost* const svc_;
  grpc::CallbackServerContext* const ctx_;
  grpc::ByteBuffer* const response_;
  const double t0_;
  grpc::ByteBuffer raw_;
  v1::PushRequest msg_;
  bool started_ = false;
  int32_t writer_ = 0;
  std::vector<int64_t> ids_;
  std::vector<float> states_;
  std::vector<uint64_t> versions_;
  std::vector<double> times_;
};

}  // namespace

grpc::ServerWriteReactor<grpc::ByteBuffer>* NewPullStreamReactor(
    StreamHost* host, const grpc::ByteBuffer* request) {
  return new PullStreamReactor(host, request);
}

grpc::ServerReadReactor<grpc::ByteBuffer>* NewPushStreamReactor(
    StreamHost* host, grpc::CallbackServerContext* ctx,
    grpc::ByteBuffer* response) {
  return new PushStreamReactor(host, ctx, response);
}

}  // namespace mnemo::services
