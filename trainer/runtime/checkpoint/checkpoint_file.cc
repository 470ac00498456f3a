#include "trainer/runtime/checkpoint/checkpoint_file.h"

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "util/crc32c.h"
#include "util/file.h"
#include "util/status_macros.h"
#include "util/yaml.h"

namespace mnemo::runtime {
namespace {

constexpr char kMagic[8] = {'m', 'n', 'e', 'm', 'o', 'C', 'K', '1'};
constexpr size_t kFooterBytes = 32;
constexpr char kFormat[] = "mnemo-checkpoint-1";

void PutLe(char* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
uint64_t GetLe(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) {
    v |= uint64_t{static_cast<unsigned char>(p[i])} << (8 * i);
  }
  return v;
}

}  // namespace

bool HasCheckpointFooter(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (!in || size < std::streamoff(kFooterBytes)) return false;
  char magic[sizeof(kMagic)];
  in.seekg(size - std::streamoff(kFooterBytes));
  in.read(magic, sizeof(magic));
  return in && std::memcmp(magic, kMagic, sizeof(kMagic)) == 0;
}

std::string NewRunId() {
  std::random_device rd;
  const uint64_t id = (uint64_t{rd()} << 32) ^ rd();
  return absl::StrFormat("%016x", id);
}

absl::StatusOr<CheckpointFileWriter> CheckpointFileWriter::Create(
    const std::string& path) {
  absl::StatusOr<DurableFileWriter> file = DurableFileWriter::Create(path);
  if (!file.ok()) return file.status();
  return CheckpointFileWriter(*std::move(file));
}

absl::Status CheckpointFileWriter::Append(std::string_view payload_part) {
  crc_ = Crc32cExtend(crc_, payload_part.data(), payload_part.size());
  payload_bytes_ += payload_part.size();
  return file_.Append(payload_part);
}

absl::Status CheckpointFileWriter::Finish(const CheckpointMeta& meta) {
  std::string text = absl::StrCat(
      "\nformat: ", kFormat, "\nepoch: ", meta.epoch, "\nrun_id: ", meta.run_id,
      "\nrun_config: \"", meta.run_config, "\"\n");
  if (meta.stop.known) {
    absl::StrAppend(&text, "best_epoch: ", meta.stop.best_epoch,
                    "\nrounds_without_improvement: ",
                    meta.stop.rounds_without_improvement, "\n");
  }
  if (!meta.data.empty()) absl::StrAppend(&text, "data: \"", meta.data, "\"\n");
  char footer[kFooterBytes] = {};
  std::memcpy(footer, kMagic, sizeof(kMagic));
  PutLe(footer + 8, payload_bytes_, 8);
  PutLe(footer + 16, text.size(), 4);
  PutLe(footer + 20, Crc32cExtend(crc_, text.data(), text.size()), 4);
  PutLe(footer + 24, Crc32cExtend(0, footer, 24), 4);
  // The metadata's own checksum, so that a resume can trust it without
  // reading the payload (ReadCheckpointMeta); 0 in files written before.
  PutLe(footer + 28, Crc32cExtend(0, text.data(), text.size()), 4);
  if (absl::Status s = file_.Append(text); !s.ok()) return s;
  if (absl::Status s = file_.Append(std::string_view(footer, kFooterBytes));
      !s.ok()) {
    return s;
  }
  return file_.Commit();
}

absl::Status WriteCheckpointEnvelope(const std::string& path,
                                     std::string_view payload,
                                     const CheckpointMeta& meta) {
  absl::StatusOr<CheckpointFileWriter> w = CheckpointFileWriter::Create(path);
  if (!w.ok()) return w.status();
  if (absl::Status s = w->Append(payload); !s.ok()) return s;
  return w->Finish(meta);
}

namespace {

absl::Status Damaged(const std::string& path, const std::string& what) {
  return absl::DataLossError(absl::StrCat(
      "checkpoint ", path, " is damaged (", what,
      "): refusing to load it; remove it (and any later ones) to resume "
      "from the one before"));
}

// A file of `size` bytes without a footer: OK where it is a bare archive
// from before checksums (a whole zip starts "PK\3\4" and ends with its
// 22-byte end record "PK\5\6"; LibTorch writes no zip comment), else
// damaged. `head` is its first 4 bytes and `tail` its last 22 (either
// shorter where the file is).
absl::Status CheckBareArchive(const std::string& path, uint64_t size,
                              std::string_view head, std::string_view tail) {
  if (size >= 26 && head.substr(0, 4) == std::string_view("PK\3\4", 4) &&
      tail.substr(0, 4) == std::string_view("PK\5\6", 4)) {
    return absl::OkStatus();
  }
  return Damaged(path, absl::StrCat(size,
                                    " bytes without a checkpoint footer: "
                                    "truncated, or not a checkpoint"));
}

// The footer `f` (kFooterBytes) of a file of `size` bytes: its own checksum
// and sizes checked; the payload's and metadata's sizes.
absl::Status CheckFooter(const std::string& path, const char* f, uint64_t size,
                         uint64_t* payload, uint64_t* meta) {
  if (static_cast<uint32_t>(GetLe(f + 24, 4)) != Crc32cExtend(0, f, 24)) {
    return Damaged(path, "footer checksum mismatch");
  }
  *payload = GetLe(f + 8, 8);
  *meta = GetLe(f + 16, 4);
  if (*payload + *meta + kFooterBytes != size) {
    return Damaged(path, absl::StrFormat("%d bytes, the footer says %d", size,
                                         *payload + *meta + kFooterBytes));
  }
  return absl::OkStatus();
}

// The metadata block's flat YAML into `meta`.
absl::Status ParseMeta(const std::string& path, std::string_view text,
                       CheckpointMeta* meta) {
  auto kv = ParseFlatYaml(std::string(text), path);
  if (!kv.ok()) return Damaged(path, std::string(kv.status().message()));
  for (const auto& [key, value] : *kv) {
    if (key == "epoch" && !absl::SimpleAtoi(value, &meta->epoch)) {
      return Damaged(path, absl::StrCat("bad epoch '", value, "'"));
    }
    // (The reader spells keys with dashes.)
    if (key == "run-id") meta->run_id = value;
    if (key == "run-config") meta->run_config = value;
    if (key == "data") meta->data = value;
    if (key == "best-epoch" || key == "rounds-without-improvement") {
      int n = 0;
      if (!absl::SimpleAtoi(value, &n)) {
        return Damaged(path, absl::StrCat("bad ", key, " '", value, "'"));
      }
      (key == "best-epoch" ? meta->stop.best_epoch
                           : meta->stop.rounds_without_improvement) = n;
      meta->stop.known = true;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CheckpointEnvelope> ReadCheckpointEnvelope(
    const std::string& path) {
  absl::StatusOr<std::string> bytes = ReadFileToString(path);
  if (!bytes.ok()) return bytes.status();
  CheckpointEnvelope env;
  env.bytes = std::move(*bytes);
  const std::string& b = env.bytes;
  if (b.size() < kFooterBytes || std::memcmp(b.data() + b.size() - kFooterBytes,
                                             kMagic, sizeof(kMagic)) != 0) {
    const std::string_view all(b);
    RETURN_IF_ERROR(
        CheckBareArchive(path, b.size(), all.substr(0, 4),
                         all.substr(b.size() >= 22 ? b.size() - 22 : 0)));
    env.payload_size = b.size();
    env.verified = false;
    return env;
  }
  uint64_t payload = 0, meta = 0;
  RETURN_IF_ERROR(CheckFooter(path, b.data() + b.size() - kFooterBytes,
                              b.size(), &payload, &meta));
  const uint32_t want =
      static_cast<uint32_t>(GetLe(b.data() + b.size() - kFooterBytes + 20, 4));
  const uint32_t got = Crc32cExtend(0, b.data(), payload + meta);
  if (want != got) {
    return Damaged(path, absl::StrFormat("checksum mismatch: stored %08x, "
                                         "computed %08x",
                                         want, got));
  }
  env.payload_size = payload;
  env.verified = true;
  RETURN_IF_ERROR(
      ParseMeta(path, std::string_view(b).substr(payload, meta), &env.meta));
  return env;
}

absl::StatusOr<CheckpointEnvelope> ReadCheckpointMeta(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
      return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    }
    return absl::UnavailableError(absl::StrCat("cannot read ", path));
  }
  in.seekg(0, std::ios::end);
  const std::streamoff end = in.tellg();
  const uint64_t size = end > 0 ? static_cast<uint64_t>(end) : 0;
  auto read_at = [&](uint64_t at, uint64_t n, std::string* out) {
    out->resize(n);
    in.clear();
    in.seekg(static_cast<std::streamoff>(at));
    in.read(out->data(), static_cast<std::streamsize>(n));
    return static_cast<bool>(in);
  };
  CheckpointEnvelope env;
  std::string footer;
  if (size < kFooterBytes ||
      !read_at(size - kFooterBytes, kFooterBytes, &footer) ||
      std::memcmp(footer.data(), kMagic, sizeof(kMagic)) != 0) {
    std::string head, tail;
    if (size >= 26 &&
        (!read_at(0, 4, &head) || !read_at(size - 22, 22, &tail))) {
      return absl::UnavailableError(absl::StrCat("cannot read ", path));
    }
    RETURN_IF_ERROR(CheckBareArchive(path, size, head, tail));
    env.payload_size = size;
    env.verified = false;
    return env;
  }
  uint64_t payload = 0, meta = 0;
  RETURN_IF_ERROR(CheckFooter(path, footer.data(), size, &payload, &meta));
  std::string text;
  if (!read_at(payload, meta, &text)) {
    return absl::UnavailableError(absl::StrCat("cannot read ", path));
  }
  const uint32_t meta_crc = static_cast<uint32_t>(GetLe(footer.data() + 28, 4));
  if (meta_crc == 0) {
    // A file from before the metadata had a checksum of its own: its
    // metadata is trusted only once the whole file verified.
    ASSIGN_OR_RETURN(CheckpointEnvelope whole, ReadCheckpointEnvelope(path));
    whole.bytes = std::string();
    return whole;
  }
  if (Crc32cExtend(0, text.data(), text.size()) != meta_crc) {
    return Damaged(path, "metadata checksum mismatch");
  }
  env.payload_size = payload;
  env.verified = true;
  RETURN_IF_ERROR(ParseMeta(path, text, &env.meta));
  return env;
}

}  // namespace mnemo::runtime
