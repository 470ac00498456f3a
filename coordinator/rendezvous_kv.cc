#include "coordinator/rendezvous_kv.h"

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"

namespace mnemo::coordinator {

absl::StatusOr<KvReply> KvStore::Call(const KvRequest& r) {
  const bool one_key = r.op != KvRequest::kCheck && r.op != KvRequest::kWait &&
                       r.op != KvRequest::kNumKeys;
  if (one_key && r.keys.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rendezvous: this operation takes one key, got ", r.keys.size()));
  }
  KvReply reply;
  absl::MutexLock lock(&mu_);
  switch (r.op) {
    case KvRequest::kSet:
      map_[r.keys[0]] = r.value;
      return reply;
    case KvRequest::kAdd: {
      int64_t now = 0;
      auto it = map_.find(r.keys[0]);
      if (it != map_.end() && !absl::SimpleAtoi(it->second, &now)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "rendezvous: add to key '", r.keys[0], "', which is not a number"));
      }
      now += r.amount;
      map_[r.keys[0]] = absl::StrCat(now);
      reply.number = now;
      return reply;
    }
    case KvRequest::kCompareSet: {
      auto it = map_.find(r.keys[0]);
      if (it == map_.end()) {
        // c10d: an unset key matches an empty expected value only.
        if (r.expected.empty()) map_[r.keys[0]] = r.value;
        reply.value = r.expected.empty() ? r.value : r.expected;
      } else if (it->second == r.expected) {
        it->second = r.value;
        reply.value = r.value;
      } else {
        reply.value = it->second;
      }
      return reply;
    }
    case KvRequest::kDelete:
      reply.flag = map_.erase(r.keys[0]) > 0;
      return reply;
    case KvRequest::kCheck:
      reply.flag = true;
      for (const auto& k : r.keys) reply.flag = reply.flag && map_.contains(k);
      return reply;
    case KvRequest::kNumKeys:
      reply.number = static_cast<int64_t>(map_.size());
      return reply;
    case KvRequest::kGet:
    case KvRequest::kWait: {
      auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        if (!closed_.ok()) return true;
        for (const auto& k : r.keys) {
          if (!map_.contains(k)) return false;
        }
        return true;
      };
      mu_.AwaitWithTimeout(absl::Condition(&ready),
                           absl::Seconds(std::max(0.0, r.timeout_s)));
      if (!closed_.ok()) return closed_;
      std::vector<std::string> missing;
      for (const auto& k : r.keys) {
        if (!map_.contains(k)) missing.push_back(k);
      }
      if (!missing.empty()) {
        return absl::DeadlineExceededError(absl::StrCat(
            "rendezvous: no value for ", absl::StrJoin(missing, ", "),
            " after ", r.timeout_s, " s (are all workers up?)"));
      }
      if (r.op == KvRequest::kGet) reply.value = map_[r.keys[0]];
      return reply;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("rendezvous: unknown operation ", static_cast<int>(r.op)));
}

void KvStore::Close(absl::Status status) {
  absl::MutexLock lock(&mu_);
  if (closed_.ok()) closed_ = std::move(status);
}

}  // namespace mnemo::coordinator
