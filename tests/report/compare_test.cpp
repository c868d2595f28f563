// compare: the SAME/FASTER/SLOWER/UNSURE rule over samples and over rounds, the load bound, row
// matching (dtype-blind for what is left), differences between runs, geometric means, the baseline
// mode, and the command on a real results file (tests/data/cpu-small.json) against itself, against
// a 2x slower copy and against a copy run with other threads.
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>

#include <gtest/gtest.h>

#include "flashbench/report/compare.hpp"
#include "flashbench/report/files.hpp"
#include "flashbench/report/reporter.hpp"
#include "flashbench/report/results_file.hpp"
#include "support/report_rows.hpp"

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

// Round medians around `center` with a relative spread of ±`spread` (one per round).
TimingSummary rounds_around(double center, double spread, int rounds) {
  std::vector<TimingSummary> summaries;
  for (int r = 0; r < rounds; ++r) {
    const double median = center * (1.0 + spread * (double(r % 3) - 1.0) + 0.001 * r);
    summaries.push_back(summarize({median * 0.99, median, median * 1.01}, 0.02));
  }
  return merge_rounds(summaries, 0.02);
}

TEST(MergeRounds, KeepsEverySampleAndEachRoundsMedian) {
  const TimingSummary merged = merge_rounds({summarize({1, 2, 3}, 0.02), summarize({10, 20, 30, 40}, 0.02)}, 0.02);
  EXPECT_EQ(merged.samples_ms, (std::vector<double>{1, 2, 3, 10, 20, 30, 40}));
  EXPECT_EQ(merged.round_medians_ms, (std::vector<double>{2, 25}));
  EXPECT_DOUBLE_EQ(merged.median_ms, 10);
}

TEST(ComparePhase, TwoRoundsRaiseTheBarToTheirSpread) {
  // Two runs a side (merge --rounds): too few for a test over their medians, so the samples decide,
  // but the bar is the rounds' spread where it is wider than the threshold.
  CompareOptions lenient;
  lenient.alpha = 0.999;  // the bar alone decides
  const TimingSummary a = rounds_around(10.0, 0.12, 2);  // round medians 8.8 and 10.01: a spread of 9 %
  const TimingSummary b = rounds_around(10.6, 0.12, 2);
  const PhaseComparison phase = compare_phase(a, b, lenient);
  EXPECT_EQ(phase.basis, PhaseComparison::Basis::samples);
  EXPECT_EQ(phase.rounds, 2u);
  EXPECT_GT(phase.round_noise, 0.08);
  EXPECT_GT(phase.ratio, 1.05);
  EXPECT_EQ(phase.verdict, Verdict::same);
  // The same medians from single runs: the bar is the threshold, and 6 % apart is SLOWER.
  const PhaseComparison single =
      compare_phase(summarize(a.samples_ms, 0.02), summarize(b.samples_ms, 0.02), lenient);
  EXPECT_EQ(single.rounds, 1u);
  EXPECT_EQ(single.round_noise, 0.0);
  EXPECT_EQ(single.verdict, Verdict::slower);
}

