// The runner's contract, pinned with a fake device and fake implementations: every outcome a row can
// have, decided in one place for every device. A correct implementation passes its float64 check;
// a wrong one is `failed` with the error; an unsupported problem and one the model says does not fit
// are `skipped` before anything runs; an allocation that fails anyway is `oom`; a runtime failure is
// `failed` with its reason while the next implementation still runs; no reference means
// `not checked`, never passed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "flashbench/errors.hpp"
#include "flashbench/harness/reference.hpp"
#include "flashbench/harness/runner.hpp"
#include "flashbench/harness/stack.hpp"
#include "flashbench/report.hpp"

namespace flashbench {
namespace {

// The host heap, fp32 only, with a steady clock: enough of a device for the runner.
class FakeDevice final : public Device {
 public:
  std::optional<int64_t> available = int64_t{1} << 30;

  std::string_view name() const override { return "fake"; }
  std::unique_ptr<MemorySpace> open_space(MemoryLedger& ledger) override { return std::make_unique<HostSpace>(ledger); }
  std::optional<int64_t> available_bytes() const override { return available; }
  bool shares_host_memory() const override { return true; }
  ModelParams model_params(const Problem&) const override { return {}; }
  std::unique_ptr<PhaseTimer> timer() override { return std::make_unique<SteadyClockTimer>(); }
  void synchronize() override {}
  void flush_caches() override {}
  int64_t cache_flush_bytes() const override { return 0; }
  void fill_normal(Dtype, void* dst, int64_t count, uint64_t seed) override {
    float* out = static_cast<float*>(dst);
    for (int64_t i = 0; i < count; ++i) out[i] = float((i * 7 + int64_t(seed % 13)) % 11) / 5.0f - 1.0f;
  }
  void upload(std::span<const float> host, Dtype, void* dst) override {
    std::copy(host.begin(), host.end(), static_cast<float*>(dst));
  }
  std::vector<float> download(const void* src, Dtype, int64_t offset, int64_t count) override {
    const float* data = static_cast<const float*>(src) + offset;
    return {data, data + count};
  }
  Dtype gradient_dtype(const Problem&) const override { return Dtype::fp32; }
  void describe(nlohmann::ordered_json&) const override {}
  void annotate(Row& row) const override { row.device = "fake"; }

  // The profiler's view: every range opened, in order, and those still open.
  std::vector<std::string> ranges, open_ranges;
  void push_range(const std::string& name) override {
    ranges.push_back(name);
    open_ranges.push_back(name);
  }
  void pop_range() override {
    ASSERT_FALSE(open_ranges.empty()) << "a range closed that was never opened";
    open_ranges.pop_back();
  }
};

// nondeterministic: right to the last bit in the first pass (its first L forward calls), one ulp off in
// one element after
// (as a kernel whose atomics add in another order).
enum class Behaviour { correct, wrong, unsupported, greedy, throws, nan, nondeterministic };

// Computes the layer with the float64 reference itself (so its answers are right by construction),
// or misbehaves as asked.
class FakeImplementation final : public Implementation {
 public:
  FakeImplementation(std::string name, Behaviour behaviour) : name_(std::move(name)), behaviour_(behaviour) {}
  int forward_calls = 0;

  std::string_view name() const override { return name_; }
  Variant variant() const override { return Variant::v2; }
  std::string_view summary() const override { return "a fake"; }
  std::optional<std::string> unsupported(const Problem&) const override {
    if (behaviour_ == Behaviour::unsupported) return std::string("not built for this shape");
    return std::nullopt;
  }
  LayerCosts costs(const Problem&, const ModelParams&) const override { return {}; }

  void forward(LayerCall& call, const void* X, void* O, KeptTensors&) override {
    ++forward_calls;
    if (behaviour_ == Behaviour::throws) throw RuntimeFailure("kernel launch failed: too many resources requested");
    if (behaviour_ == Behaviour::greedy) Buffer<float> hog(call.space, Tag::workspace, int64_t{1} << 40);
    const LayerReference r = layer(call.problem, X, nullptr);
    float* out = static_cast<float*>(O);
    for (size_t e = 0; e < r.O.size(); ++e) out[e] = float(r.O[e]) + (behaviour_ == Behaviour::wrong ? 0.01f : 0.0f);
    // One NaN at b = 0, h = 1, n = 3, k = 2 (H = 2, N = 13, d = 4).
    if (behaviour_ == Behaviour::nan) out[(1 * 13 + 3) * 4 + 2] = std::numeric_limits<float>::quiet_NaN();
    if (behaviour_ == Behaviour::nondeterministic && forward_calls > call.problem.layers)
      out[5] = std::nextafter(out[5], 2.0f);
  }
  void backward(LayerCall& call, const void* X, const void*, Gradient dO, KeptTensors&, void* dX) override {
    const LayerReference r = layer(call.problem, X, static_cast<const float*>(dO.data));
    float* out = static_cast<float*>(dX);
    for (size_t e = 0; e < r.dQ.size(); ++e) out[e] = float(r.dQ[e] + r.dK[e] + r.dV[e]);
  }

