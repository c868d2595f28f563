#pragma once
// Byte sizes as people write them ("16GiB", "800MB", "1.5G"), and the human units every table
// and message prints with (one formatter each).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace flashbench {

// Parses a size into bytes. A number with an optional unit, case-insensitive, spaces allowed
// between them:
//   B; KiB MiB GiB TiB (powers of 1024); KB MB GB TB (powers of 1000, SI);
//   K M G T alone mean powers of 1024, as in `free -h` and `ulimit`.
// Throws UsageError on anything else, on a negative size and on a size that overflows int64.
int64_t parse_bytes(std::string_view text);

// Three significant digits: "0.0512 ms", "8.12 ms", "812 ms", "1.25 s".
std::string format_duration_ms(double ms);
std::string format_bytes(int64_t bytes);       // binary units: "512 B", "64.0 KiB", "1.50 GiB"
std::string format_throughput(double tflops);  // "850 GFLOP/s", "1.23 TFLOP/s"
// A count and its noun, the noun plural unless the count is one: "1 configuration", "3 rows".
// `plural` for nouns that do not take an "s".
std::string counted(int64_t count, std::string_view noun, std::string_view plural = {});
// Names joined for prose: "a, b, c", or with last_separator " or " "a, b or c".
std::string listed(const std::vector<std::string>& names, std::string_view last_separator = ", ");
// ASCII letters in lower case ("SAME" -> "same", "Cooperlake" -> "cooperlake").
std::string lowercase(std::string_view text);

}  // namespace flashbench
