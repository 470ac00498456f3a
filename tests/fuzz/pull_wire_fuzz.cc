// Fuzzes the client-side decoding of pull answers (services/pull_wire.h
// PullResponseView), as the memory-store client uses it.
//
// Input: byte 0 picks the state width (1..8), byte 1 how the message is cut
// into slices (0: one slice, else slices of that many bytes), byte 2 the
// scatter (even: in order, odd: through a reversing position map); the
// rest is the received message. A message that parses and passes the
// client's checks is copied out, encoded again (EncodePullResponse) and
// decoded again: the two decodings must agree.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "services/pull_wire.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using mnemo::fuzz::Fail;
using mnemo::memstore::PulledStates;
using mnemo::services::EncodePullResponse;
using mnemo::services::PullResponseView;

// Most rows a decoded answer may claim here (the client's bound is the
// number of ids it asked for).
constexpr int64_t kMaxRows = 1 << 14;

grpc::ByteBuffer ToBuffer(const char* data, size_t size, size_t cut) {
  std::vector<grpc::Slice> slices;
  if (cut == 0) cut = size;
  for (size_t off = 0; off < size; off += cut) {
    slices.emplace_back(data + off, std::min(cut, size - off));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

PulledStates Sized(int64_t rows, int dim) {
  PulledStates p;
  p.states.assign(rows * dim, -1.0f);
  p.version.assign(rows, ~uint64_t{0});
  p.time.assign(rows, -1.0);
  return p;
}

// The client's check of one answer for `rows` requested ids
// (MemstoreClient::Pull's scatter).
bool ClientAccepts(const PullResponseView& r, int64_t rows, int dim) {
  const int64_t row_bytes = int64_t{dim} * sizeof(float);
  return r.offset() >= 0 && r.count() >= 0 && r.offset() <= rows &&
         r.count() <= rows - r.offset() &&
         static_cast<int64_t>(r.states_bytes()) == r.count() * row_bytes &&
         static_cast<int64_t>(r.time_bytes()) == r.count() * 8 &&
         static_cast<int64_t>(r.version_bytes()) == r.count() * 8;
}

bool SameMemory(const void* a, const void* b, size_t bytes) {
  return bytes == 0 || std::memcmp(a, b, bytes) == 0;
}

bool SameBytes(const PulledStates& a, const PulledStates& b) {
  return a.states.size() == b.states.size() && a.time.size() == b.time.size() &&
         a.version.size() == b.version.size() &&
         SameMemory(a.states.data(), b.states.data(),
                    a.states.size() * sizeof(float)) &&
         SameMemory(a.time.data(), b.time.data(),
                    a.time.size() * sizeof(double)) &&
         SameMemory(a.version.data(), b.version.data(),
                    a.version.size() * sizeof(uint64_t));
}

void WriteSeeds(const std::string& dir) {
  int index = 0;
  for (int dim : {1, 4}) {
    for (int64_t rows : {0, 1, 3}) {
      auto p = std::make_shared<PulledStates>();
      for (int64_t i = 0; i < rows; ++i) {
        for (int k = 0; k < dim; ++k) p->states.push_back(i + 0.25f * k);
        p->version.push_back(i + 1);
        p->time.push_back(10.0 * i);
      }
      for (int64_t offset : {0, 2}) {
        grpc::ByteBuffer b = EncodePullResponse(p, dim, offset, 0, rows);
        std::vector<grpc::Slice> slices;
        std::string bytes;
        if (b.Valid() && b.Dump(&slices).ok()) {
          for (const grpc::Slice& s : slices) {
            bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
          }
        }
        for (const char* head : {"\x00\x00\x00", "\x03\x05\x01"}) {
          std::string seed(head, 3);
          seed[0] = static_cast<char>(dim - 1);
          mnemo::fuzz::WriteSeed(dir, index++, seed + bytes);
        }
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  mnemo::fuzz::MaybeWriteSeedsAndExit(WriteSeeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const int dim = data[0] % 8 + 1;
  const size_t cut = data[1];
  const bool reverse = data[2] % 2 == 1;
  const char* msg = reinterpret_cast<const char*>(data) + 3;
  const size_t msg_size = size - 3;

  PullResponseView view;
  grpc::ByteBuffer buffer = ToBuffer(msg, msg_size, cut);
  if (!view.Parse(buffer).ok()) return 0;
  // The client asks for `rows` ids; take the answer's own end as that.
  if (view.offset() < 0 || view.count() < 0 || view.offset() > kMaxRows ||
      view.count() > kMaxRows - view.offset())
    return 0;
  const int64_t rows = view.offset() + view.count();
  if (!ClientAccepts(view, rows, dim)) return 0;
  std::vector<int64_t> pos(rows);
  for (int64_t i = 0; i < rows; ++i) pos[i] = rows - 1 - i;
  PulledStates out = Sized(rows, dim);
  view.CopyTo(dim, view.offset(), reverse ? pos.data() : nullptr, &out);

  // Round trip: the copied rows, encoded and decoded again.
  PulledStates in_order = Sized(rows, dim);
  view.CopyTo(dim, view.offset(), nullptr, &in_order);
  auto shared = std::make_shared<const PulledStates>(in_order);
  grpc::ByteBuffer again = EncodePullResponse(shared, dim, view.offset(),
                                              view.offset(), view.count());
  PullResponseView view2;
  if (!view2.Parse(again).ok()) Fail("cannot parse an encoded answer");
  if (view2.offset() != view.offset() || view2.count() != view.count())
    Fail(absl::StrCat("offset/count changed: ", view.offset(), "/",
                      view.count(), " -> ", view2.offset(), "/",
                      view2.count()));
  if (!ClientAccepts(view2, rows, dim)) Fail("re-encoded answer rejected");
  PulledStates out2 = Sized(rows, dim);
  view2.CopyTo(dim, view2.offset(), nullptr, &out2);
  if (!SameBytes(in_order, out2)) Fail("round trip changed the states");
  return 0;
}