 private:
  static LayerReference layer(const Problem& p, const void* X, const float* dO) {
    const int64_t n = p.q_elements();
    const float* x = static_cast<const float*>(X);
    const std::vector<double> xd(x, x + n);
    const std::vector<double> gd = dO ? std::vector<double>(dO, dO + n) : std::vector<double>(n, 0.0);
    return reference_layer({p.heads_total(), p.seq, p.head_dim, p.causal}, xd, xd, xd, gd);
  }
  std::string name_;
  Behaviour behaviour_;
};

Problem small_problem(int64_t layers = 2) {
  Problem p;
  p.batch = 1;
  p.heads = 2;
  p.seq = 13;
  p.head_dim = 4;
  p.layers = layers;
  return p;
}

RunOptions quick() {
  RunOptions options;
  options.sampling.warmup = 0;
  options.sampling.warmup_ms = 0;
  options.sampling.min_samples = 5;
  options.sampling.max_samples = 5;
  return options;
}

std::vector<Row> run(FakeDevice& device, const Problem& problem, std::vector<FakeImplementation*> implementations,
                     RunOptions options = quick()) {
  std::vector<Implementation*> chosen(implementations.begin(), implementations.end());
  return Runner(device, options).run(problem, chosen);
}

TEST(Harness, EveryOutcomeIsARowAndTheSweepGoesOn) {
  FakeDevice device;
  FakeImplementation correct("correct", Behaviour::correct), wrong("wrong", Behaviour::wrong),
      unsupported("unsupported", Behaviour::unsupported), greedy("greedy", Behaviour::greedy),
      throws("throws", Behaviour::throws), after("after", Behaviour::correct);
  const std::vector<Row> rows = run(device, small_problem(), {&correct, &wrong, &unsupported, &greedy, &throws, &after});
  ASSERT_EQ(rows.size(), 6u);
  for (size_t i = 0; i < rows.size(); ++i) EXPECT_EQ(rows[i].impl, std::vector<std::string>({"correct", "wrong",
      "unsupported", "greedy", "throws", "after"})[i]);

  EXPECT_EQ(rows[0].status, Status::ok) << rows[0].reason;
  ASSERT_TRUE(rows[0].check.has_value());
  EXPECT_EQ(rows[0].check->reference, "float64");
  EXPECT_TRUE(rows[0].check->passed()) << rows[0].check->max_rel_err;
  EXPECT_EQ(rows[0].fwd.count(), 5);

  EXPECT_EQ(rows[1].status, Status::failed);
  ASSERT_TRUE(rows[1].check.has_value());
  EXPECT_FALSE(rows[1].check->passed());
  // The reason names the tensors over the tolerance: X_L is off, and so dX_0 through the second layer.
  EXPECT_NE(rows[1].reason.find("output and input_grad differ from float64 by up to"), std::string::npos)
      << rows[1].reason;

  EXPECT_EQ(rows[2].status, Status::skipped);
  EXPECT_EQ(rows[2].reason, "not built for this shape");
  EXPECT_EQ(unsupported.forward_calls, 0);

  EXPECT_EQ(rows[3].status, Status::oom);
  EXPECT_NE(rows[3].reason.find("limit"), std::string::npos) << rows[3].reason;

  EXPECT_EQ(rows[4].status, Status::failed);
  EXPECT_NE(rows[4].reason.find("too many resources"), std::string::npos) << rows[4].reason;

  EXPECT_EQ(rows[5].status, Status::ok) << rows[5].reason;
}

// A NaN in an output is a failed row naming the tensor and where, checked or not.
TEST(Harness, ANonFiniteOutputIsAFailedRowNamingWhere) {
  FakeDevice device;
  FakeImplementation nan("nan", Behaviour::nan), after("after", Behaviour::correct);
  for (bool check : {true, false}) {
    RunOptions options = quick();
    options.check = check;
    const std::vector<Row> rows = run(device, small_problem(1), {&nan, &after}, options);
    EXPECT_EQ(rows[0].status, Status::failed);
    EXPECT_NE(rows[0].reason.find("the output X_L holds nan at [b=0, h=1, n=3, k=2]"), std::string::npos)
        << rows[0].reason;
    EXPECT_EQ(rows[1].status, Status::ok) << rows[1].reason;
  }
}

TEST(Harness, WhatDoesNotFitIsSkippedBeforeAnythingRuns) {
  FakeDevice device;
  device.available = 1000;  // bytes: less than the inputs alone
  FakeImplementation correct("correct", Behaviour::correct);
  const std::vector<Row> rows = run(device, small_problem(), {&correct});
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].status, Status::skipped);
  EXPECT_NE(rows[0].reason.find("needs"), std::string::npos) << rows[0].reason;
  ASSERT_TRUE(rows[0].model.has_value());
  EXPECT_GT(rows[0].model->peak_bytes, 1000);
  EXPECT_EQ(correct.forward_calls, 0);
}

