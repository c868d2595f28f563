#pragma once
// Byte sizes as people write them ("16GiB", "800MB", "1.5G"). The tool prints sizes with
// format_bytes (report.hpp), one formatter for every table and message.
#include <cstdint>
#include <string_view>

namespace flashbench {

// Parses a size into bytes. A number with an optional unit, case-insensitive, spaces allowed
// between them:
//   B; KiB MiB GiB TiB (powers of 1024); KB MB GB TB (powers of 1000, SI);
//   K M G T alone mean powers of 1024, as in `free -h` and `ulimit`.
// Throws UsageError on anything else, on a negative size and on a size that overflows int64.
int64_t parse_bytes(std::string_view text);

}  // namespace flashbench
