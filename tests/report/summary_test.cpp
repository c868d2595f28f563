// The sweep summary on rows with known power laws: exponents, the v2/standard crossover, and
// bwd/fwd against the articles' rule of thumb (docs/articles.md), claims judged by compare's rule,
// rows off their series' scaling flagged.
#include <cmath>
#include <sstream>

#include <gtest/gtest.h>

#include "flashbench/report/reporter.hpp"
#include "flashbench/report/summary.hpp"
#include "support/report_rows.hpp"

namespace flashbench {
namespace {

using testing::small_problem;
using testing::timed_row;

// standard: time 1e-6·N² ms (fwd) and twice that (bwd), peak 16·N² bytes.
// v2:       time 2e-7·N² + 1 ms in total, bwd = 3.5 × fwd, peak 512·N bytes.
// v2 beats standard where 3e-6·N² > 2e-7·N² + 1 ... measured at N = 256 .. 4096.
std::vector<Row> power_law_rows() {
  std::vector<Row> rows;
  for (int64_t n = 256; n <= 4096; n *= 2) {
    const double N = double(n);
    const double standard_fwd = 1e-6 * N * N;
    rows.push_back(timed_row(Variant::standard, small_problem(n), standard_fwd, 2 * standard_fwd, 16 * n * n, 8 * n * n));
    const double v2_total = 2e-7 * N * N + 1;
    rows.push_back(timed_row(Variant::v2, small_problem(n), v2_total / 4.5, v2_total * 3.5 / 4.5, 512 * n, 8 * n));
  }
  return rows;
}

TEST(FitLine, RecoversSlopeAndIntercept) {
  const LineFit fit = fit_line({0, 1, 2, 3}, {1, 3, 5, 7});
  EXPECT_DOUBLE_EQ(fit.slope, 2.0);
  EXPECT_DOUBLE_EQ(fit.intercept, 1.0);
  EXPECT_DOUBLE_EQ(fit.r2, 1.0);
  EXPECT_LT(fit_line({0, 1, 2, 3}, {0, 1, 0, 1}).r2, 0.5);
  EXPECT_THROW(fit_line({1, 1}, {1, 2}), std::invalid_argument);
}

TEST(BwdFwdRule, SeedTwoBands) {
  EXPECT_EQ(bwd_fwd_verdict(1.2), "below 1.5x");
  EXPECT_EQ(bwd_fwd_verdict(1.5), "normal (1.5-2x)");
  EXPECT_EQ(bwd_fwd_verdict(2.0), "normal (1.5-2x)");
  EXPECT_EQ(bwd_fwd_verdict(2.5), "above normal (2-3x)");
  EXPECT_EQ(bwd_fwd_verdict(3.5), "too high (> 3x): recompute overhead");
}

TEST(SweepSummary, ExponentsOfTimeAndMemory) {
  const SweepSummary summary = summarize_sweep(power_law_rows());
  ASSERT_EQ(summary.series.size(), 2u);
  const ScalingSeries& standard = summary.series[0];
  EXPECT_EQ(standard.variant, Variant::standard);
  EXPECT_EQ(standard.seq, std::vector<int64_t>({256, 512, 1024, 2048, 4096}));
  EXPECT_NEAR(standard.time->slope, 2.0, 1e-9);
  EXPECT_NEAR(standard.peak->slope, 2.0, 1e-9);
  EXPECT_DOUBLE_EQ(standard.bwd_over_fwd_max, 2.0);
  const ScalingSeries& v2 = summary.series[1];
  EXPECT_NEAR(v2.peak->slope, 1.0, 1e-9);
  // 2e-7·N² + 1 at N = 256·2^i, i = 0..4: slope of ln(t) against ln(N) = Σ(i-2)(ln t_i) / (10 ln 2).
  double weighted = 0;
  for (int i = 0; i < 5; ++i) {
    const double n = 256.0 * (1 << i);
    weighted += (i - 2) * std::log(2e-7 * n * n + 1);
  }
  EXPECT_NEAR(v2.time->slope, weighted / (10 * std::log(2.0)), 1e-9);
  EXPECT_NEAR(v2.bwd_over_fwd_median, 3.5, 1e-12);
  EXPECT_FALSE(standard.model_peak.has_value());  // these rows carry no model
}

TEST(SweepSummary, LargeNExponentsLeaveSmallNTermsOut) {
  // Peak = 1e6 + 16·N²: dominated by the constant at small N, by N² at large N.
  std::vector<Row> rows;
  for (int64_t n = 64; n <= 16384; n *= 2)
    rows.push_back(timed_row(Variant::standard, small_problem(n), 1, 2, 1'000'000 + 16 * n * n, 0));
  const ScalingSeries s = summarize_sweep(rows).series.at(0);
  EXPECT_LT(s.peak->slope, 1.8);
  EXPECT_GT(s.peak_large_n->slope, 1.9);  // N = 1024 .. 16384
  EXPECT_LT(s.peak_large_n->slope, 2.0);
}

TEST(BwdFwdRule, MedianDecidesAndASingleHighPointIsNamed) {
  EXPECT_EQ(bwd_fwd_rule(Variant::standard, 4.0, 5.0, 256), "reference (recomputes nothing)");
  EXPECT_EQ(bwd_fwd_rule(Variant::v2, 1.8, 1.9, 256), "normal (1.5-2x)");
  EXPECT_EQ(bwd_fwd_rule(Variant::v2, 2.5, 5.83, 256), "above normal (2-3x); 5.83x at N=256");
  EXPECT_EQ(bwd_fwd_rule(Variant::v2, 3.8, 5.83, 256), "too high (> 3x): recompute overhead");
}

TEST(SweepSummary, CrossoverWhereV2BecomesFaster) {
  const SweepSummary summary = summarize_sweep(power_law_rows());
  ASSERT_EQ(summary.crossovers.size(), 1u);
  const Crossover& c = summary.crossovers[0];
  // Totals: standard 3e-6·N², v2 2e-7·N² + 1: equal at N = sqrt(1 / 2.8e-6) ≈ 598.
  EXPECT_EQ(c.faster_from, 1024);
  ASSERT_TRUE(c.interpolated_seq.has_value());
  EXPECT_GT(*c.interpolated_seq, 512);
  EXPECT_LT(*c.interpolated_seq, 1024);
  EXPECT_NEAR(c.ratio[0], (2e-7 * 256 * 256 + 1) / (3e-6 * 256 * 256), 1e-9);
}

TEST(SweepSummary, TableAndJson) {
  const SweepSummary summary = summarize_sweep(power_law_rows());
  const std::string table = summary.table();
  EXPECT_NE(table.find("cpu      standard  B=1 H=2 d=32 L=1 fp32  256..4096    2.00     2.00   2.00   2.00    2.00     2.00"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("too high (> 3x): recompute overhead"), std::string::npos);
  EXPECT_NE(table.find("v2 faster from N = 1024 (crossover ~"), std::string::npos) << table;
  const nlohmann::ordered_json json = summary.to_json();
  EXPECT_NEAR(json["scaling"][1]["peak"]["exponent"].get<double>(), 1.0, 1e-9);
  EXPECT_EQ(json["crossovers"][0]["faster_from"], 1024);
}

// v2 at 0.95-0.98 of standard's time with samples spread ±10 %: within compare's 5 % threshold no
// claim is made ("faster at every N" was), and the table says so.
TEST(SweepSummary, RatiosWithinTheNoiseClaimNoDifference) {
  std::vector<Row> rows;
  const auto noisy = [](double median_ms) {
    std::vector<double> samples;
    for (int i = 0; i < 7; ++i) samples.push_back(median_ms * (1.0 + 0.1 * ((i % 3) - 1)));
    return summarize(samples, 0.02);
  };
  const double ratios[] = {0.98, 0.95, 0.97, 0.96};
  for (int i = 0; i < 4; ++i) {
    const int64_t n = int64_t(256) << i;
    const double t = 1e-5 * double(n) * double(n);
    Row standard = timed_row(Variant::standard, small_problem(n), t, 2 * t, 16 * n * n, 8 * n * n);
    Row v2 = timed_row(Variant::v2, small_problem(n), ratios[i] * t, ratios[i] * 2 * t, 512 * n, 8 * n);
    standard.fwd = noisy(t), standard.bwd = noisy(2 * t);
    v2.fwd = noisy(ratios[i] * t), v2.bwd = noisy(ratios[i] * 2 * t);
    rows.push_back(standard);
    rows.push_back(v2);
  }
  const SweepSummary summary = summarize_sweep(rows);
  ASSERT_EQ(summary.crossovers.size(), 1u);
  for (Verdict verdict : summary.crossovers[0].verdict) EXPECT_EQ(verdict, Verdict::same);
  EXPECT_FALSE(summary.crossovers[0].faster_from);
  const std::string table = summary.table();
  EXPECT_NE(table.find("no difference beyond the noise at any N"), std::string::npos) << table;
  EXPECT_EQ(table.find("v2 faster"), std::string::npos) << table;
  EXPECT_EQ(summary.to_json()["crossovers"][0]["verdict"][1], "same");
}

// A row twice as slow as its series' other N predict is named as disturbed, in the table and the
// JSON; the rows on the power law are not.
TEST(SweepSummary, ARowOffItsSeriesScalingIsFlaggedDisturbed) {
  std::vector<Row> rows = power_law_rows();
  for (Row& row : rows)
    if (row.variant == Variant::standard && row.problem.seq == 1024) {
      row.fwd = testing::steady_timing(2 * row.fwd.median_ms);
      row.bwd = testing::steady_timing(2 * row.bwd.median_ms);
    }
  const SweepSummary summary = summarize_sweep(rows);
  ASSERT_EQ(summary.disturbed.size(), 1u);
  EXPECT_EQ(summary.disturbed[0].impl, "standard");
  EXPECT_EQ(summary.disturbed[0].problem.seq, 1024);
  EXPECT_NEAR(summary.disturbed[0].measured_ms / summary.disturbed[0].predicted_ms, 2.0, 0.3);
  EXPECT_NE(summary.table().find("Disturbed?"), std::string::npos);
  EXPECT_EQ(summary.to_json()["disturbed"][0]["impl"], "standard");
  EXPECT_TRUE(summarize_sweep(power_law_rows()).disturbed.empty());
}

TEST(SweepSummary, FixedTokenSweepIsOneSeriesPerVariant) {
  // B·N = 4096 tokens: B = 16, 8, 4, 2, 1 for N = 256 .. 4096; time ∝ B·N² ∝ N.
  std::vector<Row> rows;
  for (int64_t n = 256; n <= 4096; n *= 2) {
    Problem p = small_problem(n);
    p.batch = 4096 / n;
    rows.push_back(timed_row(Variant::standard, p, 1e-3 * double(n), 2e-3 * double(n), 4096 * n, 2048 * n));
    rows.push_back(timed_row(Variant::v2, p, 0.5e-3 * double(n), 1.5e-3 * double(n), 1 << 20, 1 << 16));
  }
  const SweepSummary summary = summarize_sweep(rows);
  ASSERT_EQ(summary.series.size(), 2u);
  EXPECT_EQ(summary.series[0].shape_label, "B*N=4096 H=2 d=32 L=1 fp32");
  EXPECT_TRUE(summary.series[0].batch_follows_seq);
  EXPECT_NEAR(summary.series[0].time->slope, 1.0, 1e-9);
  EXPECT_NEAR(summary.series[0].peak->slope, 1.0, 1e-9);
  EXPECT_NEAR(summary.series[1].peak->slope, 0.0, 1e-9);
  ASSERT_EQ(summary.crossovers.size(), 1u);
  EXPECT_EQ(summary.crossovers[0].faster_from, 256);
  EXPECT_TRUE(summary.to_json()["scaling"][0]["shape"]["batch"].is_null());
}

TEST(SweepSummary, TwoBatchesAtTheSameNAreTwoSeries) {
  std::vector<Row> rows;
  for (int64_t batch : {1, 2})
    for (int64_t n = 256; n <= 1024; n *= 2) {
      Problem p = small_problem(n);
      p.batch = batch;
      rows.push_back(timed_row(Variant::v2, p, 1, 2, 1000 * n, 0));
    }
  const SweepSummary summary = summarize_sweep(rows);
  ASSERT_EQ(summary.series.size(), 2u);
  EXPECT_EQ(summary.series[1].shape_label, "B=2 H=2 d=32 L=1 fp32");
  EXPECT_FALSE(summary.series[1].batch_follows_seq);
}

TEST(SweepSummary, NoScalingFromOneN) {
  std::vector<Row> rows = power_law_rows();
  rows.resize(2);
  EXPECT_FALSE(summarize_sweep(rows).has_scaling());
}

TEST(SweepSummary, ReportersAppendItAfterASweep) {
  std::ostringstream table, json;
  for (auto [format, out] : {std::pair{"table", &table}, std::pair{"json", &json}}) {
    auto reporter = make_reporter(format, *out, false);
    reporter->begin({});
    for (const Row& row : power_law_rows()) reporter->add(row);
    reporter->finish();
  }
  EXPECT_NE(table.str().find("Scaling with N"), std::string::npos);
  EXPECT_TRUE(nlohmann::json::parse(json.str()).contains("summary"));
}

}  // namespace
}  // namespace flashbench
