#include "trainer/model/model_spec.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "trainer/model/apan.h"
#include "trainer/model/dysat.h"
#include "trainer/model/memory_models.h"
#include "trainer/model/tgat.h"
#include "util/enum_names.h"
#include "util/status_macros.h"

namespace mnemo::model {
namespace {

memory::RecordLayout RecurrentLayout(const ModelOptions& o) {
  return {o.memory_dim, 2 * o.memory_dim + o.edge_dim};
}
memory::RecordLayout MailboxLayout(const ModelOptions& o) {
  return {o.memory_dim, 2 * o.memory_dim + o.edge_dim, o.mailbox};
}
memory::RecordLayout TimesOnly(const ModelOptions&) { return {0, 0}; }

absl::Status CheckTgn(const ModelOptions& o) {
  if ((o.memory_dim + o.time_dim) % o.heads != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--memory-dim + --time-dim (%d) must be divisible by --heads (%d)",
        o.memory_dim + o.time_dim, o.heads));
  }
  return absl::OkStatus();
}
absl::Status CheckNothing(const ModelOptions&) { return absl::OkStatus(); }
absl::Status CheckApan(const ModelOptions& o) {
  if (o.memory_dim % o.heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--memory-dim (%d) must be divisible by --heads "
                        "(%d) for apan",
                        o.memory_dim, o.heads));
  }
  if (o.mailbox < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("--mailbox must be >= 2 for apan, got ", o.mailbox));
  }
  return absl::OkStatus();
}
// TGAT's and DySAT's attention layers.
absl::Status CheckLayers(const ModelOptions& o) {
  const std::string name(ModelName(o.kind));
  if (o.embedding_dim % o.heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--embedding-dim (%d) must be divisible by --heads "
                        "(%d) for %s",
                        o.embedding_dim, o.heads, name));
  }
  if (o.layers != 1 && o.layers != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("--layers must be 1 or 2 for ", name, ", got ", o.layers));
  }
  return absl::OkStatus();
}
absl::Status CheckDysat(const ModelOptions& o) {
  RETURN_IF_ERROR(CheckLayers(o));
  if (o.snapshots < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--snapshots must be >= 1 for dysat, got ", o.snapshots));
  }
  if (!(o.snapshot_span > 0) || !std::isfinite(o.snapshot_span)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--snapshot-span must be > 0 and finite for dysat, got ",
                     o.snapshot_span));
  }
  return absl::OkStatus();
}

template <typename Impl>
Model Make(const ModelOptions& o) {
  return std::make_shared<Impl>(o);
}

using data::NeighborStrategy;

// One row per model (docs/models-and-policies.md says what each is and how
// it differs from its paper). TGL's configurations: TGAT and DySAT sample
// uniformly; TGAT, DySAT and APAN use dropout 0.1.
const ModelSpec kModels[] = {
    {ModelKind::kTgn, "tgn", RecurrentLayout, NeighborStrategy::kRecent, 0.2,
     CheckTgn,
     /*refines=*/true, Make<TgnImpl>},
    {ModelKind::kJodie, "jodie", RecurrentLayout, NeighborStrategy::kRecent,
     0.2, CheckNothing,
     /*refines=*/true, Make<JodieImpl>},
    {ModelKind::kApan, "apan", MailboxLayout, NeighborStrategy::kRecent, 0.1,
     CheckApan,
     /*refines=*/false, Make<ApanImpl>},
    {ModelKind::kTgat, "tgat", TimesOnly, NeighborStrategy::kUniform, 0.1,
     CheckLayers,
     /*refines=*/false, Make<TgatImpl>},
    {ModelKind::kDysat, "dysat", TimesOnly, NeighborStrategy::kUniform, 0.1,
     CheckDysat,
     /*refines=*/false, Make<DysatImpl>},
};

}  // namespace

const ModelSpec& SpecOf(ModelKind kind) {
  for (const ModelSpec& s : kModels) {
    if (s.kind == kind) return s;
  }
  return kModels[0];  // every kind has a row
}

absl::StatusOr<ModelKind> ParseModelKind(std::string_view name) {
  std::vector<std::string_view> names;
  for (const ModelSpec& s : kModels) {
    if (s.name == name) return s.kind;
    names.push_back(s.name);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--model must be ", NameList(names), ", got '", std::string(name), "'"));
}

std::string_view ModelName(ModelKind kind) { return SpecOf(kind).name; }

namespace {
constexpr EnumName<ApanMailbox> kApanMailboxNames[] = {
    {ApanMailbox::kMnemo, "mnemo"}, {ApanMailbox::kTgl, "tgl"}};
}  // namespace

absl::StatusOr<ApanMailbox> ParseApanMailbox(std::string_view name) {
  return ParseEnum(kApanMailboxNames, "--apan-mailbox", name);
}

std::string_view ApanMailboxName(ApanMailbox mailbox) {
  return EnumToName(kApanMailboxNames, mailbox);
}

ModelOptions WithDefaults(const ModelOptions& options) {
  ModelOptions o = options;
  const ModelSpec& spec = SpecOf(o.kind);
  if (!o.neighbor_strategy.has_value()) {
    o.neighbor_strategy = spec.default_strategy;
  }
  if (o.dropout == -1) o.dropout = spec.default_dropout;
  return o;
}

absl::Status ValidateModelOptions(const ModelOptions& o) {
  // The upper bounds lie far above any published model's (widths of 100 to
  // 256, 10 to 20 neighbors, 2 heads): a larger value is a typo that would
  // end in an allocation error, or a run that never ends, not a model.
  struct Range {
    const char* flag;
    int64_t value, min, max;
  };
  for (const Range& c :
       {Range{"--memory-dim", o.memory_dim, 1, kMaxWidth},
        Range{"--time-dim", o.time_dim, 1, kMaxWidth},
        Range{"--embedding-dim", o.embedding_dim, 1, kMaxWidth},
        Range{"--neighbors", o.neighbors, 1, kMaxNeighbors},
        Range{"--heads", o.heads, 1, kMaxHeads},
        Range{"--mailbox", o.mailbox, 1, kMaxMailbox},
        Range{"--layers", o.layers, 1, kMaxLayers},
        Range{"--snapshots", o.snapshots, 1, kMaxSnapshots}}) {
    if (c.value < c.min || c.value > c.max) {
      return absl::InvalidArgumentError(absl::StrCat(
          c.flag, " must be in [", c.min, ", ", c.max, "], got ", c.value));
    }
  }
  if (!(o.dropout >= 0 && o.dropout < 1) && o.dropout != -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--dropout must be in [0, 1) (or -1: the model's default), got ",
        o.dropout));
  }
  if (o.apan_mailbox != ApanMailbox::kMnemo && o.kind != ModelKind::kApan) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--apan-mailbox ", std::string(ApanMailboxName(o.apan_mailbox)),
        " is for --model apan, not ", std::string(ModelName(o.kind))));
  }
  return SpecOf(o.kind).validate(o);
}

}  // namespace mnemo::model
