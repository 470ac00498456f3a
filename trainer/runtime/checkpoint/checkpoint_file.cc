#include "trainer/runtime/checkpoint/checkpoint_file.h"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "util/crc32c.h"
#include "util/file.h"
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

absl::StatusOr<CheckpointEnvelope> ReadCheckpointEnvelope(
    const std::string& path) {
  absl::StatusOr<std::string> bytes = ReadFileToString(path);
  if (!bytes.ok()) return bytes.status();
  CheckpointEnvelope env;
  env.bytes = std::move(*bytes);
  const std::string& b = env.bytes;
  auto damaged = [&](const std::string& what) {
    return absl::DataLossError(absl::StrCat(
        "checkpoint ", path, " is damaged (", what,
        "): refusing to load it; remove it (and any later ones) to resume "
        "from the one before"));
  };
  if (b.size() < kFooterBytes || std::memcmp(b.data() + b.size() - kFooterBytes,
                                             kMagic, sizeof(kMagic)) != 0) {
    // A bare archive from before checksums: a whole zip starts "PK\3\4"
    // and ends with its 22-byte end record "PK\5\6" (LibTorch writes no
    // zip comment).
    if (b.size() >= 26 && b.compare(0, 4, "PK\3\4") == 0 &&
        b.compare(b.size() - 22, 4, "PK\5\6") == 0) {
      env.payload_size = b.size();
      env.verified = false;
      return env;
    }
    return damaged(absl::StrCat(b.size(),
                                " bytes without a checkpoint "
                                "footer: truncated, or not a "
                                "checkpoint"));
  }
  const char* f = b.data() + b.size() - kFooterBytes;
  if (static_cast<uint32_t>(GetLe(f + 24, 4)) != Crc32cExtend(0, f, 24)) {
    return damaged("footer checksum mismatch");
  }
  const uint64_t payload = GetLe(f + 8, 8);
  const uint64_t meta = GetLe(f + 16, 4);
  if (payload + meta + kFooterBytes != b.size()) {
    return damaged(absl::StrFormat("%d bytes, the footer says %d", b.size(),
                                   payload + meta + kFooterBytes));
  }
  const uint32_t want = static_cast<uint32_t>(GetLe(f + 20, 4));
  const uint32_t got = Crc32cExtend(0, b.data(), payload + meta);
  if (want != got) {
    return damaged(
        absl::StrFormat("checksum mismatch: stored %08x, "
                        "computed %08x",
                        want, got));
  }
  env.payload_size = payload;
  env.verified = true;
  auto kv = ParseFlatYaml(b.substr(payload, meta), path);
  if (!kv.ok()) return damaged(std::string(kv.status().message()));
  for (const auto& [key, value] : *kv) {
    if (key == "epoch" && !absl::SimpleAtoi(value, &env.meta.epoch)) {
      return damaged(absl::StrCat("bad epoch '", value, "'"));
    }
    // (The reader spells keys with dashes.)
    if (key == "run-id") env.meta.run_id = value;
    if (key == "run-config") env.meta.run_config = value;
    if (key == "data") env.meta.data = value;
    if (key == "best-epoch" || key == "rounds-without-improvement") {
      int n = 0;
      if (!absl::SimpleAtoi(value, &n)) {
        return damaged(absl::StrCat("bad ", key, " '", value, "'"));
      }
      (key == "best-epoch" ? env.meta.stop.best_epoch
                           : env.meta.stop.rounds_without_improvement) = n;
      env.meta.stop.known = true;
    }
  }
  return env;
}

}  // namespace mnemo::runtime
