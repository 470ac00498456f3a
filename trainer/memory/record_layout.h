// What one node's state holds, as a model declares it (no torch: the
// launcher sizes the memory stores with it before any model exists).
//
// A node's state is its memory vector, the time of the memory's last
// update, and its pending mail (the raw message of its latest event, applied
// by the memory updater when the node is next read) with the mail's time.
// A model without memory (memory_dim 0) keeps only the times. A mailbox
// model (APAN) keeps its last `mailbox_slots` mails, each with its time.
#ifndef MNEMO_TRAINER_MEMORY_RECORD_LAYOUT_H_
#define MNEMO_TRAINER_MEMORY_RECORD_LAYOUT_H_

#include <cstdint>

namespace mnemo::memory {

struct RecordLayout {
  int64_t memory_dim = 0;  // memory vector width
  int64_t mail_dim = 0;    // width of one mail
  // Mails kept per node: 1 (TGN, JODIE: the pending mail) or a ring of the
  // last k (APAN's mailbox).
  int64_t mailbox_slots = 1;

  int64_t MailboxFloats() const { return mailbox_slots * mail_dim; }
  // Floats of one record in the memory store (record_codec.h):
  // [memory | mails | has_mail | last_update hi | lo], then with a mailbox
  // of k > 1 slots [slot time hi | lo] x k and the count of mails received.
  int64_t RecordFloats() const {
    return memory_dim + MailboxFloats() + 3 +
           (mailbox_slots > 1 ? 2 * mailbox_slots + 1 : 0);
  }
  bool operator==(const RecordLayout&) const = default;
};

// Bytes one held node state takes in a trainer's node memory
// (node_memory.h): memory and mails (float32), the update, mail and slot
// times, the mail flag, the latest event, the mail count and its row's node.
inline int64_t HeldStateBytes(const RecordLayout& layout) {
  const int64_t k = layout.mailbox_slots;
  return 4 * (layout.memory_dim + layout.MailboxFloats()) + 8 + 8 + 1 + 8 + 8 +
         (k > 1 ? 8 * k + 8 : 0);
}

}  // namespace mnemo::memory

#endif  // MNEMO_TRAINER_MEMORY_RECORD_LAYOUT_H_
