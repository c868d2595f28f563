// The runner's contract, pinned with a fake device and fake implementations: every outcome a row can
// have, decided in one place for every device. A correct implementation passes its float64 check;
// a wrong one is `failed` with the error; an unsupported problem and one the model says does not fit
// are `skipped` before anything runs; an allocation that fails anyway is `oom`; a runtime failure is
// `failed` with its reason while the next implementation still runs; no reference means
// `not checked`, never passed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "flashbench/core/errors.hpp"
#include "flashbench/harness/reference.hpp"
#include "flashbench/harness/runner.hpp"
#include "flashbench/harness/stack.hpp"
#include "flashbench/report/reporter.hpp"

namespace flashbench {
namespace {

// A reference that is zero throughout (dQ and dK where every query sees one key) has no scale of its
// own: its error is measured against the layer's scale, and only without one is it absolute.
TEST(RelativeError, AZeroReferenceIsJudgedAgainstItsLayersScale) {
  const std::vector<float> got{1.5e-6f, -1e-6f};
  const std::vector<double> zero{0.0, 0.0}, truth{2.0, -4.0};
  EXPECT_DOUBLE_EQ(max_relative_error(got, zero), double(1.5e-6f));           // absolute
  EXPECT_DOUBLE_EQ(max_relative_error(got, zero, 3.0), double(1.5e-6f) / 3);  // against the layer
  const std::vector<float> near{2.5f, -4.0f};
  EXPECT_DOUBLE_EQ(max_relative_error(near, truth, 100.0), 0.5 / 4);  // a scale of its own wins
  EXPECT_EQ(max_abs(truth), 4.0);
}

// The steady clock, logging each mark.
class LoggingTimer final : public PhaseTimer {
 public:
  explicit LoggingTimer(std::vector<std::string>& events) : events_(events) {}
  void mark() override {
    events_.push_back("mark");
    clock_.mark();
  }
  std::vector<double> intervals_ms() override { return clock_.intervals_ms(); }

 private:
  std::vector<std::string>& events_;
  SteadyClockTimer clock_;
};

// The host heap, fp32 only, with a steady clock: enough of a device for the runner.
class FakeDevice final : public Device {
 public:
  std::optional<int64_t> available = int64_t{1} << 30;

  std::string_view name() const override { return "fake"; }
  std::unique_ptr<MemorySpace> open_space(MemoryLedger& ledger) override { return std::make_unique<HostSpace>(ledger); }
  std::optional<int64_t> available_bytes() const override { return available; }
  bool shares_host_memory() const override { return true; }
  ModelParams model_params(const Problem&) const override { return {}; }
  std::unique_ptr<PhaseTimer> timer() override { return std::make_unique<LoggingTimer>(events); }
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

  // What the timing protocol did, in order: "occupy", "mark" (a timer's) and "layer" (a layer call).
  std::vector<std::string> events;
  void occupy(double milliseconds) override {
    EXPECT_GT(milliseconds, 0);
    events.push_back("occupy");
  }

  // Which implementation made each layer call, in order (the rounds of the samples).
  std::vector<std::string> callers;
  // The GPU's state as NVML would read it, call by call; none (a CPU) where unset.
  std::function<std::optional<GpuState>()> state;
  std::optional<GpuState> gpu_state() const override { return state ? state() : std::nullopt; }

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
// one element after (as a kernel whose atomics add in another order). moves_dk_to_dv: right O and
// dQ, but part of dK written into dV (dK + dV, what the tied operator compared, stays right).
enum class Behaviour { correct, wrong, wrong_dq, moves_dk_to_dv, unsupported, greedy, throws, nan, nondeterministic };

// Computes the layer with the float64 reference itself (so its answers are right by construction),
// or misbehaves as asked.
class FakeDevice;
void log_layer_call(Device& device, const std::string& caller);

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

