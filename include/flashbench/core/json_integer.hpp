#pragma once
// Integers read from JSON that another program wrote (results files, sweep files).
//
// nlohmann's get<int64_t>() converts whatever number it holds: 1e25 or an unsigned above INT64_MAX
// becomes an out-of-range conversion (undefined behaviour; the results fuzzer found it), and
// get<int>() silently narrows. Every reader of an integer field goes through these instead, so a
// number that is not an integer in range is a UsageError naming the field.
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "flashbench/core/errors.hpp"

namespace flashbench {

// The value as an integer in [Min, Max], or nullopt when it is not a number, not integral (4.0 is
// integral, 4.5 is not) or out of that range. Works for json and ordered_json.
template <class Integer = int64_t, class Json>
std::optional<Integer> json_integer_if(const Json& value) {
  static_assert(std::numeric_limits<Integer>::is_signed, "unsigned fields: test is_number_unsigned() and read uint64_t");
  constexpr auto lowest = std::numeric_limits<Integer>::min();
  constexpr auto highest = std::numeric_limits<Integer>::max();
  if (value.is_number_unsigned()) {
    const uint64_t v = value.template get<uint64_t>();
    if (v > static_cast<uint64_t>(highest)) return std::nullopt;
    return static_cast<Integer>(v);
  }
  if (value.is_number_integer()) {
    const int64_t v = value.template get<int64_t>();
    if (v < static_cast<int64_t>(lowest) || v > static_cast<int64_t>(highest)) return std::nullopt;
    return static_cast<Integer>(v);
  }
  if (value.is_number_float()) {
    const double v = value.template get<double>();
    // Compare in double before converting: the bounds are -2^digits (exact) and 2^digits (the
    // first value past the maximum, which itself may not be a double).
    const double past_highest = std::ldexp(1.0, std::numeric_limits<Integer>::digits);
    if (!std::isfinite(v) || v != std::trunc(v) || v < static_cast<double>(lowest) || v >= past_highest)
      return std::nullopt;
    return static_cast<Integer>(v);
  }
  return std::nullopt;
}

// The same, or a UsageError: "{what} must be an integer in [min, max], got {value}".
template <class Integer = int64_t, class Json>
Integer json_integer(const Json& value, std::string_view what) {
  if (const std::optional<Integer> v = json_integer_if<Integer>(value)) return *v;
  throw UsageError(fmt::format("{} must be an integer in [{}, {}], got {}", what, std::numeric_limits<Integer>::min(),
                               std::numeric_limits<Integer>::max(), value.dump()));
}

}  // namespace flashbench
