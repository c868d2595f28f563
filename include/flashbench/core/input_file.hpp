#pragma once
// The one way flashbench reads a file it is given (a sweep file, a results file, a peak file, a
// .npy): a regular file or a pipe, never a device, a directory or a socket; at most a stated number
// of bytes, so /dev/zero or a file of gigabytes is a one-line error rather than a read without end;
// and JSON parsed with a bounded nesting depth, so that a hostile file cannot drive any of the
// recursive code that walks, copies, prints or destroys a parsed document into the stack.
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace flashbench {

// Caps by what the file holds. A sweep or peak file is a few hundred bytes; a results file holds a
// few kilobytes a row (a million rows fit); a .npy holds one tensor that grad reads whole.
inline constexpr int64_t kMaxConfigFileBytes = int64_t{16} << 20;
inline constexpr int64_t kMaxResultsFileBytes = int64_t{4} << 30;
inline constexpr int64_t kMaxNpyFileBytes = int64_t{64} << 30;

// Deeper than anything flashbench writes (results nest 5 levels) by far, shallow enough that no
// recursion over the document can exhaust a stack.
inline constexpr int kMaxJsonDepth = 64;

// The bytes of `path`; a UsageError naming `what` (e.g. "--config") when it is not a regular file
// or a pipe, cannot be opened or read, or holds more than max_bytes.
std::string read_input_file(const std::string& path, std::string_view what, int64_t max_bytes);

// json::parse with nesting deeper than kMaxJsonDepth refused before anything deeper is built: a
// UsageError "<source>: JSON nested deeper than 64 levels". Other syntax errors behave as
// Json::parse's (a parse_error, or a discarded value when allow_exceptions is false).
template <class Json>
Json parse_json_bounded(std::string_view text, std::string_view source, bool allow_exceptions = true);

extern template nlohmann::json parse_json_bounded<nlohmann::json>(std::string_view, std::string_view, bool);
extern template nlohmann::ordered_json parse_json_bounded<nlohmann::ordered_json>(std::string_view, std::string_view,
                                                                                  bool);

}  // namespace flashbench