  void forward(LayerCall& call, const LayerInputs& in, void* O, KeptTensors&) override {
    ++forward_calls;
    log_layer_call(call.device, name_);
    if (behaviour_ == Behaviour::throws) throw RuntimeFailure("kernel launch failed: too many resources requested");
    if (behaviour_ == Behaviour::greedy) Buffer<float> hog(call.space, Tag::workspace, int64_t{1} << 40);
    const LayerReference r = layer(call.problem, in, nullptr);
    float* out = static_cast<float*>(O);
    for (size_t e = 0; e < r.O.size(); ++e) out[e] = float(r.O[e]) + (behaviour_ == Behaviour::wrong ? 0.01f : 0.0f);
    // One NaN at b = 0, h = 1, n = 3, k = 2 (H = 2, N = 13, d = 4).
    if (behaviour_ == Behaviour::nan) out[(1 * 13 + 3) * 4 + 2] = std::numeric_limits<float>::quiet_NaN();
    if (behaviour_ == Behaviour::nondeterministic && forward_calls > call.problem.layers)
      out[5] = std::nextafter(out[5], 2.0f);
  }
  void backward(LayerCall& call, const LayerInputs& in, const void*, const void* dO, KeptTensors&,
                const LayerGradients& gradients) override {
    log_layer_call(call.device, name_);
    const LayerReference r = layer(call.problem, in, static_cast<const float*>(dO));
    float* dQ = static_cast<float*>(gradients.dQ);
    float* dK = static_cast<float*>(gradients.dK);
    float* dV = static_cast<float*>(gradients.dV);
    for (size_t e = 0; e < r.dQ.size(); ++e) dQ[e] = float(r.dQ[e]) + (behaviour_ == Behaviour::wrong_dq ? 0.01f : 0.0f);
    const float moved = behaviour_ == Behaviour::moves_dk_to_dv ? 0.01f : 0.0f;
    for (size_t e = 0; e < r.dK.size(); ++e) {
      dK[e] = float(r.dK[e]) - moved;
      dV[e] = float(r.dV[e]) + moved;
    }
  }

 private:
  static LayerReference layer(const Problem& p, const LayerInputs& in, const float* dO) {
    const auto values = [](const void* x, int64_t n) {
      const float* f = static_cast<const float*>(x);
      return std::vector<double>(f, f + n);
    };
    const int64_t n = p.q_elements();
    const std::vector<double> gd = dO ? values(dO, n) : std::vector<double>(n, 0.0);
    return reference_layer({p.heads_total(), p.seq, p.head_dim, p.causal, p.key_seq(), p.group_size()},
                           values(in.Q, n), values(in.K, p.kv_elements()), values(in.V, p.kv_elements()), gd);
  }
  std::string name_;
  Behaviour behaviour_;
};

void log_layer_call(Device& device, const std::string& caller) {
  static_cast<FakeDevice&>(device).events.push_back("layer");
  static_cast<FakeDevice&>(device).callers.push_back(caller);
}

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
  // The reason names the tensors over the tolerance: only O is off (the gradients are computed from
  // the inputs, right).
  EXPECT_NE(rows[1].reason.find("O differs from float64 by"), std::string::npos) << rows[1].reason;

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
    EXPECT_NE(rows[0].reason.find("the output O of layer 0 holds nan at [b=0, h=1, n=3, k=2]"), std::string::npos)
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

// Each gradient is judged apart: a wrong dQ fails naming dQ alone, and an error that moves between
// dK and dV (their sum right) fails naming both.
TEST(Harness, EachGradientIsCheckedApart) {
  FakeDevice device;
  FakeImplementation wrong_dq("wrong_dq", Behaviour::wrong_dq), moves("moves", Behaviour::moves_dk_to_dv);
  const std::vector<Row> rows = run(device, small_problem(), {&wrong_dq, &moves});
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].status, Status::failed);
  EXPECT_NE(rows[0].reason.find("dQ differs from float64 by"), std::string::npos) << rows[0].reason;
  EXPECT_EQ(rows[1].status, Status::failed);
  EXPECT_NE(rows[1].reason.find("dK and dV differ from float64 by up to"), std::string::npos) << rows[1].reason;
  ASSERT_TRUE(rows[1].check.has_value());
  std::vector<std::string> names;
  for (const CheckedTensor& tensor : rows[1].check->tensors) names.push_back(tensor.name);
  EXPECT_EQ(names, std::vector<std::string>({"O", "dQ", "dK", "dV"}));
  EXPECT_TRUE(rows[1].check->not_compared.empty());
}

// Past the whole layer's budget the check samples rows of layer 0 — of every tensor, the backward's
// too — and still fails what is wrong in any of them.
TEST(Harness, SampledCheckComparesEveryTensor) {
  FakeDevice device;
  Problem problem = small_problem(2);
  problem.seq = 61;  // more rows than the sample takes
  FakeImplementation correct("correct", Behaviour::correct), moves("moves", Behaviour::moves_dk_to_dv);
  RunOptions options = quick();
  options.reference_flop_budget = reference_layer_flop(problem, 1) / 2;  // not one whole head
  const std::vector<Row> rows = run(device, problem, {&correct, &moves}, options);
  ASSERT_TRUE(rows[0].check.has_value()) << rows[0].not_checked;
  EXPECT_EQ(rows[0].check->reference.rfind("float64 (", 0), 0u) << rows[0].check->reference;
  EXPECT_TRUE(rows[0].check->passed()) << rows[0].check->max_rel_err;
  EXPECT_EQ(rows[0].check->tensors.size(), 4u);
  EXPECT_EQ(rows[1].status, Status::failed);
  EXPECT_NE(rows[1].reason.find("dK and dV"), std::string::npos) << rows[1].reason;
}

