#include "flashbench/core/units.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "flashbench/core/errors.hpp"

namespace flashbench {

namespace {

std::string_view trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  return text;
}

// The multiplier of a unit suffix, already lower-cased; 0 when it is not a unit. [bytes]
double unit_multiplier(std::string_view unit) {
  constexpr double kKi = 1024.0;
  constexpr double kK = 1000.0;
  static const std::array<std::pair<std::string_view, double>, 14> kUnits = {{
      {"", 1.0}, {"b", 1.0},
      {"k", kKi}, {"kib", kKi}, {"kb", kK},
      {"m", kKi * kKi}, {"mib", kKi * kKi}, {"mb", kK * kK},
      {"g", kKi * kKi * kKi}, {"gib", kKi * kKi * kKi}, {"gb", kK * kK * kK},
      {"t", kKi * kKi * kKi * kKi}, {"tib", kKi * kKi * kKi * kKi}, {"tb", kK * kK * kK * kK},
  }};
  for (const auto& [name, multiplier] : kUnits)
    if (unit == name) return multiplier;
  return 0.0;
}

}  // namespace

int64_t parse_bytes(std::string_view text) {
  const std::string_view trimmed = trim(text);
  const auto bad = [&](std::string_view why) {
    return UsageError(fmt::format("bad size '{}': {} (examples: 16GiB, 800MB, 1.5G, 4096)", text, why));
  };
  size_t number_end = 0;
  while (number_end < trimmed.size() &&
         (std::isdigit(static_cast<unsigned char>(trimmed[number_end])) || trimmed[number_end] == '.'))
    ++number_end;
  if (number_end == 0) {
    if (!trimmed.empty() && trimmed.front() == '-') throw bad("a size cannot be negative");
    throw bad("expected a number");
  }
  double number = 0;
  const auto [end, error] = std::from_chars(trimmed.data(), trimmed.data() + number_end, number);
  if (error != std::errc() || end != trimmed.data() + number_end) throw bad("expected a number");
  const double multiplier = unit_multiplier(lowercase(trim(trimmed.substr(number_end))));
  if (multiplier == 0.0) throw bad("unknown unit");
  const double bytes = std::round(number * multiplier);
  if (!std::isfinite(bytes) || bytes >= 9.2e18) throw bad("too large");
  return static_cast<int64_t>(bytes);
}

namespace {
// `value` with three significant digits and no exponent: 0.0512, 8.12, 81.2, 812.
std::string three_digits(double value) {
  if (value == 0) return "0";
  int magnitude = static_cast<int>(std::floor(std::log10(std::abs(value))));
  // 0.9996 rounds up to 1.000: count digits from the rounded magnitude.
  const double rounded = std::abs(value) + 0.5 * std::pow(10.0, magnitude - 2);
  if (std::floor(std::log10(rounded)) > magnitude) ++magnitude;
  const int decimals = std::clamp(2 - magnitude, 0, 6);
  return fmt::format("{:.{}f}", value, decimals);
}
}  // namespace

std::string format_duration_ms(double ms) {
  if (ms < 999.5) return three_digits(ms) + " ms";
  return three_digits(ms / 1000) + " s";
}

std::string format_bytes(int64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  const int64_t magnitude = bytes < 0 ? -bytes : bytes;
  if (magnitude < 1024) return fmt::format("{} B", bytes);
  double value = double(bytes) / 1024;
  int unit = 0;
  while (std::abs(value) >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  // 1023.7 would print as "1024 KiB" with three digits; one more step reads better.
  if (std::abs(value) >= 999.5 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  return three_digits(value) + " " + kUnits[unit];
}

std::string format_throughput(double tflops) {
  if (tflops < 1) return three_digits(tflops * 1000) + " GFLOP/s";
  return three_digits(tflops) + " TFLOP/s";
}

std::string lowercase(std::string_view text) {
  std::string lower(text);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower;
}

std::string listed(const std::vector<std::string>& names, std::string_view last_separator) {
  std::string text;
  for (size_t i = 0; i < names.size(); ++i)
    text += fmt::format("{}{}", i == 0 ? "" : i + 1 == names.size() ? last_separator : ", ", names[i]);
  return text;
}

std::string counted(int64_t count, std::string_view noun, std::string_view plural) {
  if (count == 1) return fmt::format("1 {}", noun);
  return plural.empty() ? fmt::format("{} {}s", count, noun) : fmt::format("{} {}", count, plural);
}

}  // namespace flashbench
