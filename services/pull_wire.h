// Zero-copy encoding and decoding of mnemo.v1.PullResponse
// (proto/mnemo/v1/memstore.proto), the bulk data path of the memory-store
// service.
//
// The generated protobuf code would copy a pull answer three times (store
// result -> `bytes` field -> serialized gRPC buffer on the server; received
// buffer -> `bytes` field on the client before the caller's copy). Here the
// server hands gRPC slices that point straight into the store's result, and
// the client reads the states straight out of the received slices into the
// caller's PulledStates. The bytes on the wire are exactly the protobuf
// encoding of PullResponse, so peers that use the generated code (grpcurl,
// tests, other languages) are unaffected.
#ifndef MNEMO_SERVICES_PULL_WIRE_H_
#define MNEMO_SERVICES_PULL_WIRE_H_

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "memstore/node_state_store.h"

namespace mnemo::services {

// PullResponse{offset, count, states, time, version} for rows
// [begin, begin + count) of `p` (state width `dim`). The states, time and
// version slices reference p's memory: `p` stays alive (and must not
// change) until gRPC has released the buffer.
grpc::ByteBuffer EncodePullResponse(
    std::shared_ptr<const memstore::PulledStates> p, int dim, int64_t offset,
    int64_t begin, int64_t count);

// A received PullResponse whose payload stays in the received slices.
class PullResponseView {
 public:
  // Parses `buffer` (any valid protobuf encoding of PullResponse; unknown
  // fields are skipped). INTERNAL when it is not one.
  absl::Status Parse(const grpc::ByteBuffer& buffer);

  int64_t offset() const { return offset_; }
  int64_t count() const { return count_; }
  size_t states_bytes() const { return states_.len; }
  size_t time_bytes() const { return time_.len; }
  size_t version_bytes() const { return version_.len; }

  // Copies the chunk into `out` (already sized): chunk row i goes to row
  // `first + i`, or to row `pos[first + i]` when `pos` is not null. The
  // caller has checked the sizes against count() and the rows against out.
  void CopyTo(int dim, int64_t first, const int64_t* pos,
              memstore::PulledStates* out) const;

 private:
  // A byte range of the received slices.
  struct Range {
    size_t slice = 0, offset = 0, len = 0;
  };
  Range CopyRange(Range r, char* dst, size_t n) const;

  std::vector<grpc::Slice> slices_;
  int64_t offset_ = 0, count_ = 0;
  Range states_, time_, version_;
};

}  // namespace mnemo::services

#endif  // MNEMO_SERVICES_PULL_WIRE_H_