TEST(Harness, NoReferenceMeansNotCheckedNeverPassed) {
  FakeDevice device;
  FakeImplementation wrong("wrong", Behaviour::wrong);
  RunOptions options = quick();
  options.reference_flop_budget = 0;  // neither the whole layer nor its sampled rows
  const std::vector<Row> rows = run(device, small_problem(2), {&wrong}, options);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].status, Status::ok);
  EXPECT_FALSE(rows[0].check.has_value());
  EXPECT_NE(rows[0].not_checked.find("the budget of"), std::string::npos) << rows[0].not_checked;
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
  // "<impl> <problem>" around each step of its measurement (the measured pass, the warm-up, each
  // sample, the repeat), as another implementation's steps may come between them in rounds.
  EXPECT_EQ(device.ranges.front(), "correct " + small_problem(2).describe());
  EXPECT_EQ(count("correct " + small_problem(2).describe()), 1 + 1 + 5 + 1);
  EXPECT_EQ(count("correct measured"), 1);
  EXPECT_EQ(count("correct sample"), 5);  // quick(): five samples, no warm-up beyond the measured pass
  EXPECT_EQ(count("correct warm-up"), 0);
  EXPECT_EQ(count("correct repeat"), 1);
  // Every pass runs both layers forward and backward: the measured one, five samples, the repeat.
  for (const char* layer : {"correct layer 0 forward", "correct layer 1 forward", "correct layer 0 backward",
                            "correct layer 1 backward"})
    EXPECT_EQ(count(layer), 7) << layer;
  EXPECT_EQ(device.ranges.size(), 8u + 1 + 5 + 1 + 4 * 7);
}

// The passes of one layer, by whom: every layer call of one pass (a forward and a backward) is one
// entry.
std::vector<std::string> passes_by(const FakeDevice& device) {
  std::vector<std::string> passes;
  for (size_t i = 0; i < device.callers.size(); i += 2) passes.push_back(device.callers[i]);
  return passes;
}

// The one timing protocol: a configuration's implementations are sampled in rounds, each round
// starting one later (a b, b a, a b, ...), after the measured pass and warm-up of each, so that a
// drift of the device's state falls on all of them alike; each row names those it alternated with.
TEST(Harness, ImplementationsAreSampledInRounds) {
  FakeDevice device;
  FakeImplementation a("a", Behaviour::correct), b("b", Behaviour::correct);
  const std::vector<Row> rows = run(device, small_problem(1), {&a, &b});
  ASSERT_EQ(rows.size(), 2u);
  const std::vector<std::string> measured{"a", "b"}, rounds{"a", "b", "b", "a", "a", "b", "b", "a", "a", "b"},
      repeat{"a", "b"};
  std::vector<std::string> expected = measured;
  expected.insert(expected.end(), rounds.begin(), rounds.end());
  expected.insert(expected.end(), repeat.begin(), repeat.end());
  EXPECT_EQ(passes_by(device), expected);
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_EQ(rows[k].status, Status::ok) << rows[k].reason;
    EXPECT_EQ(rows[k].bwd.count(), 5);
    EXPECT_TRUE(rows[k].sampled_alone.empty());
  }
  EXPECT_EQ(rows[0].interleaved_with, std::vector<std::string>{"b"});
  EXPECT_EQ(rows[1].interleaved_with, std::vector<std::string>{"a"});
}

// Where the implementations' modelled peaks do not fit side by side, each is measured alone (all its
// samples, then the next one's), and the row says why.
TEST(Harness, ImplementationsThatDoNotFitSideBySideAreSampledAlone) {
  FakeDevice device;
  FakeImplementation a("a", Behaviour::correct), b("b", Behaviour::correct);
  const Problem problem = small_problem(1);
  RunOptions options = quick();
  std::vector<Implementation*> both{&a, &b};
  const int64_t peak = Runner(device, options).plan(problem, both)[0].model->peak_bytes;
  options.mem_limit_bytes = peak + peak / 2;
  const std::vector<Row> rows = run(device, problem, {&a, &b}, options);
  std::vector<std::string> expected(7, "a");
  expected.insert(expected.end(), 7, "b");
  EXPECT_EQ(passes_by(device), expected);
  for (const Row& row : rows) {
    EXPECT_EQ(row.status, Status::ok) << row.reason;
    EXPECT_TRUE(row.interleaved_with.empty());
    EXPECT_NE(row.sampled_alone.find("side by side"), std::string::npos) << row.sampled_alone;
  }
}

