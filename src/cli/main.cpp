// flashbench: benchmark and memory profiler for the backward pass of attention.
// Each subcommand lives in its own file and registers itself here.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <exception>
#include <new>
#include <string>

#include "cli/commands.hpp"
#include "flashbench/config.hpp"
#include "flashbench/errors.hpp"

int main(int argc, char** argv) {
  using namespace flashbench;
  CLI::App app{"flashbench: time and memory of the attention backward pass (standard, v1, v2, checkpoint)"};
  app.set_version_flag("--version", fmt::format("flashbench {} ({})", build::kVersion, build::kGitRevision));
  app.require_subcommand(1);
  app.footer(cli::top_level_examples());
  cli::register_run(app);
  cli::register_grad(app);
  cli::register_info(app);
  cli::register_model(app);
  cli::register_fit(app);
  cli::register_compare(app);
  cli::register_merge(app);
  cli::register_completion(app);
  try {
    // CLI11 would only say "A subcommand is required"; name the word it did not know.
    std::string known;
    bool is_known = false;
    for (const CLI::App* sub : app.get_subcommands({})) {
      known += (known.empty() ? "" : ", ") + sub->get_name();
      is_known |= argc > 1 && sub->get_name() == argv[1];
    }
    if (argc > 1 && argv[1][0] != '-' && !is_known) {
      throw UsageError(fmt::format("unknown command '{}' (expected one of: {})", argv[1], known));
    }
    app.parse(argc, argv);
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
