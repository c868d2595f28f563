#pragma once
// Byte sizes as people write them ("16GiB", "800MB", "1.5G") and as the tool prints them.
#include <cstdint>
#include <string>
#include <string_view>

namespace flashbench {

// Parses a size into bytes. A number with an optional unit, case-insensitive, spaces allowed
// between them:
//   B; KiB MiB GiB TiB (powers of 1024); KB MB GB TB (powers of 1000, as disks and the seed
//   documents' "GB" figures are printed); K M G T alone mean powers of 1024, as in `free -h`.
// Throws UsageError on anything else, on a negative size and on a size that overflows int64.
int64_t parse_bytes(std::string_view text);

// Bytes in binary units with one decimal: "512 B", "1.5 KiB", "66.0 GiB", "1.0 TiB".
std::string format_bytes(int64_t bytes);

}  // namespace flashbench
