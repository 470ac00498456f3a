// The on-disk format of a local store's data_dir (StoreImpl), shared by its
// components.
//
// RocksDB under data_dir/db (ColdTier) with three column families:
//   default  "meta/format" (on-disk format, "3"), "meta/dim",
//            "meta/materialized_seq"
//   nodes    8-byte big-endian id -> version u64 | updates u64 | time f64 |
//            writer i32 | dim x float32 (all little-endian)
//   journal  format 2's push journal (8-byte big-endian sequence -> one
//            packed push batch: header (magic "NMJ2", dim, n, writer) |
//            ids i64[n] | versions u64[n] | times f64[n] |
//            states f32[n * dim]); replayed at Open() and cut at the first
//            materialization, never written
// and the push journal in data_dir/journal (memstore/journal.h). Beside
// them: data_dir/LOCK (held by the open store), data_dir/SESSION (a
// session marker, memstore/recovery.h), data_dir/IDENTITY (what the store
// has acknowledged, "key: value" lines: "acknowledged: yes" and
// "journaled: N", the first record of its newest journal file;
// memstore/recovery.h), data_dir/recovery (write-back's recovery copy) and
// data_dir/ingest-*.sst (a materialization's SST files until RocksDB
// ingests them).
//
// On-disk formats: 3 (this one) keeps the push journal in its own files; 2
// kept it in the journal column family, and is read and upgraded to 3 at
// Open(). Both order states by caller-given versions. Format 1 (no
// "meta/format" key) ordered them by event time and had no versions to
// recover; Open() refuses such a data_dir with INVALID_ARGUMENT.
#ifndef MNEMO_MEMSTORE_FORMAT_H_
#define MNEMO_MEMSTORE_FORMAT_H_

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace mnemo::memstore {

static_assert(std::endian::native == std::endian::little,
              "packed state formats are little-endian");

inline constexpr char kNodesCf[] = "nodes";
inline constexpr char kJournalCf[] = "journal";
inline constexpr char kMetaFormat[] = "meta/format";
inline constexpr char kMetaDim[] = "meta/dim";
inline constexpr char kMetaMaterializedSeq[] = "meta/materialized_seq";
inline constexpr char kSessionFile[] = "SESSION";
inline constexpr char kIdentityFile[] = "IDENTITY";
inline constexpr char kJournalDir[] = "journal";
// The on-disk format this build writes; it reads format 2 too, upgrading
// it.
inline constexpr int kFormat = 3;
inline constexpr int kOldestFormat = 2;

// A record of format 2's journal column family.
inline constexpr uint32_t kLegacyJournalMagic = 0x324a4d4e;  // "NMJ2"
struct LegacyJournalHeader {
  uint32_t magic;
  uint32_t dim;
  uint64_t n;
  int32_t writer;
  uint32_t reserved;
};
static_assert(sizeof(LegacyJournalHeader) == 24);

// The header of a node entry: version u64, updates u64, time f64, writer
// i32.
inline constexpr size_t kEntryHeader = 8 + 8 + 8 + 4;
struct EntryMeta {
  uint64_t version;
  uint64_t updates;
  double time;
  int32_t writer;
};

// Bytes of a node entry as the store passes it around: its 8-byte key,
// then its value (header and row of `row_bytes`).
inline size_t EntryBytes(int64_t row_bytes) {
  return 8 + kEntryHeader + static_cast<size_t>(row_bytes);
}

// Keys are big-endian, so that they sort as the (non-negative) ids do.
inline void EncodeKey(uint64_t v, char out[8]) {
  for (int i = 7; i >= 0; --i) {
    out[i] = static_cast<char>(v & 0xff);
    v >>= 8;
  }
}
inline uint64_t DecodeKey(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

inline void EncodeHeader(uint64_t version, uint64_t updates, double time,
                         int32_t writer, char* out) {
  std::memcpy(out, &version, 8);
  std::memcpy(out + 8, &updates, 8);
  std::memcpy(out + 16, &time, 8);
  std::memcpy(out + 24, &writer, 4);
}
inline EntryMeta DecodeHeader(const char* header) {
  EntryMeta m;
  std::memcpy(&m.version, header, 8);
  std::memcpy(&m.updates, header + 8, 8);
  std::memcpy(&m.time, header + 16, 8);
  std::memcpy(&m.writer, header + 24, 4);
  return m;
}

}  // namespace mnemo::memstore

#endif  // MNEMO_MEMSTORE_FORMAT_H_
