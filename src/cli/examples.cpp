// The examples at the foot of `flashbench --help`. tests/cli/help_examples_test.py runs each of them
// (a `run` with --dry-run appended), so every one stays a command that works.
#include "commands.hpp"

namespace flashbench::cli {

std::string top_level_examples() {
  // Each comment above its command, so that a line keeps to 100 columns and copies whole.
  return "Examples:\n"
         "  # all four variants, one configuration, a table\n"
         "  flashbench run --seq 4096\n"
         "  # B*N = 16K tokens over N = 1K..16K, causal: the plan, modelled peaks and time, nothing run\n"
         "  flashbench run --seq 1024:16384:x2 --tokens 16384 --causal --dry-run\n"
         "  # the table, and the same rows as JSON and Markdown files beside it\n"
         "  flashbench run --seq 512:4096:x2 --export-json cpu.json --export-md cpu.md\n"
         "  # one warm-up and one sample, for nsys/ncu (NVTX ranges on CUDA)\n"
         "  flashbench run --seq 2048 --variant v2 --profile\n"
         "  # the analytic memory model, no kernels run\n"
         "  flashbench model --seq 32768 --heads 32 --dtype fp16\n"
         "  # the longest N per variant within a memory budget\n"
         "  flashbench fit --budget 16GiB --heads 32 --head-dim 128 --dtype fp16\n"
         "  # build, CPU, GPU, backends, implementations\n"
         "  flashbench info\n"
         "  # shell completion (also zsh, fish)\n"
         "  source <(flashbench completion bash)\n"
         "Each command's own --help lists its options.";
}

}  // namespace flashbench::cli
