#include "services/pull_wire.h"

#include <grpc/slice.h>

#include <algorithm>
#include <bit>
#include <cstring>

namespace mnemo::services {

static_assert(std::endian::native == std::endian::little,
              "the wire format is little-endian float32/float64/uint64");

namespace {

// PullResponse field numbers (memstore.proto).
constexpr uint32_t kOffset = 1, kCount = 2, kStates = 3, kTime = 4,
                   kVersion = 6;
constexpr uint32_t kVarint = 0, kFixed64 = 1, kLengthDelimited = 2,
                   kFixed32 = 5;

char* PutVarint(uint64_t v, char* p) {
  while (v >= 0x80) {
    *p++ = static_cast<char>(v | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<char>(v);
  return p;
}

char* PutTag(uint32_t field, uint32_t wire_type, char* p) {
  return PutVarint((field << 3) | wire_type, p);
}

// A slice of fresh memory filled from [begin, end).
grpc::Slice OwnedSlice(const char* begin, const char* end) {
  return grpc::Slice(begin, end - begin);
}

// Keeps the pulled states alive while gRPC holds a slice of them.
using Owner = std::shared_ptr<const memstore::PulledStates>;

void ReleaseOwner(void* owner) { delete static_cast<Owner*>(owner); }

grpc::Slice BorrowedSlice(const Owner& owner, const void* data, size_t len) {
  return grpc::Slice(const_cast<void*>(data), len, &ReleaseOwner,
                     new Owner(owner));
}

// Reads protobuf wire data spread over slices.
class SliceReader {
 public:
  explicit SliceReader(const std::vector<grpc::Slice>& slices)
      : slices_(slices) {
    Normalize();
  }

  bool done() const { return slice_ == slices_.size(); }
  // Bytes consumed so far.
  uint64_t pos() const { return pos_; }
  size_t slice() const { return slice_; }
  size_t offset() const { return offset_; }

  bool ReadVarint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (done()) return false;
      const uint8_t b = slices_[slice_].begin()[offset_];
      ++offset_;
      ++pos_;
      Normalize();
      *v |= uint64_t{b & 0x7fu} << shift;
      if (b < 0x80) return true;
    }
    return false;
  }

  bool Skip(uint64_t n) {
    while (n > 0) {
      if (done()) return false;
      const size_t step =
          std::min<uint64_t>(slices_[slice_].size() - offset_, n);
      offset_ += step;
      pos_ += step;
      n -= step;
      Normalize();
    }
    return true;
  }

 private:
  // Moves past exhausted (and empty) slices.
  void Normalize() {
    while (slice_ < slices_.size() && offset_ == slices_[slice_].size()) {
      ++slice_;
      offset_ = 0;
    }
  }

  const std::vector<grpc::Slice>& slices_;
  size_t slice_ = 0, offset_ = 0;
  uint64_t pos_ = 0;
};

}  // namespace

grpc::ByteBuffer EncodePullResponse(Owner p, int dim, int64_t offset,
                                    int64_t begin, int64_t count) {
  const size_t state_bytes = static_cast<size_t>(count) * dim * sizeof(float);
  const size_t time_bytes = static_cast<size_t>(count) * sizeof(double);
  const size_t version_bytes = static_cast<size_t>(count) * sizeof(uint64_t);
  std::vector<grpc::Slice> slices;
  slices.reserve(6);
  char head[64];
  char* h = head;
  if (offset != 0) {
    h = PutTag(kOffset, kVarint, h);
    h = PutVarint(static_cast<uint64_t>(offset), h);
  }
  if (count != 0) {
    h = PutTag(kCount, kVarint, h);
    h = PutVarint(static_cast<uint64_t>(count), h);
  }
  if (state_bytes == 0) {
    if (h != head) slices.push_back(OwnedSlice(head, h));
    return grpc::ByteBuffer(slices.data(), slices.size());
  }
  h = PutTag(kStates, kLengthDelimited, h);
  h = PutVarint(state_bytes, h);
  slices.push_back(OwnedSlice(head, h));
  slices.push_back(
      BorrowedSlice(p, p->states.data() + begin * dim, state_bytes));
  h = head;
  h = PutTag(kTime, kLengthDelimited, h);
  h = PutVarint(time_bytes, h);
  slices.push_back(OwnedSlice(head, h));
  slices.push_back(BorrowedSlice(p, p->time.data() + begin, time_bytes));
  h = head;
  h = PutTag(kVersion, kLengthDelimited, h);
  h = PutVarint(version_bytes, h);
  slices.push_back(OwnedSlice(head, h));
  slices.push_back(BorrowedSlice(p, p->version.data() + begin, version_bytes));
  return grpc::ByteBuffer(slices.data(), slices.size());
}

absl::Status PullResponseView::Parse(const grpc::ByteBuffer& buffer) {
  const absl::Status malformed =
      absl::InternalError("malformed PullResponse message");
  slices_.clear();
  offset_ = count_ = 0;
  states_ = time_ = version_ = {};
  if (!buffer.Valid()) return absl::OkStatus();  // empty message
  if (!buffer.Dump(&slices_).ok()) return malformed;
  SliceReader in(slices_);
  while (!in.done()) {
    uint64_t tag = 0, v = 0;
    if (!in.ReadVarint(&tag) || tag > UINT32_MAX) return malformed;
    const uint32_t field = static_cast<uint32_t>(tag >> 3);
    const uint32_t type = static_cast<uint32_t>(tag & 7);
    if (field == 0) return malformed;
    switch (type) {
      case kVarint:
        if (!in.ReadVarint(&v)) return malformed;
        if (field == kOffset) offset_ = static_cast<int64_t>(v);
        if (field == kCount) count_ = static_cast<int64_t>(v);
        break;
      case kFixed64:
        if (!in.Skip(8)) return malformed;
        break;
      case kFixed32:
        if (!in.Skip(4)) return malformed;
        break;
      case kLengthDelimited: {
        if (!in.ReadVarint(&v)) return malformed;
        const Range r{in.slice(), in.offset(), static_cast<size_t>(v)};
        if (!in.Skip(v)) return malformed;
        // Proto semantics: the last occurrence of a bytes field wins.
        if (field == kStates) states_ = r;
        if (field == kTime) time_ = r;
        if (field == kVersion) version_ = r;
        break;
      }
      default:
        return malformed;  // groups are not used by PullResponse
    }
  }
  return absl::OkStatus();
}

// Copies the first n bytes of r to dst; returns the range after them.
PullResponseView::Range PullResponseView::CopyRange(Range r, char* dst,
                                                    size_t n) const {
  r.len -= n;
  while (n > 0) {
    const grpc::Slice& s = slices_[r.slice];
    const size_t step = std::min(s.size() - r.offset, n);
    std::memcpy(dst, s.begin() + r.offset, step);
    dst += step;
    n -= step;
    r.offset += step;
    if (r.offset == s.size()) {
      ++r.slice;
      r.offset = 0;
    }
  }
  return r;
}

void PullResponseView::CopyTo(int dim, int64_t first, const int64_t* pos,
                              memstore::PulledStates* out) const {
  const size_t row_bytes = static_cast<size_t>(dim) * sizeof(float);
  if (pos == nullptr) {
    CopyRange(states_,
              reinterpret_cast<char*>(out->states.data() + first * dim),
              count_ * row_bytes);
    CopyRange(time_, reinterpret_cast<char*>(out->time.data() + first),
              count_ * sizeof(double));
    CopyRange(version_, reinterpret_cast<char*>(out->version.data() + first),
              count_ * sizeof(uint64_t));
    return;
  }
  Range s = states_, t = time_, v = version_;
  for (int64_t i = 0; i < count_; ++i) {
    const int64_t row = pos[first + i];
    s = CopyRange(s, reinterpret_cast<char*>(out->states.data() + row * dim),
                  row_bytes);
    t = CopyRange(t, reinterpret_cast<char*>(out->time.data() + row),
                  sizeof(double));
    v = CopyRange(v, reinterpret_cast<char*>(out->version.data() + row),
                  sizeof(uint64_t));
  }
}

}  // namespace mnemo::services
