#include "trainer/model/model_kind.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace mnemo::model {

absl::StatusOr<ModelKind> ParseModelKind(std::string_view name) {
  if (name == "tgn") return ModelKind::kTgn;
  if (name == "jodie") return ModelKind::kJodie;
  if (name == "apan") return ModelKind::kApan;
  if (name == "tgat") return ModelKind::kTgat;
  if (name == "dysat") return ModelKind::kDysat;
  return absl::InvalidArgumentError(
      absl::StrCat("--model must be tgn, jodie, apan, tgat or dysat, got '",
                   std::string(name), "'"));
}

std::string_view ModelName(ModelKind kind) {
  switch (kind) {
    case ModelKind::kTgn:
      return "tgn";
    case ModelKind::kJodie:
      return "jodie";
    case ModelKind::kApan:
      return "apan";
    case ModelKind::kTgat:
      return "tgat";
    case ModelKind::kDysat:
      return "dysat";
  }
  return "unknown";
}

memory::RecordLayout LayoutOf(ModelKind kind, int64_t memory_dim,
                              int64_t edge_dim, int64_t mailbox_slots) {
  switch (kind) {
    case ModelKind::kTgn:
    case ModelKind::kJodie:
      return {memory_dim, 2 * memory_dim + edge_dim};
    case ModelKind::kApan:
      return {memory_dim, 2 * memory_dim + edge_dim, mailbox_slots};
    case ModelKind::kTgat:
    case ModelKind::kDysat:
      return {0, 0};
  }
  return {};
}

}  // namespace mnemo::model
