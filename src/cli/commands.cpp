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

void add_workload_options(CLI::App* sub, Problem& problem) {
  sub->add_option("--kv-heads", problem.kv_heads, "G, key/value heads dividing H (default H; 1 = MQA)");
  sub->add_option("--seq-k", problem.seq_kv, "N_k, key/value rows (default N)");
  sub->add_flag("--expand-kv", problem.expand_kv, "K and V repeated to H heads (naive GQA)");
  sub->add_option("--dropout", problem.dropout, "Dropout probability p on the attention weights (default 0)");
}

int run_selected(CLI::App& app, int argc, char** argv) {
  const std::vector<std::string> arguments(argv, argv + argc);
  for (CLI::App* sub : app.get_subcommands()) {
    auto found = actions().find(sub);
    if (found != actions().end()) return found->second(arguments);
  }
  return 2;
}

}  // namespace flashbench::cli