// A sample ran throttled when the GPU's SM clock after it is below the threshold of its maximum, or
// its power violation time grew during it; the row counts those samples and leaves them out of the
// statistics where at least min_samples unthrottled ones remain.
TEST(Harness, ThrottledSamplesAreCountedAndLeftOut) {
  FakeDevice device;
  // Calls: the state before the samples, then before and after each sample, then after them all.
  int calls = 0;
  device.state = [&calls]() -> std::optional<GpuState> {
    const int call = calls++;
    GpuState state;
    state.max_sm_clock_mhz = 2000;
    state.sm_clock_mhz = 1980;
    state.clock_event_reasons = 0;
    state.power_violation_ns = 0;
    const int sample = (call - 1) / 2;
    const bool after_a_sample = call >= 1 && call % 2 == 0;
    if (after_a_sample && sample == 1) state.sm_clock_mhz = 1500;    // below 0.95 x 2000
    if (after_a_sample && sample == 4) state.power_violation_ns = 7;  // held down during it
    return state;
  };
  FakeImplementation correct("correct", Behaviour::correct);
  RunOptions options = quick();
  options.sampling.max_samples = 7;  // the noise of a steady clock's tiny times: all seven are taken
  options.sampling.max_noise = 1e-9;
  const std::vector<Row> rows = run(device, small_problem(1), {&correct}, options);
  ASSERT_EQ(rows.size(), 1u);
  for (const TimingSummary* t : {&rows[0].fwd, &rows[0].bwd}) {
    ASSERT_EQ(t->count(), 7);
    ASSERT_EQ(t->clocks.size(), 7u);
    EXPECT_EQ(t->throttled_samples, 2);
    EXPECT_EQ(t->excluded_samples, 2);
    EXPECT_EQ(t->clocks[1].throttled, true);
    EXPECT_EQ(t->clocks[4].throttled, true);
    EXPECT_EQ(t->clocks[0].throttled, false);
    EXPECT_EQ(t->clocks[1].sm_clock_mhz, 1500u);
    EXPECT_EQ(t->summarized_samples().size(), 5u);
    std::vector<double> kept = t->summarized_samples();
    std::sort(kept.begin(), kept.end());
    EXPECT_DOUBLE_EQ(t->median_ms, kept[2]);
  }
  // On a device without clocks nothing is claimed either way.
  FakeDevice cpu;
  const std::vector<Row> plain = run(cpu, small_problem(1), {&correct});
  EXPECT_TRUE(plain[0].bwd.clocks.empty());
  EXPECT_FALSE(plain[0].bwd.throttled_samples.has_value());
}

// The one timing protocol: every timed region (a pass's forward, its backward) starts on a device
// kept busy (Device::occupy) right before its first mark, so that the host's work of queueing it is
// hidden alike for every implementation; nothing is occupied inside a region, and the only layer
// calls outside the regions are the untimed repeat's.
TEST(Harness, EveryTimedRegionStartsOnABusyDevice) {
  FakeDevice device;
  FakeImplementation correct("correct", Behaviour::correct);
  const Problem problem = small_problem(2);
  run(device, problem, {&correct});
  const std::vector<std::string>& e = device.events;
  int64_t regions = 0, untimed_layer_calls = 0;
  bool inside = false;
  for (size_t i = 0; i < e.size(); ++i) {
    if (e[i] == "mark") {
      if (!inside) {
        ASSERT_GT(i, 0u);
        EXPECT_EQ(e[i - 1], "occupy") << "timed region " << regions << " starts without occupying the device";
        ++regions;
      }
      inside = !inside;
    } else if (e[i] == "layer") {
      if (!inside) ++untimed_layer_calls;
    } else {
      EXPECT_EQ(e[i], "occupy");
      EXPECT_FALSE(inside) << "occupied inside a timed region, event " << i;
    }
  }
  EXPECT_FALSE(inside);
  // The measured pass and five samples, each a forward and a backward region; then the repeat.
  EXPECT_EQ(regions, 2 * 6);
  EXPECT_EQ(std::count(e.begin(), e.end(), "occupy"), regions);
  EXPECT_EQ(untimed_layer_calls, 2 * problem.layers);
}

}  // namespace
}  // namespace flashbench
