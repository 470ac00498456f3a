// A fixed pool of threads running closures in submission order (the memory
// store server's handlers, the client's fan-out to shards, the local
// store's parallel cold reads).
#ifndef MNEMO_UTIL_EXECUTOR_H_
#define MNEMO_UTIL_EXECUTOR_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace mnemo {

class Executor {
 public:
  explicit Executor(int threads) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Run(); });
  }
  // Runs what is queued, then joins.
  ~Executor() {
    {
      absl::MutexLock l(&mu_);
      stop_ = true;
    }
    for (auto& t : threads_) t.join();
  }
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  void Submit(std::function<void()> fn) {
    absl::MutexLock l(&mu_);
    queue_.push_back(std::move(fn));
  }

  // Runs queued closures (anyone's) on the calling thread until `*pending`
  // is 0: a caller waiting for its own closures, which decrement it when
  // done, helps instead of waiting behind other callers' work.
  void RunUntilZero(const std::atomic<int64_t>* pending) {
    struct Wait {
      Executor* e;
      const std::atomic<int64_t>* pending;
    } w{this, pending};
    for (;;) {
      std::function<void()> fn;
      {
        absl::MutexLock l(&mu_);
        // Re-evaluated whenever mu_ is released: a worker takes mu_ after
        // every closure it runs.
        mu_.Await(absl::Condition(
            +[](Wait* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->e->mu_) {
              return w->pending->load() == 0 || !w->e->queue_.empty();
            },
            &w));
        if (pending->load() == 0) return;
        fn = std::move(queue_.front());
        queue_.pop_front();
      }
      fn();
    }
  }

 private:
  void Run() {
    for (;;) {
      std::function<void()> fn;
      {
        absl::MutexLock l(&mu_);
        mu_.Await(absl::Condition(
            +[](Executor* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(e->mu_) {
              return e->stop_ || !e->queue_.empty();
            },
            this));
        if (queue_.empty()) return;
        fn = std::move(queue_.front());
        queue_.pop_front();
      }
      fn();
    }
  }

  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace mnemo

#endif  // MNEMO_UTIL_EXECUTOR_H_
