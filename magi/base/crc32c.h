// CRC-32C (Castagnoli), the checksum of iSCSI, ext4 metadata and Google's file formats,
// computed in software (slicing by 8: about 1-2 GB/s on one core). It detects torn or
// corrupted files; it is not a cryptographic hash.
//
//   uint32_t crc = Crc32c("123456789");          // 0xe3069283
//   uint32_t crc2 = Crc32cExtend(Crc32c("1234"), "56789");  // the same
#ifndef MAGI_BASE_CRC32C_H_
#define MAGI_BASE_CRC32C_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace magi {

// The CRC of `data` appended to data whose CRC was `crc` (0 for the empty prefix).
uint32_t Crc32cExtend(uint32_t crc, absl::string_view data);

inline uint32_t Crc32c(absl::string_view data) { return Crc32cExtend(0, data); }

// "e3069283": eight lowercase hex digits, as manifests store it.
std::string Crc32cHex(uint32_t crc);

}  // namespace magi

#endif  // MAGI_BASE_CRC32C_H_
