// The analytic memory model against the CPU device's measured ledger (peak within 1%, and the same
// kept bytes, tag split and phase) on a grid of variants, causal, L, odd N and thread counts; the
// model's closed form against hand-counted schedules; the pre-flight message; fit.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <tuple>

#include "flashbench/core/errors.hpp"
#include "flashbench/model/model.hpp"
#include "support/cpu.hpp"

namespace flashbench {
namespace {

Problem make_problem(int64_t B, int64_t H, int64_t N, int64_t d, int64_t L, bool causal) {
  Problem p;
  p.batch = B;
  p.heads = H;
  p.seq = N;
  p.head_dim = d;
  p.layers = L;
  p.causal = causal;
  return p;
}

std::string describe_tags(const TagBytes& tags) {
  std::string text;
  for (Tag tag : kAllTags) text += std::string(to_string(tag)) + "=" + std::to_string(tags[tag]) + " ";
  return text;
}

// ---- measured == model on the CPU backend ----

struct GridPoint {
  int64_t batch, heads, seq, head_dim, layers;
  bool causal;
  int threads;
  Dtype dtype = Dtype::fp32;
  int64_t kv_heads = 0, seq_kv = 0;  // G and N_k (0: H and N)
  bool expand_kv = false;
  double dropout = 0;
};

class ModelMatchesCpu : public ::testing::TestWithParam<GridPoint> {};

TEST_P(ModelMatchesCpu, PeakKeptSplitAndPhase) {
  const GridPoint g = GetParam();
  Problem problem = make_problem(g.batch, g.heads, g.seq, g.head_dim, g.layers, g.causal);
  problem.dtype = g.dtype;
  problem.kv_heads = g.kv_heads;
  problem.seq_kv = g.seq_kv;
  problem.expand_kv = g.expand_kv;
  problem.dropout = g.dropout;
  RunOptions options = testing::one_sample_options();
  options.check = false;
  const std::vector<Row> rows = testing::run_cpu(problem, kAllVariants, options, g.threads);
  ASSERT_EQ(rows.size(), kAllVariants.size());
  for (const Row& row : rows) {
    SCOPED_TRACE(std::string(to_string(row.variant)) + " " + problem.describe() + " threads " +
                 std::to_string(row.threads));
    ASSERT_EQ(row.status, Status::ok) << row.reason;
    EXPECT_EQ(row.threads, g.threads);
    const ModelledMemory model = testing::cpu_model(row.threads).stack(problem, row.variant);
    const double measured = double(row.measured.peak_bytes);
    EXPECT_GT(measured, 0);
    EXPECT_LE(std::abs(double(model.peak_bytes) - measured), 0.01 * measured)
        << "model " << model.peak_bytes << " measured " << row.measured.peak_bytes;
    EXPECT_EQ(model.kept_bytes, row.measured.kept_bytes);
    EXPECT_EQ(model.by_tag.bytes, row.measured.by_tag.bytes)
        << "model: " << describe_tags(model.by_tag) << "\nmeasured: " << describe_tags(row.measured.by_tag);
    EXPECT_EQ(model.peak_phase, row.measured.peak_phase);
  }
}

std::vector<GridPoint> grid() {
  std::vector<GridPoint> points;
  for (int64_t layers : {1, 3})
    for (bool causal : {false, true})
      for (int64_t seq : {1, 37, 131})
        for (int threads : {1, 2}) points.push_back({1, 2, seq, 24, layers, causal, threads});
  points.push_back({2, 3, 65, 40, 2, true, 2});  // B·H = 6, d not a multiple of the vector width
  points.push_back({1, 1, 257, 8, 4, false, 1}); // N over two row blocks; small d: the N×N terms dominate
  // 16-bit storage: fp32 gradients are then larger than the layer outputs, which moves some peaks.
  for (Dtype dtype : {Dtype::bf16, Dtype::fp16})
    for (int64_t layers : {1, 3}) points.push_back({1, 2, 131, 24, layers, true, 2, dtype});
  // ... and B·H = 6 heads, where checkpoint's backward recomputes one head's fp32 P at a time.
  points.push_back({2, 3, 67, 24, 2, false, 1, Dtype::fp16});
  // The stack attending to a context: N_k ≠ N both ways, GQA and MQA, native and repeated K/V (the
  // repeated Kx, Vx kept; checkpoint's in workspace), the context's gradient dC alive through backward.
  for (int64_t layers : {1, 3})
    for (bool expand : {false, true}) {
      points.push_back({2, 4, 37, 24, layers, true, 2, Dtype::fp32, 1, 53, expand});
      points.push_back({1, 4, 53, 24, layers, false, 1, Dtype::fp32, 2, 37, expand});
      points.push_back({1, 4, 64, 16, layers, true, 2, Dtype::fp32, 2, 0, expand});
    }
  points.push_back({1, 2, 37, 24, 2, true, 2, Dtype::fp32, 0, 101});  // G = H, N_k > N
  // Dropout: standard and v1 keep the 1-byte mask and P̃, checkpoint redraws them in its backward's
  // workspace, v2 keeps nothing more.
  for (int64_t layers : {1, 3}) {
    points.push_back({1, 2, 131, 24, layers, true, 2, Dtype::fp32, 0, 0, false, 0.1});
    points.push_back({1, 4, 37, 24, layers, false, 2, Dtype::fp32, 2, 61, true, 0.3});
  }
  return points;
}

INSTANTIATE_TEST_SUITE_P(Grid, ModelMatchesCpu, ::testing::ValuesIn(grid()),
                         [](const ::testing::TestParamInfo<GridPoint>& info) {
                           const GridPoint& g = info.param;
                           return "B" + std::to_string(g.batch) + "H" + std::to_string(g.heads) + "N" +
                                  std::to_string(g.seq) + "d" + std::to_string(g.head_dim) + "L" +
                                  std::to_string(g.layers) + (g.causal ? "causal" : "full") + "T" +
                                  std::to_string(g.threads) + std::string(to_string(g.dtype)) +
                                  (g.kv_heads ? "G" + std::to_string(g.kv_heads) : "") +
                                  (g.seq_kv ? "Nk" + std::to_string(g.seq_kv) : "") + (g.expand_kv ? "expand" : "") +
                                  (g.dropout > 0 ? "dropout" : "");
                         });

// ---- the closed form against schedules counted by hand ----

// B=1 H=2 N=100 d=16, fp32, T=1 and the default 64×128 tiles, counted element by element.
TEST(MemoryModel, OneLayerCountedByHand) {
  const Problem p = make_problem(1, 2, 100, 16, 1, false);
  const int64_t X = 2 * 100 * 16 * 4;     // one [B,H,N,d] fp32 tensor [bytes]
  const int64_t NN = 2 * 100 * 100 * 4;   // one [B,H,N,N] fp32 matrix [bytes]
  const int64_t row = 2 * 100 * 4;        // one [B,H,N] fp32 vector [bytes]
  const int64_t dP_rows = 1 * 64 * 100 * 4;  // T·Br·N floats [bytes]

  const int64_t inputs = 4 * X;            // Q, K, V and dO of the layer
  // standard: forward keeps P, no workspace; backward peaks with the inputs, the output O (alive
  // until the layer's backward), P, dQ, dK, dV and dP rows.
  ModelledMemory m = testing::cpu_model(1).stack(p, Variant::standard);
  EXPECT_EQ(m.peak_bytes, inputs + X + NN + 3 * X + dP_rows);
  EXPECT_EQ(m.peak_phase, Phase::bwd);
  EXPECT_EQ(m.kept_bytes, NN);
  EXPECT_EQ(m.by_tag[Tag::input], inputs);
  EXPECT_EQ(m.by_tag[Tag::activation], X);
  EXPECT_EQ(m.by_tag[Tag::grad], 3 * X);

  // v2: O (kept) and LSE; backward workspace D [BH,N] plus, per thread, two 64×128 tiles (P, dS)
  // and the column block's K and V transposed, two d×128 panels, all four with rows 144 floats
  // apart (128 rounded up to an odd number of 64-byte lines).
  m = testing::cpu_model(1).stack(p, Variant::v2);
  EXPECT_EQ(m.kept_bytes, X + row);
  EXPECT_EQ(m.peak_bytes, inputs + X + row + 3 * X + row + (2 * 64 * 144 + 2 * 16 * 144) * 4);
  EXPECT_EQ(m.by_tag[Tag::kept], X + row);
  EXPECT_EQ(m.by_tag[Tag::activation], 0);  // v2's O is kept, not an activation

  // checkpoint: keeps nothing; its backward recomputes P (not O, which it does not read) into the
  // workspace beside the dP rows: what standard holds at its backward, P being workspace, not kept.
  m = testing::cpu_model(1).stack(p, Variant::checkpoint);
  EXPECT_EQ(m.kept_bytes, 0);
  EXPECT_EQ(m.peak_bytes, inputs + X + 3 * X + NN + dP_rows);
  EXPECT_EQ(m.peak_phase, Phase::bwd);
  EXPECT_EQ(m.by_tag[Tag::workspace], NN + dP_rows);
}

// L = 3: inputs and kept state grow with L. The last layer's backward is the peak: every layer's Q,
// K, V, dO and output O are alive, with 3 P's and one layer's dQ, dK, dV; each earlier backward
// holds one O and one P fewer (layer i+1's gradients are freed before layer i's are made).
TEST(MemoryModel, StackOfThreeLayers) {
  const Problem p = make_problem(1, 1, 50, 8, 3, false);
  const int64_t X = 50 * 8 * 4, NN = 50 * 50 * 4, dP_rows = 64 * 50 * 4;
  const ModelledMemory m = testing::cpu_model(1).stack(p, Variant::standard);
  const int64_t last_layer = 3 * 4 * X + 3 * X + 3 * NN + 3 * X + dP_rows;
  EXPECT_EQ(m.peak_bytes, last_layer);
  EXPECT_EQ(m.kept_bytes, 3 * NN);
  EXPECT_EQ(m.by_tag[Tag::input], 3 * 4 * X);
  EXPECT_EQ(m.by_tag[Tag::activation], 3 * X);
  EXPECT_EQ(m.by_tag[Tag::kept], 3 * NN);
  EXPECT_EQ(m.by_tag[Tag::grad], 3 * X);
}

// 16-bit storage halves inputs, activations and the N×N tensors, not fp32 gradients, row stats
// or workspace; with checkpoint (nothing kept) the last layer's backward is the peak, with every
// layer's output and one layer's three fp32 gradients.
TEST(MemoryModel, SixteenBitStorage) {
  Problem p = make_problem(1, 2, 64, 16, 3, false);
  const ModelledMemory fp32 = testing::cpu_model(1).stack(p, Variant::v1);
  p.dtype = Dtype::fp16;
  const ModelledMemory fp16 = testing::cpu_model(1).stack(p, Variant::v1);
  const int64_t S32 = 2 * 64 * 64 * 4, stats = 2 * (2 * 64 * 4);
  EXPECT_EQ(fp32.kept_bytes, 3 * (S32 + stats));
  EXPECT_EQ(fp16.kept_bytes, 3 * (S32 / 2 + stats));
  EXPECT_EQ(fp16.by_tag[Tag::input], 3 * 4 * (2 * 64 * 16 * 2));  // Q, K, V, dO of 3 layers

  const int64_t X16 = 2 * 64 * 16 * 2, G = 2 * 64 * 16 * 4;
  const ModelledMemory checkpoint = testing::cpu_model(1).stack(p, Variant::checkpoint);
  EXPECT_EQ(checkpoint.peak_phase, Phase::bwd);
  EXPECT_EQ(checkpoint.by_tag[Tag::grad], 3 * G);
  EXPECT_EQ(checkpoint.by_tag[Tag::activation], 3 * X16);
  // Its backward workspace: the fp32 staging of Q, K, V, dO (4 [B,H,N,d] in fp32) and, one head at
  // a time, that head's recomputed fp32 P [N, N] and its dP rows (T·Br·N floats, T = 1, Br = 64);
  // the layer's fp32 P of both heads at once would be 2 · 64 · 64 · 4 B.
  EXPECT_EQ(checkpoint.by_tag[Tag::workspace], 4 * G + 64 * 64 * 4 + 64 * 64 * 4);
}

// checkpoint keeps nothing, so it never needs more than standard, which keeps P: its backward
// recomputes what standard holds there (one head at a time with 16-bit storage, as standard runs).
// With dropout (fp32 on the CPU) its recomputed mask is counted in whole floats, up to 3 bytes
// above standard's kept 1-byte mask, and its dP rows lie over its dead P̃ (at least 4 bytes below
// standard's P̃ and dP rows): N = 7 and 131 leave N² mod 4 = 1 and 3.
TEST(MemoryModel, CheckpointNeverAboveStandard) {
  for (Dtype dtype : {Dtype::fp32, Dtype::bf16, Dtype::fp16})
    for (double dropout : {0.0, 0.1})
    for (int64_t layers : {1, 2, 4})
      for (bool causal : {false, true})
        for (int64_t heads : {1, 3, 32})
          for (int64_t seq : {1, 2, 7, 64, 131, 1000, 32768})
            for (int64_t head_dim : {8, 64, 256})
              for (int threads : {1, 16}) {
                if (dropout > 0 && dtype != Dtype::fp32) continue;  // 16-bit storage runs without dropout
                Problem p = make_problem(1, heads, seq, head_dim, layers, causal);
                p.dtype = dtype;
                p.dropout = dropout;
                const ModelledMemory standard = testing::cpu_model(threads).stack(p, Variant::standard);
                const ModelledMemory checkpoint = testing::cpu_model(threads).stack(p, Variant::checkpoint);
                EXPECT_LE(checkpoint.peak_bytes, standard.peak_bytes)
                    << p.describe() << " threads " << threads << ": checkpoint " << checkpoint.peak_bytes
                    << ", standard " << standard.peak_bytes;
              }
}

// The shape: B = 1, H = 32, N = 32768, d = 64, one fp16 layer on 2 threads. standard keeps
// its P in fp16 and widens one head of it at a time; checkpoint recomputes one head's fp32 P at a
// time and keeps nothing, so its peak is standard's less the kept P of every head, 2·H·N² B.
TEST(MemoryModel, SixteenBitCheckpointRecomputesOneHead) {
  Problem p = make_problem(1, 32, 32768, 64, 1, false);
  p.dtype = Dtype::fp16;
  const ModelledMemory standard = testing::cpu_model(2).stack(p, Variant::standard);
  const ModelledMemory checkpoint = testing::cpu_model(2).stack(p, Variant::checkpoint);
  const int64_t kept_p = int64_t{2} * 32 * 32768 * 32768;
  EXPECT_EQ(standard.by_tag[Tag::kept], kept_p);
  EXPECT_EQ(checkpoint.peak_bytes, standard.peak_bytes - kept_p);
  EXPECT_EQ(checkpoint.by_tag[Tag::workspace], standard.by_tag[Tag::workspace]);
}

TEST(MemoryModel, InstantForAMillionTokens) {
  const Problem p = make_problem(1, 32, 1 << 20, 128, 32, true);
  const auto start = std::chrono::steady_clock::now();
  for (Variant v : kAllVariants) {
    const ModelledMemory m = testing::cpu_model(16).stack(p, v);
    EXPECT_GT(m.peak_bytes, 0);
    EXPECT_EQ(m.by_tag.total(), m.peak_bytes);
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 0.1);
  // standard at N = 1M keeps 32 P's of 32 heads: 2^20·2^20·4·32·32 = 2^52 bytes.
  EXPECT_EQ(testing::cpu_model(16).stack(p, Variant::standard).kept_bytes, int64_t{1} << 52);
}

// ---- pre-flight ----

TEST(MemoryModel, DoesNotFitSaysHowMuch) {
  EXPECT_FALSE(does_not_fit(100, 100));
  const auto reason = does_not_fit(int64_t(66.0 * (1 << 30)), int64_t(21.3 * (1 << 30)));
  ASSERT_TRUE(reason);
  EXPECT_EQ(*reason, "needs 66.0 GiB, 21.3 GiB available");
}

// ---- fit ----

TEST(Fit, LargestSequenceIsTight) {
  const Problem p = make_problem(1, 8, 1, 64, 1, false);
  const int64_t budget = int64_t{16} << 30;
  for (Variant v : kAllVariants) {
    SCOPED_TRACE(std::string(to_string(v)));
    const FitResult r = fit_in_budget(testing::cpu_model(2), p, v, FitAxis::seq, budget);
    ASSERT_GT(r.max_value, 0);
    Problem at = p, beyond = p;
    at.seq = r.max_value;
    beyond.seq = r.max_value + 1;
    EXPECT_EQ(r.model_peak_bytes, testing::cpu_model(2).stack(at, v).peak_bytes);
    EXPECT_LE(r.model_peak_bytes, budget);
    if (!r.at_axis_limit) {
      EXPECT_GT(testing::cpu_model(2).stack(beyond, v).peak_bytes, budget);
    }
  }
  const int64_t standard = fit_in_budget(testing::cpu_model(2), p, Variant::standard, FitAxis::seq, budget).max_value;
  const int64_t v2 = fit_in_budget(testing::cpu_model(2), p, Variant::v2, FitAxis::seq, budget).max_value;
  EXPECT_GT(v2, 5 * standard);  // O(N) kept state against O(N²)
}

TEST(Fit, BatchSearchAndNothingFits) {
  Problem p = make_problem(1, 8, 4096, 64, 2, false);
  const FitResult r = fit_in_budget(testing::cpu_model(1), p, Variant::v1, FitAxis::batch, int64_t{8} << 30);
  ASSERT_GT(r.max_value, 0);
  p.batch = r.max_value + 1;
  EXPECT_GT(testing::cpu_model(1).stack(p, Variant::v1).peak_bytes, int64_t{8} << 30);

  const FitResult none = fit_in_budget(testing::cpu_model(1), p, Variant::standard, FitAxis::seq, 1000);
  EXPECT_EQ(none.max_value, 0);
  EXPECT_EQ(none.model_peak_bytes, 0);
}

// ---- presets ----

const PresetRow& find_row(const Preset& preset, const std::string& quantity) {
  for (const PresetRow& row : preset.rows)
    if (row.quantity == quantity) return row;
  throw std::runtime_error("no row " + quantity);
}

TEST(Presets, Seed002FormulaPrintedAndFlags) {
  const Preset preset = make_preset("seed-002", testing::cpu_model(2));
  constexpr double MiB = 1 << 20, GiB = 1 << 30;
  EXPECT_DOUBLE_EQ(*find_row(preset, "O per layer (V2)").formula, 1.00 * MiB);
  EXPECT_DOUBLE_EQ(*find_row(preset, "temporary buffers per layer (V2)").formula, 4.00 * MiB);
  EXPECT_DOUBLE_EQ(*find_row(preset, "V2 total per layer").formula, 6.00 * MiB);
  EXPECT_NEAR(*find_row(preset, "V2 total, 32 layers").formula / GiB, 0.19, 0.005);
  EXPECT_DOUBLE_EQ(*find_row(preset, "V1 extra per layer (S)").formula, 32.00 * MiB);
  EXPECT_DOUBLE_EQ(*find_row(preset, "standard total, 32 layers").formula, 1.00 * GiB);
  // With 32 heads one fp16 N×N matrix per layer is 1 GiB.
  EXPECT_DOUBLE_EQ(*find_row(preset, "V1 extra per layer (S)").head_aware, 1.00 * GiB);
  EXPECT_EQ(find_row(preset, "V1 extra per layer (S)").published_text, "128.00 MB");

  // Q, K, V and O that its wrapper saves: 4 · 4096 · 128 · 2 B = 4 MiB a head, 128 MiB for 32; the
  // stack holds those four per layer (v2's O kept) and LSE, 32 · 4096 · 4 B = 512 KiB.
  const PresetRow& wrapper = find_row(preset, "saved by its wrapper per layer: q, k, v, output");
  EXPECT_DOUBLE_EQ(*wrapper.formula, 4 * MiB);
  EXPECT_DOUBLE_EQ(*wrapper.head_aware, 128 * MiB);
  EXPECT_DOUBLE_EQ(*wrapper.flashbench, 128 * MiB + 512 * 1024);
  // V1's list: Q, K (2 · 4096 · 128 · 2 B = 2 MiB) and m, l (2 · 4096 · 4 B = 32 KiB) a head; the
  // stack holds Q, K and V (96 MiB for 32 heads) and v1 keeps S (32 · 4096² · 2 B = 1 GiB), m and l (1 MiB).
  const PresetRow& v1_list = find_row(preset, "V1 stores, its list: Q, K, m, l");
  EXPECT_DOUBLE_EQ(*v1_list.formula, 2 * MiB + 32 * 1024);
  EXPECT_DOUBLE_EQ(*v1_list.flashbench, 96 * MiB + 1 * GiB + 1 * MiB);
  // dQ, dK, dV: 3 MiB a head in fp16, 96 MiB for 32; the CPU writes them in fp32, 192 MiB.
  const PresetRow& gradients = find_row(preset, "dQ, dK, dV per layer (returned, not counted)");
  EXPECT_DOUBLE_EQ(*gradients.head_aware, 96 * MiB);
  EXPECT_DOUBLE_EQ(*gradients.flashbench, 192 * MiB);

  const std::vector<std::string> flagged = {"V1 extra per layer (S)", "V1 total, 32 layers",
                                            "standard per layer (\"S and P\")", "standard total, 32 layers",
                                            "V2 saving vs standard"};
  for (const PresetRow& row : preset.rows) {
    const bool expected = std::find(flagged.begin(), flagged.end(), row.quantity) != flagged.end();
    EXPECT_EQ(row.mismatch, expected) << row.quantity;
    EXPECT_EQ(row.explanation.empty(), !expected) << row.quantity;
    EXPECT_TRUE(row.flashbench.has_value()) << row.quantity;
  }
}

// Korthikanti et al.: GPT-3 175B's 5as/h = 80 printed and recomputed (no mismatch flag), and the 5as²b
// of P, the 1-byte mask and the dropped P is exactly what standard with dropout keeps per layer.
TEST(Presets, KorthikantiGpt3) {
  const Preset preset = make_preset("korthikanti", testing::cpu_model(2));
  const PresetRow& coefficient = find_row(preset, "5as/h, the attention-score coefficient");
  EXPECT_DOUBLE_EQ(*coefficient.formula, 80.0);
  EXPECT_FALSE(coefficient.mismatch);
  const double a = 96, s = 2048, h = 12288;
  EXPECT_DOUBLE_EQ(*find_row(preset, "per-layer activations, no recompute: sbh(34 + 5as/h)").formula,
                   s * h * (34 + 80));
  const PresetRow& scores = find_row(preset, "5as^2b: softmax P, dropout mask, dropped P");
  EXPECT_DOUBLE_EQ(*scores.formula, 5 * a * s * s);
  EXPECT_DOUBLE_EQ(*scores.flashbench, *scores.formula);
  EXPECT_NEAR(*find_row(preset, "share of a layer's activations selective recompute saves").formula, 70.18, 0.01);
  // The whole layer's 34sbh has projections and an MLP flashbench's stack has not: nothing beside it.
  const PresetRow& selective = find_row(preset, "per-layer activations, selective recompute: 34sbh");
  EXPECT_DOUBLE_EQ(*selective.formula, 34 * s * h);
  EXPECT_FALSE(selective.flashbench.has_value());
}

// The attention core term by term, b = 1: Q, K, V [a, s, h/a] in 2 bytes are 3·2·s·h = 6sbh =
// 6 · 2048 · 12288 = 150,994,944 B; selective recomputation keeps just those (checkpoint: nothing
// kept beyond them); without recomputation the 5as²b = 5 · 96 · 2048² = 2,013,265,920 B joins them
// (standard with dropout); flash keeps O besides (2sbh, the output projection's input in the paper)
// and LSE, 4 B per row of each head: 4 · 96 · 2048 = 786,432 B.
TEST(Presets, KorthikantiAttentionCoreTermByTerm) {
  const Preset preset = make_preset("korthikanti", testing::cpu_model(2));
  const double qkv = 150'994'944, scores = 2'013'265'920, o = 50'331'648, lse = 786'432;
  const PresetRow& inputs = find_row(preset, "6sbh: Q, K (QK^T's inputs) and V (the PV product's)");
  EXPECT_DOUBLE_EQ(*inputs.formula, qkv);
  EXPECT_DOUBLE_EQ(*inputs.flashbench, qkv);
  const PresetRow& no_recompute = find_row(preset, "the attention core, no recompute: 6sbh + 5as^2b");
  EXPECT_DOUBLE_EQ(*no_recompute.formula, qkv + scores);
  EXPECT_DOUBLE_EQ(*no_recompute.flashbench, qkv + scores);
  const PresetRow& selective = find_row(preset, "the attention core, selective recompute: 6sbh");
  EXPECT_DOUBLE_EQ(*selective.formula, qkv);
  EXPECT_DOUBLE_EQ(*selective.flashbench, qkv);
  const PresetRow& flash = find_row(preset, "the attention core, flash: 6sbh + 2sbh (O) + 4asb (LSE)");
  EXPECT_DOUBLE_EQ(*flash.formula, qkv + o + lse);
  EXPECT_DOUBLE_EQ(*flash.flashbench, qkv + o + lse);
}

// The paper's 22B, 530B and 1T models (a, h as in its Table 3; s = 2048): 5as/h = 106.67, 64, 64, and
// standard with dropout keeps exactly 5as²b at each, at head dim h/a.
TEST(Presets, KorthikantiOtherModels) {
  const Preset preset = make_preset("korthikanti", testing::cpu_model(2));
  const double s = 2048;
  for (const auto& [name, a, h] : {std::tuple{"22B", 64.0, 6144.0}, std::tuple{"530B", 128.0, 20480.0},
                                   std::tuple{"1T", 160.0, 25600.0}}) {
    const std::string tag = std::string(name) + " (a = " + std::to_string(int(a)) + ", h = " + std::to_string(int(h)) + ")";
    EXPECT_NEAR(*find_row(preset, tag + ": 5as/h").formula, 5 * a * s / h, 1e-9) << name;
    EXPECT_DOUBLE_EQ(*find_row(preset, tag + ": per-layer activations, no recompute").formula,
                     s * h * (34 + 5 * a * s / h)) << name;
    const PresetRow& scores = find_row(preset, tag + ": 5as^2b");
    EXPECT_DOUBLE_EQ(*scores.flashbench, 5 * a * s * s) << name;
    // Q, K, V: 3 tensors of s·h elements in 2 bytes, kept alone under selective recomputation.
    EXPECT_DOUBLE_EQ(*find_row(preset, tag + ": 6sbh, Q, K, V").flashbench, 3 * s * h * 2) << name;
    EXPECT_DOUBLE_EQ(*find_row(preset, tag + ": the attention core, selective recompute: 6sbh").flashbench,
                     3 * s * h * 2) << name;
  }
  EXPECT_NEAR(*find_row(preset, "22B (a = 64, h = 6144): 5as/h").formula, 106.67, 0.01);
}

TEST(Presets, Seed000AndSeed003) {
  const Preset s000 = make_preset("seed-000", testing::cpu_model(1));
  EXPECT_DOUBLE_EQ(*find_row(s000, "P elements per head").formula, 1073741824.0);
  EXPECT_NEAR(*find_row(s000, "P per head, fp16").formula / 1e9, 2.15, 0.005);
  EXPECT_TRUE(find_row(s000, "P per head, fp16").mismatch);  // printed 2.14
  EXPECT_NEAR(*find_row(s000, "P per layer, 32 heads, fp16").formula / 1e9, 68.7, 0.05);
  EXPECT_FALSE(find_row(s000, "P per layer, 32 heads, fp16").mismatch);  // "nearly 70 GB"
  EXPECT_DOUBLE_EQ(*find_row(s000, "m and l per head, fp32").formula, 256.0 * 1024);
  EXPECT_FALSE(find_row(s000, "m and l per head, fp32").mismatch);

  // seed-000 names what its backward reloads and computes: Q, K, V, dO of 32 heads at N = 32768,
  // d = 128 in fp16 are 4 · 32 · 32768 · 128 · 2 B = 1 GiB; dQ, dK, dV 768 MiB in fp16, 1.5 GiB in
  // the CPU's fp32.
  EXPECT_DOUBLE_EQ(*find_row(s000, "Q, K, V, dO that backward reloads").head_aware, double(1 << 30));
  EXPECT_DOUBLE_EQ(*find_row(s000, "Q, K, V, dO that backward reloads").flashbench, double(1 << 30));
  EXPECT_DOUBLE_EQ(*find_row(s000, "dQ, dK, dV").head_aware, 768.0 * (1 << 20));
  EXPECT_DOUBLE_EQ(*find_row(s000, "dQ, dK, dV").flashbench, 1536.0 * (1 << 20));

  const Preset s003 = make_preset("seed-003", testing::cpu_model(1));
  // Its save_for_backward(q, k, v, p) at N = 131072, d = 128, fp16: Q, K, V 3 · 131072 · 128 · 2 B =
  // 96 MiB and P 131072² · 2 B = 32 GiB a head; for 32 heads 3 GiB + 1 TiB, term by term what the
  // stack holds for a standard layer (Q, K, V input, P kept).
  const PresetRow& saved = find_row(s003, "saved for backward: q, k, v, p");
  EXPECT_DOUBLE_EQ(*saved.formula, 96.0 * (1 << 20) + 32.0 * (1 << 30));
  EXPECT_DOUBLE_EQ(*saved.head_aware, 3.0 * (1 << 30) + 1024.0 * (1 << 30));
  EXPECT_DOUBLE_EQ(*saved.flashbench, *saved.head_aware);
  const PresetRow& p = find_row(s003, "P per head, fp16");
  EXPECT_DOUBLE_EQ(*p.formula, 32.0 * (1 << 30));
  EXPECT_NEAR(*p.formula / 1e9, 34.4, 0.05);
  EXPECT_TRUE(p.mismatch);  // "about 32 GB" is GiB
  EXPECT_THROW(make_preset("seed-001", testing::cpu_model(1)), UsageError);
}

}  // namespace
}  // namespace flashbench
