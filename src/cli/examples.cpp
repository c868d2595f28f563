// The examples at the foot of `flashbench --help`. tests/help_examples_test.py runs each of them
// (a `run` with --dry-run appended), so every one stays a command that works.
#include "cli/commands.hpp"

namespace flashbench::cli {

std::string top_level_examples() {
  return "Examples:\n"
         "  flashbench run --seq 4096                           # all four variants, one configuration, a table\n"
         "  flashbench run --seq 1024:16384:x2 --tokens 16384 --causal --dry-run   # B*N = 16K: the plan, "
         "modelled peaks and time\n"
         "  flashbench run --seq 512:4096:x2 --export-json cpu.json --export-md cpu.md   # the table, and files "
         "beside it\n"
         "  flashbench run --seq 2048 --variant v2 --profile    # one warm-up, one sample: for nsys/ncu (NVTX on "
         "CUDA)\n"
         "  flashbench model --seq 32768 --heads 32 --dtype fp16   # the analytic model, no kernels run\n"
         "  flashbench fit --budget 16GiB --heads 32 --head-dim 128 --dtype fp16   # the longest N per variant\n"
         "  flashbench info                                     # build, CPU, GPU, backends, implementations\n"
         "  source <(flashbench completion bash)                # completion (also zsh, fish)\n"
         "Each command's own --help lists its options.";
}

}  // namespace flashbench::cli
