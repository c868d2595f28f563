#include "commands.hpp"

#include <algorithm>
#include <charconv>
#include <limits>
#include <map>

#include <fmt/format.h>

#include "flashbench/core/errors.hpp"
#include "flashbench/harness/registry.hpp"

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

CLI::Option* add_seed_option(CLI::App* sub, uint64_t& target, const std::string& help) {
  // CLI11's own conversion saturates a number past 64 bits to the largest one: a different seed
  // than the one given, silently. A seed is read whole, in decimal, or refused.
  CLI::Option* option = sub->add_option_function<std::string>("--seed", [&target](const std::string& text) {
    uint64_t value = 0;
    const char* end = text.data() + text.size();
    const auto [stop, error] = std::from_chars(text.data(), end, value);
    if (error == std::errc::result_out_of_range)
      throw UsageError(fmt::format("--seed {} is past the largest seed, {}", text, std::numeric_limits<uint64_t>::max()));
    if (text.empty() || error != std::errc() || stop != end)
      throw UsageError(fmt::format("--seed must be a whole number from 0 to {} (got '{}')",
                                   std::numeric_limits<uint64_t>::max(), text));
    target = value;
  }, help);
  return option->default_str(std::to_string(target));
}

void group_options(CLI::App* sub, const OptionSections& sections) {
  for (CLI::Option* option : sub->get_options({})) {
    if (option->get_lnames().empty()) continue;
    const std::string name = "--" + option->get_lnames().front();
    for (const auto& [title, names] : sections)
      if (std::find(names.begin(), names.end(), name) != names.end()) option->group(title);
  }
}

CLI::Option* add_isa_option(CLI::App* sub) {
  const DeviceEntry* device = registry().device_with_isa();
  if (!device) return nullptr;
  // Set as it is parsed: the model's workspace sizes follow the ISA's vector width too.
  return sub->add_option_function<std::string>("--isa", [device](const std::string& name) {
    device->choose_isa(name, "--isa (or FLASHBENCH_ISA)");
  }, device->isa_help())->envname("FLASHBENCH_ISA");
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
