#include "trainer/model/model_kind.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "util/enum_names.h"

namespace mnemo::model {

namespace {
constexpr EnumName<ModelKind> kModelNames[] = {{ModelKind::kTgn, "tgn"},
                                               {ModelKind::kJodie, "jodie"},
                                               {ModelKind::kApan, "apan"},
                                               {ModelKind::kTgat, "tgat"},
                                               {ModelKind::kDysat, "dysat"}};
}  // namespace

absl::StatusOr<ModelKind> ParseModelKind(std::string_view name) {
  return ParseEnum(kModelNames, "--model", name);
}

std::string_view ModelName(ModelKind kind) {
  return EnumToName(kModelNames, kind);
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
