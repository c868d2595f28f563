#include "help_format.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <sstream>
#include <string_view>

namespace flashbench::cli {

namespace {

constexpr size_t kDefaultWidth = 100, kMinWidth = 60, kMaxWidth = 200;

class WrappingFormatter final : public CLI::Formatter {
 public:
  // A section's title and options. CLI11 puts a blank line both after a section and before the next
  // one's title: here only the first section ("Options", which holds --help) opens with one.
  std::string make_group(std::string group, bool is_positional, std::vector<const CLI::Option*> options) const override {
    std::string out = (group == get_label("Options") ? "\n" : "") + group + ":\n";
    for (const CLI::Option* option : options) out += make_option(option, is_positional);
    return out;
  }

  // A subcommand's line in the top-level help, its description wrapped like an option's.
  std::string make_subcommand(const CLI::App* sub) const override {
    return wrapped("  " + sub->get_display_name(), sub->get_description());
  }

  // The command's description and footer, each line wrapped to the width.
  std::string make_description(const CLI::App* app) const override {
    return joined(wrap_words(CLI::Formatter::make_description(app), help_width())) + "\n";
  }
  std::string make_footer(const CLI::App* app) const override {
    return app->get_footer().empty() ? std::string() : joined(wrap_words(app->get_footer(), help_width())) + "\n";
  }

  std::string make_option(const CLI::Option* option, bool is_positional) const override {
    return wrapped("  " + make_option_name(option, is_positional) + make_option_opts(option), make_option_desc(option));
  }

 private:
  static std::string joined(const std::vector<std::string>& lines) {
    std::string out;
    for (size_t i = 0; i < lines.size(); ++i) out += (i ? "\n" : "") + lines[i];
    return out;
  }

  // `left` in the first column, `description` wrapped in the second.
  std::string wrapped(const std::string& left, const std::string& description) const {
    if (description.empty()) return left + "\n";
    const size_t column = get_column_width();
    const std::string indent(column, ' ');
    // The left column too wide: the description starts on the next line, under its column.
    std::string out = left.size() < column ? left + std::string(column - left.size(), ' ') : left + "\n" + indent;
    const std::vector<std::string> lines = wrap_words(description, help_width() - std::min(help_width() / 2, column));
    for (size_t i = 0; i < lines.size(); ++i) out += (i ? "\n" + indent : "") + lines[i];
    return out + "\n";
  }
};

}  // namespace

size_t help_width() {
  size_t width = kDefaultWidth;
  if (const char* columns = std::getenv("COLUMNS")) {
    const std::string_view text(columns);
    size_t value = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error == std::errc() && end == text.data() + text.size() && value > 0) width = value;
  } else if (winsize size{}; isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) {
    width = size.ws_col;
  }
  return std::clamp(width, kMinWidth, kMaxWidth);
}

std::vector<std::string> wrap_words(const std::string& text, size_t width) {
  std::vector<std::string> lines;
  std::istringstream paragraphs(text);
  for (std::string paragraph; std::getline(paragraphs, paragraph);) {
    // A line's own indentation stays, on its continuation lines too (an example under "Examples:").
    const std::string indent = paragraph.substr(0, paragraph.find_first_not_of(' ') == std::string::npos
                                                       ? 0 : paragraph.find_first_not_of(' '));
    std::string line;
    std::istringstream words(paragraph);
    for (std::string word; words >> word;) {
      if (!line.empty() && line.size() + 1 + word.size() > width) {
        lines.push_back(line);
        line.clear();
      }
      line += (line.empty() ? indent : " ") + word;
    }
    lines.push_back(line);
  }
  return lines;
}

std::shared_ptr<CLI::Formatter> wrapping_formatter() { return std::make_shared<WrappingFormatter>(); }

}  // namespace flashbench::cli