TEST(ComparePhase, RoundsAreTheEvidenceWhenBothSidesHaveEnough) {
  // Each round's samples are tight (±1%), so a U test over all samples finds 3% apart "significant";
  // the rounds themselves spread ±8%, and over them 3% is noise.
  const TimingSummary a = rounds_around(10.0, 0.08, 9);
  const TimingSummary b = rounds_around(10.3, 0.08, 9);
  const PhaseComparison phase = compare_phase(a, b, {});
  EXPECT_EQ(phase.basis, PhaseComparison::Basis::rounds);
  EXPECT_EQ(phase.count_a, 9u);
  EXPECT_GT(phase.round_noise, 0.05);
  EXPECT_EQ(phase.verdict, Verdict::same);
  // 30% slower is beyond the rounds' spread and every round of B is slower: SLOWER.
  const PhaseComparison slower = compare_phase(a, rounds_around(13.0, 0.08, 9), {});
  EXPECT_EQ(slower.basis, PhaseComparison::Basis::rounds);
  EXPECT_LT(*slower.p_value, 0.001);
  EXPECT_EQ(slower.verdict, Verdict::slower);
  // The bar is the rounds' spread where it is larger than the threshold. With alpha near 1 the test
  // lets everything through, so that the bar alone decides: 6% apart is beyond 5%, but within rounds
  // that spread ±8% (stddev/mean about 0.07) it is SAME; with rounds that spread ±1% it is SLOWER.
  CompareOptions lenient;
  lenient.alpha = 0.999;
  const PhaseComparison within = compare_phase(a, rounds_around(10.6, 0.08, 9), lenient);
  EXPECT_LT(*within.p_value, lenient.alpha);
  EXPECT_GT(within.ratio, 1.05);
  EXPECT_EQ(within.verdict, Verdict::same) << within.round_noise;
  EXPECT_EQ(compare_phase(rounds_around(10.0, 0.01, 9), rounds_around(10.6, 0.01, 9), lenient).verdict, Verdict::slower);
  // Three rounds a side cannot reach p < 0.05: the samples decide instead.
  EXPECT_EQ(compare_phase(rounds_around(10, 0.0, 3), rounds_around(13, 0.0, 3), {}).basis, PhaseComparison::Basis::samples);
}

TEST(HostLoad, SlowdownBoundFromTheLoadOtherProcessesPut) {
  HostLoad load;
  EXPECT_DOUBLE_EQ(load.slowdown_bound(2), 1.0);  // not recorded
  load.cpus = 2;
  load.start = 0.5;
  load.end = 2.4;
  EXPECT_DOUBLE_EQ(load.slowdown_bound(2), 1.25);  // 0.5 others + 2 own threads on 2 CPUs
  load.start = 5.5;
  EXPECT_DOUBLE_EQ(load.slowdown_bound(2), 3.75);  // (5.5 + 2) / 2
  load.start = 0.0;
  load.end = 7.0;  // after the run: 7 less our 2 threads
  EXPECT_DOUBLE_EQ(load.slowdown_bound(2), 3.5);
  EXPECT_DOUBLE_EQ(load.slowdown_bound(0), 3.5);  // a GPU row: its one host thread
  load.end = 1.0;
  EXPECT_DOUBLE_EQ(load.slowdown_bound(1), 1.0);  // room to spare
  const HostLoad from_meta = host_load(nlohmann::json::parse(
      R"({"environment": {"load_average_start": {"1m": 6.0, "5m": 1, "15m": 1}, "load_average_end": null, "logical_cpus": 4}})"));
  EXPECT_EQ(from_meta.start, 6.0);
  EXPECT_FALSE(from_meta.end.has_value());
  EXPECT_EQ(from_meta.cpus, 4);
  EXPECT_DOUBLE_EQ(from_meta.slowdown_bound(2), 2.0);
  // The CPUs other processes kept busy during the run decide where recorded: a load average of 6
  // left by an earlier run of flashbench is not outside load.
  const HostLoad measured = host_load(nlohmann::json::parse(
      R"({"environment": {"load_average_start": {"1m": 6.0, "5m": 1, "15m": 1}, "other_cpu_load": 0.1, "logical_cpus": 4}})"));
  EXPECT_EQ(measured.other_cpu, 0.1);
  EXPECT_DOUBLE_EQ(measured.slowdown_bound(2), 1.0);   // (0.1 + 2) / 4 < 1
  EXPECT_DOUBLE_EQ(measured.slowdown_bound(4), 1.025);  // (0.1 + 4) / 4
}

