// What one node's state holds, as a model declares it (no torch: the
// launcher sizes the memory stores with it before any model exists).
//
// A node's state is its memory vector, the time of the memory's last
// update, and its pending mail (the raw message of its latest event, applied
// by the memory updater when the node is next read) with the mail's time.
// A model without memory (memory_dim 0) keeps only the times.
#ifndef MNEMO_TRAINER_MEMORY_RECORD_LAYOUT_H_
#define MNEMO_TRAINER_MEMORY_RECORD_LAYOUT_H_

#include <cstdint>

namespace mnemo::memory {

struct RecordLayout {
  int64_t memory_dim = 0;  // memory vector width
  int64_t mail_dim = 0;    // width of the pending mail

  // Floats of one record in the memory store (record_codec.h):
  // [memory | mail | has_mail | last_update hi | last_update lo].
  int64_t RecordFloats() const { return memory_dim + mail_dim + 3; }
  bool operator==(const RecordLayout&) const = default;
};

}  // namespace mnemo::memory

#endif  // MNEMO_TRAINER_MEMORY_RECORD_LAYOUT_H_
