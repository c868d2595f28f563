#include "cli/commands.hpp"

#include <map>

namespace flashbench::cli {

namespace {
std::map<const CLI::App*, Action>& actions() {
  static std::map<const CLI::App*, Action> registered;
  return registered;
}
}  // namespace

void set_action(CLI::App* subcommand, Action action) { actions()[subcommand] = std::move(action); }

int run_selected(CLI::App& app, int argc, char** argv) {
  const std::vector<std::string> arguments(argv, argv + argc);
  for (CLI::App* sub : app.get_subcommands()) {
    auto found = actions().find(sub);
    if (found != actions().end()) return found->second(arguments);
  }
  return 2;
}

}  // namespace flashbench::cli