TEST(ComparePhase, ADifferenceTheLoadCouldExplainIsUnsure) {
  const TimingSummary a = rounds_around(10.0, 0.01, 9);
  const TimingSummary twice = rounds_around(20.0, 0.01, 9);
  EXPECT_EQ(compare_phase(a, twice, {}, 1.0, 1.0).verdict, Verdict::slower);
  const PhaseComparison loaded = compare_phase(a, twice, {}, 1.0, 3.75);  // B's machine was loaded
  EXPECT_EQ(loaded.verdict, Verdict::unsure);
  EXPECT_DOUBLE_EQ(loaded.load_bound, 3.75);
  EXPECT_EQ(compare_phase(a, twice, {}, 3.75, 1.0).verdict, Verdict::slower);  // A's load makes A slower, not B
  EXPECT_EQ(compare_phase(twice, a, {}, 3.75, 1.0).verdict, Verdict::unsure);  // B faster: A's load explains it
  EXPECT_EQ(compare_phase(a, rounds_around(50.0, 0.01, 9), {}, 1.0, 3.75).verdict, Verdict::slower);  // 5x > 3.75
  // The same load on both sides slowed both alike: it explains none of a 2x difference, either way.
  const PhaseComparison both_loaded = compare_phase(a, twice, {}, 3.75, 3.75);
  EXPECT_EQ(both_loaded.verdict, Verdict::slower);
  EXPECT_DOUBLE_EQ(both_loaded.load_bound, 1.0);
  EXPECT_EQ(compare_phase(twice, a, {}, 3.75, 3.75).verdict, Verdict::faster);
  // Only the load beyond the faster side's counts: 3.75 against 2.5 could make 1.5x, not 2x.
  EXPECT_EQ(compare_phase(a, twice, {}, 2.5, 3.75).verdict, Verdict::slower);
  EXPECT_EQ(compare_phase(a, twice, {}, 1.5, 3.75).verdict, Verdict::unsure);
  EXPECT_EQ(compare_phase(a, a, {}, 3.75, 3.75).verdict, Verdict::same);
}

ResultsFile file_of(std::vector<Row> rows, const std::string& meta_json) {
  ResultsFile file;
  file.rows = std::move(rows);
  file.meta = nlohmann::ordered_json::parse(meta_json);
  return file;
}

const std::string kMeta = R"({"build": {"type": "Release", "compiler": "GNU 12", "flags": "-O3", "native": true,
  "cuda": false}, "host": {"cpu": "Some CPU", "hostname": "box"}, "git": "abc"})";

TEST(CompareRuns, DifferencesOfHostBuildDeviceThreadsAndDtype) {
  const ResultsFile a = file_of(four_variant_rows(), kMeta);
  // Another revision is what a comparison is for: no difference.
  std::string other_revision = kMeta;
  other_revision.replace(other_revision.find("abc"), 3, "def");
  EXPECT_TRUE(compare_runs(a, file_of(four_variant_rows(), other_revision), {}).differences().empty());

  std::string other_host = kMeta;
  other_host.replace(other_host.find("box"), 3, "pod");
  other_host.replace(other_host.find("-O3"), 3, "-O2");
  other_host.replace(other_host.find("Some CPU"), 8, "That CPU");
  std::vector<Row> b = four_variant_rows();
  for (Row& row : b) {
    row.threads = 2;
    row.problem.dtype = Dtype::bf16;
  }
  const Comparison c = compare_runs(a, file_of(b, other_host), {});
  ASSERT_EQ(c.pairs.size(), 4u);  // matched although the dtype differs
  EXPECT_TRUE(c.only_a.empty() && c.only_b.empty());
  std::vector<std::string> what;
  for (const Difference& d : c.differences()) what.push_back(d.what);
  EXPECT_EQ(what, (std::vector<std::string>{"host", "build", "device", "threads", "dtype"}));
  EXPECT_EQ(c.differences()[3], (Difference{"threads", "4", "2"}));
  EXPECT_NE(c.table().find("the runs differ"), std::string::npos) << c.table();
  EXPECT_NE(c.table().find("[device Some CPU vs That CPU, threads 4 vs 2, dtype fp32 vs bf16]"), std::string::npos)
      << c.table();
  // A file that does not say is not a difference.
  EXPECT_TRUE(compare_runs(a, file_of(four_variant_rows(), "{}"), {}).differences().empty());
}

