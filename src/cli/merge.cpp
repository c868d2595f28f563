// flashbench merge: the results of a sweep's shards (a job array's tasks), or of several runs, and
// peers' files into one JSON document; it names what is missing and the array indices to rerun.
#include <fmt/format.h>

#include "commands.hpp"
#include "flashbench/core/errors.hpp"
#include "flashbench/core/units.hpp"
#include "flashbench/report/files.hpp"
#include "flashbench/report/results_file.hpp"
#include "flashbench/report/sweep_results.hpp"

namespace flashbench::cli {

namespace {

struct MergeFlags {
  std::vector<std::string> files;
  std::vector<std::string> peers;
  std::string out;
  bool rounds = false;
};

int run_merge(const MergeFlags& flags) {
  std::vector<MergeInput> inputs;
  for (const std::string& path : flags.files) inputs.push_back({path, read_results_file(path), false});
  for (const std::string& path : flags.peers) inputs.push_back({path, read_results_file(path), true});
  const MergeResult merged = flags.rounds ? merge_runs_as_rounds(inputs) : merge_results(inputs);
  for (const std::string& warning : merged.warnings) fmt::print(stderr, "warning: {}\n", warning);
  write_file_atomically(flags.out, merged.document.dump(2) + "\n");
  fmt::print("{} from {} -> {}\n", counted(int64_t(merged.rows), "row"), counted(int64_t(inputs.size()), "file"),
             flags.out);
  if (merged.missing.empty()) return 0;
  fmt::print("{} missing:\n", counted(int64_t(merged.missing.size()), "configuration"));
  for (const MissingConfiguration& missing : merged.missing)
    if (merged.sharded) fmt::print("  shard {}: {}\n", missing.shard, missing.description);
    else fmt::print("  {}\n", missing.description);
  if (merged.sharded) fmt::print("rerun them: --array={}\n", array_indices(merged.shards_to_rerun()));
  return 1;
}

}  // namespace

void register_merge(CLI::App& app) {
  auto flags = std::make_shared<MergeFlags>();
  CLI::App* sub = app.add_subcommand("merge", "Merge the results of a sweep's shards (or of several runs) into one file");
  // One line a paragraph: --help wraps them to the terminal.
  sub->footer(
      "Rows of one sweep's shards come out in the sweep's order, as one process writes them. Refused: shards of "
      "different sweeps, a shard given twice, a row present twice, differing schema versions. Mixed devices, "
      "drivers or git revisions are warnings. Missing configurations are listed with the --array= indices to "
      "rerun; the file is written and the exit code is 1 then.\n"
      "--rounds: the files are runs of the same rows one after another (two builds alternated, say); each "
      "row's timings become their rounds, as run --rounds records them, so that compare judges them together.\n"
      "Example: flashbench merge results/shard-*.jsonl --out sweep.json");
  sub->add_option("files", flags->files, "flashbench results files (.json, .jsonl): a sweep's shards or whole runs")
      ->check(CLI::ExistingFile);
  // One file per --peer, so that results files after it stay flashbench's own.
  sub->add_option("--peer", flags->peers, "A peer's results file (scripts/peers), repeatable: its rows follow, its meta goes to meta.peers")
      ->check(CLI::ExistingFile)
      ->allow_extra_args(false);
  sub->add_option("--out,-o", flags->out, "The merged JSON document (written atomically)")->required();
  sub->add_flag("--rounds", flags->rounds,
                "The files are runs of the same rows: merge each row's timings as rounds of one run (no --peer)");
  set_action(sub, [flags](const std::vector<std::string>&) { return run_merge(*flags); });
}

}  // namespace flashbench::cli
