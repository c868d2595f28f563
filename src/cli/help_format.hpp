#pragma once
// `--help` that keeps to the reader's terminal: each option's description wrapped at word
// boundaries to the width, its continuation lines under the description column.
#include <CLI/CLI.hpp>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace flashbench::cli {

// The width help text keeps to: COLUMNS where set (as the shell exports it), else the terminal's
// on stdout, else 100; held within [60, 200]. [columns]
size_t help_width();

// `text` broken at spaces into lines of at most `width` characters (a word longer than that gets a
// line of its own); its own line breaks are kept.
std::vector<std::string> wrap_words(const std::string& text, size_t width);

// A CLI11 formatter that wraps option descriptions to help_width(); set on the app before the
// subcommands are made, they inherit it.
std::shared_ptr<CLI::Formatter> wrapping_formatter();

}  // namespace flashbench::cli