TEST(Harness, NoReferenceMeansNotCheckedNeverPassed) {
  FakeDevice device;
  FakeImplementation wrong("wrong", Behaviour::wrong);
  RunOptions options = quick();
  options.reference_flop_budget = 0;  // no float64 stack; L = 2 leaves no row-sampled check either
  const std::vector<Row> rows = run(device, small_problem(2), {&wrong}, options);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].status, Status::ok);
  EXPECT_FALSE(rows[0].check.has_value());
  EXPECT_NE(rows[0].not_checked.find("over the budget"), std::string::npos) << rows[0].not_checked;
}

TEST(Harness, OverBudgetOneLayerFallsBackToFloat64Rows) {
  FakeDevice device;
  FakeImplementation correct("correct", Behaviour::correct), wrong("wrong", Behaviour::wrong);
  RunOptions options = quick();
  options.reference_flop_budget = 0;
  const std::vector<Row> rows = run(device, small_problem(1), {&correct, &wrong}, options);
  ASSERT_TRUE(rows[0].check.has_value());
  EXPECT_EQ(rows[0].check->reference, "float64 rows (output)");
  EXPECT_TRUE(rows[0].check->passed());
  EXPECT_EQ(rows[1].status, Status::failed);
}

TEST(Harness, SwitchedOffCheckSaysNothing) {
  FakeDevice device;
  FakeImplementation wrong("wrong", Behaviour::wrong);
  RunOptions options = quick();
  options.check = false;
  const std::vector<Row> rows = run(device, small_problem(), {&wrong}, options);
  EXPECT_EQ(rows[0].status, Status::ok);
  EXPECT_FALSE(rows[0].check.has_value());
  EXPECT_TRUE(rows[0].not_checked.empty());
}

// Each row says what its inputs were and whether the measured computation gives the same bits twice.
TEST(Harness, RowsRecordInputsAndWhetherResultsRepeat) {
  FakeDevice device;
  FakeImplementation correct("correct", Behaviour::correct), drifting("drifting", Behaviour::nondeterministic),
      unsupported("unsupported", Behaviour::unsupported), throws("throws", Behaviour::throws);
  RunOptions options = quick();
  options.seed = 7;
  const std::vector<Row> rows = run(device, small_problem(), {&correct, &drifting, &unsupported, &throws}, options);

  ASSERT_TRUE(rows[0].reproducibility.has_value());
  const Reproducibility& first = *rows[0].reproducibility;
  EXPECT_EQ(first.seed, 7u);
  EXPECT_EQ(first.inputs_hash.size(), 16u);
  EXPECT_EQ(first.results_hash.size(), 16u);
  EXPECT_EQ(first.deterministic, true);
  for (const std::string& warning : row_warnings(rows[0])) EXPECT_EQ(warning.find("deterministic"), std::string::npos);

  // Same inputs, and (its first pass being right) the same results, but not the same bits twice.
  EXPECT_EQ(rows[1].status, Status::ok) << rows[1].reason;
  ASSERT_TRUE(rows[1].reproducibility.has_value());
  EXPECT_EQ(rows[1].reproducibility->inputs_hash, first.inputs_hash);
  EXPECT_EQ(rows[1].reproducibility->results_hash, first.results_hash);
  EXPECT_EQ(rows[1].reproducibility->deterministic, false);
  const std::vector<std::string> warnings = row_warnings(rows[1]);
  EXPECT_TRUE(std::any_of(warnings.begin(), warnings.end(),
                          [](const std::string& w) { return w.find("not deterministic") == 0; }));

  EXPECT_FALSE(rows[2].reproducibility.has_value());  // skipped: never ran
  ASSERT_TRUE(rows[3].reproducibility.has_value());   // failed at its first forward: inputs known, nothing else
  EXPECT_EQ(rows[3].reproducibility->inputs_hash, first.inputs_hash);
  EXPECT_TRUE(rows[3].reproducibility->results_hash.empty());
  EXPECT_FALSE(rows[3].reproducibility->deterministic.has_value());

  // Another seed, other inputs and results; the same seed again, the same ones.
  options.seed = 8;
  const std::vector<Row> other = run(device, small_problem(), {&correct}, options);
  EXPECT_NE(other[0].reproducibility->inputs_hash, first.inputs_hash);
  EXPECT_NE(other[0].reproducibility->results_hash, first.results_hash);
  options.seed = 7;
  const std::vector<Row> again = run(device, small_problem(), {&correct}, options);
  EXPECT_EQ(again[0].reproducibility->inputs_hash, first.inputs_hash);
  EXPECT_EQ(again[0].reproducibility->results_hash, first.results_hash);
}

