#pragma once
// Subcommands of the flashbench executable. Each register_* adds its subcommand and options to the
// app and stores what to run; run_selected runs the one the user chose and returns the exit code.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "flashbench/core/problem.hpp"

namespace flashbench::cli {

// The workload options `model` and `fit` share with `run` (one value each there): --kv-heads,
// --seq-k, --expand-kv, --dropout.
void add_workload_options(CLI::App* subcommand, Problem& problem);

// --seed: a decimal 64-bit seed; one past 64 bits, negative or not a number is a usage error.
CLI::Option* add_seed_option(CLI::App* subcommand, uint64_t& target, const std::string& help);

// --isa NAME (and FLASHBENCH_ISA): the instruction set the CPU kernels run on (cpu/isa.hpp), set
// as it is parsed; a name this CPU cannot run is a usage error.
CLI::Option* add_isa_option(CLI::App* subcommand);

// `--help` in sections: each named option (by its first long name, "--seq") goes under its
// section's title, in the order given; an option not named stays under "Options".
using OptionSections = std::vector<std::pair<std::string, std::vector<std::string>>>;
void group_options(CLI::App* subcommand, const OptionSections& sections);

// A subcommand's action: receives argv (recorded in JSON meta) and returns the exit code.
using Action = std::function<int(const std::vector<std::string>& argv)>;
void set_action(CLI::App* subcommand, Action action);
int run_selected(CLI::App& app, int argc, char** argv);

void register_run(CLI::App& app);
void register_grad(CLI::App& app);
void register_info(CLI::App& app);
void register_model(CLI::App& app);  // model.cpp
void register_fit(CLI::App& app);    // fit.cpp
void register_compare(CLI::App& app);  // compare.cpp
void register_merge(CLI::App& app);    // merge.cpp
void register_completion(CLI::App& app);  // completion.cpp: after every other subcommand, whose options it lists

// The examples at the foot of `flashbench --help` (examples.cpp): real commands, one a line.
std::string top_level_examples();

}  // namespace flashbench::cli
