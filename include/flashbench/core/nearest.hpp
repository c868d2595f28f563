#pragma once
// "Did you mean ...?": the known name nearest to a mistyped one, for flags, subcommands and presets.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace flashbench {

// Edits that turn `a` into `b`: insert, delete or replace one character, or swap two neighbours
// (so "--sqe" is one edit from "--seq"; optimal string alignment distance).
int edit_distance(std::string_view a, std::string_view b);

// The name of `known` fewest edits from `typed`, if close enough to be a slip rather than another
// word: at most a quarter of `typed`'s letters (leading dashes not counted), and at least one.
// A tie goes to the first in `known`.
std::optional<std::string> nearest_name(std::string_view typed, const std::vector<std::string>& known);

}  // namespace flashbench
