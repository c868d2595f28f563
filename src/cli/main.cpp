// flashbench: benchmark and memory profiler for the backward pass of attention.
// Each subcommand lives in its own file and registers itself here.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <exception>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "commands.hpp"
#include "help_format.hpp"
#include "flashbench/core/errors.hpp"
#include "flashbench/core/nearest.hpp"
#include "flashbench/core/variant.hpp"
#include "flashbench/report/config.hpp"

namespace {

// The flags `command` takes, spelled as on a command line ("--seq", "-h").
std::vector<std::string> flag_names(const CLI::App& command) {
  std::vector<std::string> names;
  for (const CLI::Option* option : command.get_options()) {
    for (const std::string& name : option->get_lnames()) names.push_back("--" + name);
    for (const std::string& name : option->get_snames()) names.push_back("-" + name);
  }
  return names;
}

// The first word of argv[first..] that is written as a flag ("--seqq", "--seqq=4096", "-x"; not a
// negative number) and that `command` does not take; words after "--" are values.
std::optional<std::string> unknown_flag(const CLI::App& command, int first, int argc, char** argv) {
  const std::vector<std::string> known = flag_names(command);
  for (int i = first; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--") break;
    const size_t dashes = word.rfind("--", 0) == 0 ? 2 : 1;
    if (word.size() <= dashes || word[0] != '-' || !std::isalpha(static_cast<unsigned char>(word[dashes]))) continue;
    const std::string name = word.substr(0, word.find('='));
    if (std::find(known.begin(), known.end(), name) == known.end()) return name;
  }
  return std::nullopt;
}

// "unknown option --seqq; did you mean --seq?", or where nothing is near, where the flags are listed.
std::string unknown_flag_message(const std::string& flag, const CLI::App& command, const std::string& command_line) {
  if (const std::optional<std::string> near = flashbench::nearest_name(flag, flag_names(command)))
    return fmt::format("unknown option {}; did you mean {}?", flag, *near);
  return fmt::format("unknown option {} ({} --help lists the options)", flag, command_line);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace flashbench;
  CLI::App app{"flashbench: time and memory of the attention backward pass (" + variant_names() + ")"};
  app.set_version_flag("--version", fmt::format("flashbench {} ({})", build::kVersion, build::kGitRevision));
  app.require_subcommand(1);
  app.formatter(cli::wrapping_formatter());  // before the subcommands, which take the app's formatter
  cli::register_run(app);
  cli::register_grad(app);
  cli::register_info(app);
  cli::register_model(app);
  cli::register_fit(app);
  cli::register_compare(app);
  cli::register_merge(app);
  cli::register_completion(app);
  // After the subcommands: CLI11 hands the app's footer to each subcommand made after it, and
  // `grad --help` listed run's examples.
  app.footer(cli::top_level_examples());
  try {
    // CLI11 would only say "A subcommand is required"; name the word it did not know.
    std::vector<std::string> commands;
    for (const CLI::App* sub : app.get_subcommands({})) commands.push_back(sub->get_name());
    const bool is_known = argc > 1 && std::find(commands.begin(), commands.end(), argv[1]) != commands.end();
    if (argc > 1 && argv[1][0] != '-' && !is_known) {
      if (const std::optional<std::string> near = nearest_name(argv[1], commands))
        throw UsageError(fmt::format("unknown command '{}'; did you mean {}?", argv[1], *near));
      throw UsageError(fmt::format("unknown command '{}' (expected one of: {})", argv[1], fmt::join(commands, ", ")));
    }
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      // CLI11 says "The following arguments were not expected: 4096 --seqq"; name the flag it did not
      // know and the one that was probably meant.
      if (e.get_exit_code() == 0) throw;  // --help, --version
      const CLI::App& command = is_known ? *app.get_subcommand(argv[1]) : app;
      const std::string command_line = is_known ? fmt::format("flashbench {}", argv[1]) : "flashbench";
      if (const std::optional<std::string> flag = unknown_flag(command, is_known ? 2 : 1, argc, argv))
        throw UsageError(unknown_flag_message(*flag, command, command_line));
      throw;
    }
    return cli::run_selected(app, argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "flashbench: %s\n", e.what());
    return 2;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "flashbench: %s\n", e.what());
    return 2;
  } catch (const OutOfMemory& e) {
    std::fprintf(stderr, "flashbench: out of memory: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "flashbench: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flashbench: %s\n", e.what());
    return 1;
  }
}
