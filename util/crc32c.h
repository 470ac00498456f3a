// CRC-32C (Castagnoli), the checksum of RocksDB's and ext4's logs, of the
// memory store's journal and of checkpoint files.
#ifndef MNEMO_UTIL_CRC32C_H_
#define MNEMO_UTIL_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace mnemo {

// CRC-32C of data[0, n) continuing `crc`, that of the bytes before (0 for
// none).
uint32_t Crc32cExtend(uint32_t crc, const char* data, size_t n);
// The same without the SSE4.2 instruction (what CPUs without it run).
uint32_t Crc32cExtendPortable(uint32_t crc, const char* data, size_t n);

}  // namespace mnemo

#endif  // MNEMO_UTIL_CRC32C_H_