TEST(CompareRuns, ExactDtypeMatchesComeFirst) {
  std::vector<Row> a = four_variant_rows(), b = four_variant_rows();
  Row bf16 = a[0];
  bf16.problem.dtype = Dtype::bf16;
  a.push_back(bf16);
  b.insert(b.begin(), bf16);  // b has the bf16 row first: it must still pair with a's bf16 row
  const Comparison c = compare_runs(a, b, {});
  ASSERT_EQ(c.pairs.size(), 5u);
  EXPECT_TRUE(c.differences().empty());
}

TEST(CompareRuns, GeometricMeanPerImplementationAndMarkdown) {
  std::vector<Row> a = four_variant_rows(), b = four_variant_rows();
  Row v2_long = a[2];
  v2_long.problem.seq = 512;
  a.push_back(v2_long);
  b.push_back(v2_long);
  b[2].bwd = scaled(b[2].bwd, 4.0);  // one v2 row 4x slower backward, the other the same: geomean 2
  const Comparison c = compare_runs(a, b, {});
  const std::vector<GeometricMean> means = c.geometric_means();
  ASSERT_EQ(means.size(), 3u);  // standard, v2, checkpoint (v1 was never timed)
  EXPECT_EQ(means[1].impl, "v2");
  EXPECT_EQ(means[1].rows, 2u);
  EXPECT_NEAR(means[1].bwd_ratio, 2.0, 1e-12);
  EXPECT_NEAR(means[1].fwd_ratio, 1.0, 1e-12);
  EXPECT_NE(c.table().find("geometric mean B/A of v2: fwd 1.000, bwd 2.000 over 2 rows"), std::string::npos) << c.table();
  const std::string md = c.markdown();
  EXPECT_EQ(md.find("| backend | variant | problem | fwd A |"), md.find('|')) << md;
  EXPECT_NE(md.find("| --- | --- | --- | ---: |"), std::string::npos) << md;
  EXPECT_NE(md.find("- geometric mean B/A of v2"), std::string::npos) << md;
  EXPECT_EQ(c.to_json()["geometric_means"][1]["bwd_ratio"].get<double>(), means[1].bwd_ratio);
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
  EXPECT_EQ(failing.exit_code, 3) << failing.output;  // a regression: neither a failure (1) nor a usage error (2)
  EXPECT_EQ(count(failing.output, " SLOWER\n"), timed) << failing.output;
  EXPECT_EQ(count(failing.output, "FASTER"), count(failing.output, "SLOWER/FASTER")) << failing.output;
  EXPECT_EQ(plain.exit_code, 0);
  const nlohmann::json document = nlohmann::json::parse(as_json.output);
  EXPECT_EQ(document["pairs"][0]["verdict"], "SLOWER");
  EXPECT_DOUBLE_EQ(document["pairs"][0]["fwd"]["ratio"].get<double>(), 2.0);
}

TEST(CompareCommand, RefusesRunsWithOtherThreadsUnlessAllowed) {
  ResultsFile file = read_results_file(kFixture);
  for (Row& row : file.rows) row.threads = 1;
  std::ostringstream one_thread;
  auto reporter = make_reporter("json", one_thread, false);
  reporter->begin(nlohmann::ordered_json(file.meta));
  for (const Row& row : file.rows) reporter->add(row);
  reporter->finish();
  const std::string path = (std::filesystem::temp_directory_path() / "flashbench-compare-threads.json").string();
  write_file_atomically(path, one_thread.str());
  const CommandResult refused = run_flashbench("compare " + kFixture + " " + path);
  const CommandResult allowed = run_flashbench("compare --allow-mismatch --format md " + kFixture + " " + path);
  std::filesystem::remove(path);
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_EQ(count(refused.output, "\n"), 1u) << refused.output;  // one line, on stderr
  EXPECT_NE(refused.output.find("threads: '4' vs '1'"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("--allow-mismatch"), std::string::npos) << refused.output;
  EXPECT_EQ(allowed.exit_code, 0) << allowed.output;
  EXPECT_NE(allowed.output.find("- the runs differ (--allow-mismatch): threads 4 vs 1"), std::string::npos) << allowed.output;
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