// run --dry-run: the plan is the runner's own decision, so it skips what run() skips, for the same
// reasons, and marks the rest ok.
TEST(Harness, PlanSkipsWhatRunSkips) {
  FakeDevice device;
  FakeImplementation correct("correct", Behaviour::correct), unsupported("unsupported", Behaviour::unsupported),
      wrong("wrong", Behaviour::wrong);
  const std::vector<Implementation*> chosen = {&correct, &unsupported, &wrong};
  for (const std::optional<int64_t> available : {std::optional<int64_t>(int64_t{1} << 30), std::optional<int64_t>(1000)}) {
    device.available = available;
    Runner runner(device, quick());
    const int calls_before = correct.forward_calls;
    const std::vector<Row> plan = runner.plan(small_problem(), chosen);
    EXPECT_EQ(correct.forward_calls, calls_before) << "a plan runs nothing";
    const std::vector<Row> rows = runner.run(small_problem(), chosen);
    ASSERT_EQ(plan.size(), rows.size());
    for (size_t k = 0; k < rows.size(); ++k) {
      EXPECT_EQ(plan[k].impl, rows[k].impl);
      EXPECT_EQ(plan[k].status == Status::skipped, rows[k].status == Status::skipped) << rows[k].impl;
      EXPECT_EQ(plan[k].reason, rows[k].status == Status::skipped ? rows[k].reason : "") << rows[k].impl;
      EXPECT_EQ(plan[k].model.has_value(), rows[k].model.has_value());
    }
    EXPECT_EQ(plan[1].status, Status::skipped);
    EXPECT_EQ(plan[0].status, available == 1000 ? Status::skipped : Status::ok);
  }
}

// Progress hears of each implementation that is measured, by its place in the list, and of no other.
TEST(Harness, StartObserverSeesEachMeasuredImplementation) {
  FakeDevice device;
  FakeImplementation first("first", Behaviour::correct), unsupported("unsupported", Behaviour::unsupported),
      last("last", Behaviour::correct);
  Runner runner(device, quick());
  std::vector<size_t> started;
  runner.on_start([&](const Problem& problem, size_t k) {
    EXPECT_EQ(problem.seq, 13);
    started.push_back(k);
  });
  const std::vector<Implementation*> chosen = {&first, &unsupported, &last};
  runner.run(small_problem(), chosen);
  EXPECT_EQ(started, std::vector<size_t>({0, 2}));
}

// run --profile: each implementation, pass and layer is a named device range, every one closed; a run
// that does not ask names none.
TEST(Harness, ProfileNamesImplementationsPassesAndLayers) {
  FakeDevice device;
  FakeImplementation correct("correct", Behaviour::correct);
  run(device, small_problem(2), {&correct});
  EXPECT_TRUE(device.ranges.empty());

  RunOptions options = quick();
  options.name_ranges = true;
  run(device, small_problem(2), {&correct}, options);
  EXPECT_TRUE(device.open_ranges.empty());
  const auto count = [&](const std::string& name) { return std::count(device.ranges.begin(), device.ranges.end(), name); };
  ASSERT_FALSE(device.ranges.empty());
  EXPECT_EQ(device.ranges.front(), "correct " + small_problem(2).describe());
  EXPECT_EQ(count("correct measured"), 1);
  EXPECT_EQ(count("correct sample"), 5);  // quick(): five samples, no warm-up beyond the measured pass
  EXPECT_EQ(count("correct warm-up"), 0);
  EXPECT_EQ(count("correct repeat"), 1);
  // Every pass runs both layers forward and backward: the measured one, five samples, the repeat.
  for (const char* layer : {"correct layer 0 forward", "correct layer 1 forward", "correct layer 0 backward",
                            "correct layer 1 backward"})
    EXPECT_EQ(count(layer), 7) << layer;
  EXPECT_EQ(device.ranges.size(), 1u + 1 + 5 + 1 + 4 * 7);
}

}  // namespace
}  // namespace flashbench
