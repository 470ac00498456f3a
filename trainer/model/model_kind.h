// The models mnemo trains, by name, and the node-state layout each declares
// (no torch: the launcher and flag parsing use it before any model exists).
#ifndef MNEMO_TRAINER_MODEL_MODEL_KIND_H_
#define MNEMO_TRAINER_MODEL_MODEL_KIND_H_

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"
#include "trainer/memory/record_layout.h"

namespace mnemo::model {

enum class ModelKind { kTgn, kJodie, kApan, kTgat, kDysat };

// "tgn", "jodie", "apan", "tgat" or "dysat"; INVALID_ARGUMENT naming the known
// models otherwise.
absl::StatusOr<ModelKind> ParseModelKind(std::string_view name);
std::string_view ModelName(ModelKind kind);

// The node state a model of `kind` keeps: TGN and JODIE a memory vector
// `memory_dim` wide and the mail [own memory, other endpoint's memory, edge
// features]; APAN the same memory and mails in a mailbox of
// `mailbox_slots`; TGAT and DySAT none (their records carry only the
// times).
memory::RecordLayout LayoutOf(ModelKind kind, int64_t memory_dim,
                              int64_t edge_dim, int64_t mailbox_slots = 10);

}  // namespace mnemo::model

#endif  // MNEMO_TRAINER_MODEL_MODEL_KIND_H_
