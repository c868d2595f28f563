// Replays the fuzzers' corpora (tests/fuzz/corpus/<target>/: the seeds, and every input that once
// crashed a parser) through the same parsers in every build, the sanitizer build of CI included:
// each either parses or throws the one-line error the command line prints, nothing else.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "flashbench/core/errors.hpp"
#include "flashbench/core/npy.hpp"
#include "flashbench/core/sweep.hpp"
#include "flashbench/report/compare.hpp"
#include "flashbench/report/results_file.hpp"

namespace flashbench {
namespace {

std::vector<std::pair<std::string, std::string>> corpus(const std::string& target) {
  std::vector<std::pair<std::string, std::string>> inputs;
  const std::filesystem::path folder = std::filesystem::path(FLASHBENCH_SOURCE_DIR) / "tests/fuzz/corpus" / target;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    inputs.emplace_back(entry.path().filename().string(), bytes.str());
  }
  return inputs;
}

TEST(FuzzCorpus, SweepFilesParseOrAreUsageErrors) {
  const auto inputs = corpus("sweep");
  ASSERT_GE(inputs.size(), 4u);
  int parsed = 0;
  for (const auto& [name, text] : inputs) {
    try {
      const SweepSpec spec = parse_sweep_json(text, name);
      validate(spec.sampling);
      EXPECT_FALSE(expand(spec).empty()) << name;
      ++parsed;
    } catch (const UsageError& error) {
      EXPECT_EQ(std::string(error.what()).find('\n'), std::string::npos) << name << ": " << error.what();
    }
  }
  EXPECT_GE(parsed, 4);  // the configs/ seeds are valid sweeps
}

TEST(FuzzCorpus, NpyFilesParseOrAreUsageErrors) {
  const auto inputs = corpus("npy");
  ASSERT_GE(inputs.size(), 4u);
  int parsed = 0;
  for (const auto& [name, bytes] : inputs) {
    try {
      const NpyArray array = parse_npy(bytes, name);
      int64_t count = 1;
      for (int64_t extent : array.shape) count *= extent;
      EXPECT_EQ(int64_t(array.data.size()), count) << name;
      ++parsed;
    } catch (const UsageError& error) {
      EXPECT_EQ(std::string(error.what()).find('\n'), std::string::npos) << name << ": " << error.what();
    }
  }
  EXPECT_GE(parsed, 3);
}

TEST(FuzzCorpus, ResultFilesParseOrAreErrors) {
  const auto inputs = corpus("results");
  ASSERT_GE(inputs.size(), 2u);
  int parsed = 0;
  for (const auto& [name, text] : inputs) {
    for (bool lines : {false, true}) {
      try {
        const ResultsFile file = parse_results(text, lines, name);
        const Comparison comparison = compare_runs(file.rows, file.rows, CompareOptions{});
        (void)comparison.table();
        (void)comparison.to_json().dump();
        ++parsed;
      } catch (const UsageError& error) {
        EXPECT_EQ(std::string(error.what()).find('\n'), std::string::npos) << name << ": " << error.what();
      } catch (const RuntimeFailure& error) {
        EXPECT_EQ(std::string(error.what()).find('\n'), std::string::npos) << name << ": " << error.what();
      }
    }
  }
  EXPECT_GE(parsed, 2);
}

}  // namespace
}  // namespace flashbench
