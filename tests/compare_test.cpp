// compare: the SAME/FASTER/SLOWER rule, row matching, the baseline mode, and the command on a
// real results file (tests/data/cpu-small.json) against itself and against a 2x slower copy.
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>

#include <gtest/gtest.h>

#include "flashbench/compare.hpp"
#include "flashbench/report.hpp"
#include "report_rows.hpp"

namespace flashbench {
namespace {

using testing::four_variant_rows;

TimingSummary scaled(const TimingSummary& t, double factor) {
  std::vector<double> samples = t.samples_ms;
  for (double& x : samples) x *= factor;
  return summarize(samples, t.noise_target);
}

const std::string kFixture = std::string(FLASHBENCH_SOURCE_DIR) + "/tests/data/cpu-small.json";

TEST(ComparePhase, SameFasterSlower) {
  const TimingSummary a = summarize({10.0, 10.1, 9.9, 10.05, 9.95, 10.0, 10.02}, 0.02);
  EXPECT_EQ(compare_phase(a, a, {}).verdict, Verdict::same);
  EXPECT_DOUBLE_EQ(*compare_phase(a, a, {}).p_value, 1.0);
  const PhaseComparison slower = compare_phase(a, scaled(a, 2.0), {});
  EXPECT_EQ(slower.verdict, Verdict::slower);
  EXPECT_DOUBLE_EQ(slower.ratio, 2.0);
  EXPECT_LT(*slower.p_value, 0.01);
  EXPECT_EQ(compare_phase(a, scaled(a, 0.5), {}).verdict, Verdict::faster);
}

TEST(ComparePhase, SignificantButBelowThresholdIsSame) {
  const TimingSummary a = summarize({10.0, 10.01, 9.99, 10.0, 10.01, 9.99, 10.0}, 0.02);
  const PhaseComparison small = compare_phase(a, scaled(a, 1.03), {});
  EXPECT_LT(*small.p_value, 0.05);  // separated samples: the test sees it
  EXPECT_EQ(small.verdict, Verdict::same);  // 3% is below the 5% threshold
  CompareOptions tight;
  tight.threshold = 0.01;
  EXPECT_EQ(compare_phase(a, scaled(a, 1.03), tight).verdict, Verdict::slower);
}

TEST(ComparePhase, OverlappingSamplesAreSameEvenWithDifferentMedians) {
  // Medians 10 and 11 (10% apart) but the samples interleave: p is large.
  const TimingSummary a = summarize({6, 8, 10, 12, 14}, 0.02);
  const TimingSummary b = summarize({7, 9, 11, 13, 15}, 0.02);
  const PhaseComparison phase = compare_phase(a, b, {});
  EXPECT_GT(*phase.p_value, 0.5);
  EXPECT_EQ(phase.verdict, Verdict::same);
}

TEST(ComparePhase, WithoutSamplesOnlyTheThresholdDecides) {
  TimingSummary a, b;
  a.median_ms = 1.0;
  b.median_ms = 1.2;
  const PhaseComparison phase = compare_phase(a, b, {});
  EXPECT_FALSE(phase.p_value.has_value());
  EXPECT_EQ(phase.verdict, Verdict::slower);
}

TEST(CompareRuns, MatchesByBackendVariantProblemAndListsTheRest) {
  std::vector<Row> a = four_variant_rows();
  std::vector<Row> b = four_variant_rows();
  b[2].bwd = scaled(b[2].bwd, 2.0);        // v2 backward twice as slow
  b[3].problem.seq = 512;                  // checkpoint at another N: unmatched both ways
  const Comparison c = compare_runs(a, b, {});
  ASSERT_EQ(c.pairs.size(), 3u);
  EXPECT_EQ(c.pairs[0].verdict, Verdict::same);
  EXPECT_FALSE(c.pairs[1].timed);  // v1 was oom on both sides
  EXPECT_EQ(c.pairs[2].verdict, Verdict::slower);
  EXPECT_EQ(c.pairs[2].fwd.verdict, Verdict::same);
  ASSERT_EQ(c.only_a.size(), 1u);
  ASSERT_EQ(c.only_b.size(), 1u);
  EXPECT_EQ(c.only_b[0].problem.seq, 512);
  EXPECT_TRUE(c.any_slower());
  const std::string table = c.table();
  EXPECT_NE(table.find("SLOWER (fwd SAME, bwd SLOWER)"), std::string::npos) << table;
  EXPECT_NE(table.find("oom -> oom"), std::string::npos) << table;
  EXPECT_NE(table.find("only in B: cpu checkpoint B=1 H=2 N=512"), std::string::npos) << table;
}

TEST(CompareToBaseline, EveryVariantAgainstStandard) {
  const Comparison c = compare_to_baseline(four_variant_rows(), "standard", {});
  ASSERT_EQ(c.pairs.size(), 3u);
  for (const RowComparison& pair : c.pairs) EXPECT_EQ(pair.a.variant, Variant::standard);
  // v2: 1 + 3 ms against 2 + 4 ms; its fwd is 2x faster, its bwd 1.33x faster.
  EXPECT_EQ(c.pairs[1].b.variant, Variant::v2);
  EXPECT_EQ(c.pairs[1].verdict, Verdict::faster);
  EXPECT_DOUBLE_EQ(c.pairs[1].peak_ratio, 0.3);
  // checkpoint: fwd the same, bwd 2x slower.
  EXPECT_EQ(c.pairs[2].verdict, Verdict::slower);
}

struct CommandResult {
  int exit_code;
  std::string output;
};

CommandResult run_flashbench(const std::string& arguments) {
  const std::string command = std::string(FLASHBENCH_BINARY) + " " + arguments + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  CommandResult result{-1, ""};
  if (!pipe) return result;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) result.output.append(buffer, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

size_t count(const std::string& text, const std::string& word) {
  size_t found = 0;
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) ++found;
  return found;
}

TEST(CompareCommand, AFileWithItselfIsSameEverywhere) {
  const ResultsFile file = read_results_file(kFixture);
  size_t timed = 0;
  for (const Row& row : file.rows) timed += row.status == Status::ok;
  const CommandResult result = run_flashbench("compare --fail-on-regression " + kFixture + " " + kFixture);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(count(result.output, " SAME"), timed) << result.output;
  EXPECT_EQ(count(result.output, "SLOWER "), 0u);  // the legend line says "SLOWER/FASTER:"
  EXPECT_EQ(count(result.output, "FASTER "), 0u);
}

TEST(CompareCommand, ATwiceSlowerCopyIsSlowerAndFailsOnRegression) {
  ResultsFile file = read_results_file(kFixture);
  for (Row& row : file.rows) {
    row.fwd = scaled(row.fwd, 2.0);
    row.bwd = scaled(row.bwd, 2.0);
  }
  std::ostringstream slower;
  auto reporter = make_reporter("json", slower, false);
  reporter->begin(nlohmann::ordered_json(file.meta));
  for (const Row& row : file.rows) reporter->add(row);
  reporter->finish();
  const std::string path = (std::filesystem::temp_directory_path() / "flashbench-compare-slower.json").string();
  write_file_atomically(path, slower.str());

  // The fixture was measured on a quiet 16-core machine with 9 to 540 samples per phase: a copy with
  // every sample doubled is separated enough for the U test on every ok row.
  size_t timed = 0;
  for (const Row& row : file.rows) timed += row.status == Status::ok;
  const CommandResult failing = run_flashbench("compare --fail-on-regression " + kFixture + " " + path);
  const CommandResult plain = run_flashbench("compare " + kFixture + " " + path);
  const CommandResult as_json = run_flashbench("compare --format json " + kFixture + " " + path);
  std::filesystem::remove(path);
  EXPECT_EQ(failing.exit_code, 1) << failing.output;
  EXPECT_EQ(count(failing.output, " SLOWER\n"), timed) << failing.output;
  EXPECT_EQ(count(failing.output, "FASTER"), count(failing.output, "SLOWER/FASTER")) << failing.output;
  EXPECT_EQ(plain.exit_code, 0);
  const nlohmann::json document = nlohmann::json::parse(as_json.output);
  EXPECT_EQ(document["pairs"][0]["verdict"], "SLOWER");
  EXPECT_DOUBLE_EQ(document["pairs"][0]["fwd"]["ratio"].get<double>(), 2.0);
}

TEST(CompareCommand, BaselineModeAndUsageErrors) {
  const CommandResult baseline = run_flashbench("compare --baseline standard " + kFixture);
  EXPECT_EQ(baseline.exit_code, 0) << baseline.output;
  EXPECT_NE(baseline.output.find("A = standard"), std::string::npos);
  EXPECT_EQ(run_flashbench("compare " + kFixture).exit_code, 2);
  EXPECT_EQ(run_flashbench("compare --baseline nonsense " + kFixture).exit_code, 2);
  EXPECT_EQ(run_flashbench("compare " + kFixture + " /nonexistent.json").exit_code, 2);
}

}  // namespace
}  // namespace flashbench
