// The seed documents' memory figures, reproduced: as printed, as their own formula gives them,
// with every head and batch element counted, and as this tool's implementation allocates them.
#include <cmath>

#include <fmt/format.h>

#include "flashbench/core/errors.hpp"
#include "flashbench/core/nearest.hpp"
#include "flashbench/model/model.hpp"

namespace flashbench {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGiB = kMiB * 1024.0;
constexpr double kGB = 1e9;

// Whether a printed figure agrees with the value its own formula gives.
bool agrees(const PresetRow& row) {
  if (row.claim == Claim::none || !row.formula) return true;
  const double value = *row.formula / row.unit_bytes;
  const double published = row.published_value;
  switch (row.claim) {
    case Claim::none: return true;
    case Claim::exact:
      return fmt::format("{:.{}f}", value, row.decimals) == fmt::format("{:.{}f}", published, row.decimals);
    case Claim::about: return std::abs(value - published) <= 0.05 * published;
    case Claim::over: return value > published;
    case Claim::nearly: return value <= published && value >= 0.9 * published;
  }
  return false;
}

struct Printed {
  std::string text;  // as printed; words around a number translated from the Chinese
  double value = 0;  // the number printed
  double unit_bytes = 1;
  std::string unit_label;
  int decimals = 2;
  Claim claim = Claim::exact;
};

const Printed kNotPrinted{"-", 0, 1, "", 0, Claim::none};

PresetRow make_row(std::string quantity, const Printed& printed, std::optional<double> formula,
                   std::optional<double> head_aware,
                   std::string explanation_if_mismatch, std::string value_kind = "bytes") {
  PresetRow row;
  row.quantity = std::move(quantity);
  row.published_text = printed.text;
  row.published_value = printed.value;
  row.unit_bytes = printed.unit_bytes;
  row.unit_label = printed.unit_label;
  row.decimals = printed.decimals;
  row.claim = printed.claim;
  row.formula = formula;
  row.head_aware = head_aware;
  row.value_kind = std::move(value_kind);
  row.mismatch = !agrees(row);
  if (row.mismatch)
    row.explanation = explanation_if_mismatch.empty() ? "the printed figure differs from the document's own formula"
                                                      : std::move(explanation_if_mismatch);
  return row;
}

void set_flashbench(PresetRow& row, double value, std::string what) {
  row.flashbench = value;
  row.flashbench_what = std::move(what);
}

struct VariantModels {
  ModelledMemory standard, v1, v2, checkpoint;
  LayerMemory standard_layer, v1_layer, v2_layer, checkpoint_layer;
};

VariantModels model_all(const Problem& problem, const ModelSource& model) {
  return {model.stack(problem, Variant::standard),   model.stack(problem, Variant::v1),
          model.stack(problem, Variant::v2),         model.stack(problem, Variant::checkpoint),
          model.layer(problem, Variant::standard),   model.layer(problem, Variant::v1),
          model.layer(problem, Variant::v2),         model.layer(problem, Variant::checkpoint)};
}

// Q, K, V of one layer, the tensors a layer's backward reads as forward saw them: on this operator
// the stack holds them per layer (tag input), as autograd saves an attention's inputs.
double saved_qkv(const Problem& problem) { return double(saved_input_bytes_per_layer(problem)); }

// What the layer's backward writes, beside the articles' gradients in the storage dtype.
constexpr const char* kGradientsWhat =
    "dQ, dK, dV of one layer in the device's gradient dtype (fp32 on the CPU: twice fp16; the storage dtype on CUDA)";

// seed-002 (docs/articles.md): analyze_backward_memory(seq_len=4096, head_dim=128, num_heads=32, num_layers=32), whose
// formulas count one head (fp16, "MB" = 2^20 bytes, "GB" = 2^30 bytes) although num_heads is passed.
Preset seed_002(const ModelSource& model) {
  Preset preset;
  preset.source = "seed-002: analyze_backward_memory(seq_len=4096, head_dim=128, num_heads=32, num_layers=32), "
                  "fp16; the function divides by 1024**2 and 1024, so its MB is 2^20 B and its GB 2^30 B";
  preset.problem = Problem{.batch = 1, .heads = 32, .seq = 4096, .head_dim = 128, .layers = 32,
                           .causal = false, .dtype = Dtype::fp16};
  preset.assumptions = "batch 1 (the article's benchmark); head-aware = the document's per-head formula x B*H";
  const Problem& p = preset.problem;
  const double N = double(p.seq), d = double(p.head_dim), L = double(p.layers);
  const double BH = double(p.heads_total());
  constexpr double kFp16 = 2;
  const VariantModels m = model_all(p, model);

  const double o = N * d * kFp16;                 // "输出O"
  const double temporary = N * d * kFp16 * 4;     // "临时计算缓冲"
  const double v2_layer = N * d * kFp16 * 6;      // "合计"
  const double v2_total = v2_layer * L;
  const double square = N * N * kFp16;            // v1_additional and std_mem: one N×N fp16 matrix
  const double v1_total = v2_total + square * L;
  const double standard_total = square * L;

  auto mb = [](std::string text, double value) { return Printed{std::move(text), value, kMiB, "MB", 2, Claim::exact}; };
  auto gb = [](std::string text, double value) { return Printed{std::move(text), value, kGiB, "GB", 2, Claim::exact}; };

  PresetRow row = make_row("O per layer (V2)", mb("1.00 MB", 1.00), o, o * BH, "");
  set_flashbench(row, double(m.v2_layer.output_bytes), "v2: O of one layer (kept; LSE adds 4 B per row)");
  preset.rows.push_back(row);

  row = make_row("dO per layer", mb("1.00 MB", 1.00), o, o * BH, "");
  set_flashbench(row, double(p.q_elements() * element_bytes(p.dtype)),
                 "dO_i: each layer's incoming gradient, an input of the stack (storage dtype)");
  preset.rows.push_back(row);

  row = make_row("temporary buffers per layer (V2)", mb("4.00 MB", 4.00), temporary, temporary * BH, "");
  set_flashbench(row, double(m.v2_layer.backward_workspace_bytes),
                 fmt::format("v2: backward workspace of one layer, fp32, {} threads (fp32 staging of the fp16 Q, K, V, dO, O; D; per-thread tiles)", model.threads));
  preset.rows.push_back(row);

  row = make_row("V2 total per layer", mb("6.00 MB", 6.00), v2_layer, v2_layer * BH, "");
  set_flashbench(row, double(m.v2_layer.held_bytes), "v2: held per layer until its backward (O + LSE)");
  preset.rows.push_back(row);

  row = make_row("V2 total, 32 layers", gb("0.19 GB", 0.19), v2_total, v2_total * BH, "");
  set_flashbench(row, double(m.v2.peak_bytes), "v2: modelled peak of the 32-layer stack, all tags");
  preset.rows.push_back(row);

  row = make_row("V1 extra per layer (S)", mb("128.00 MB", 128.00), square, square * BH,
                 "its formula seq_len*seq_len*2 B gives 32.00 MB; the print is 4x that");
  set_flashbench(row, double(m.v1_layer.kept_bytes), "v1: kept S + m + l per layer");
  preset.rows.push_back(row);

  row = make_row("V1 total, 32 layers", gb("4.22 GB", 4.22), v1_total, v1_total * BH,
                 "its formula gives 0.19 + 32 x 32 MB = 1.19 GB; even with its printed 128 MB it is 4.19, not 4.22");
  set_flashbench(row, double(m.v1.peak_bytes), "v1: modelled peak of the 32-layer stack, all tags");
  preset.rows.push_back(row);

  row = make_row("standard per layer (\"S and P\")", mb("256.00 MB", 256.00), square, square * BH,
                 "its formula counts one N x N fp16 matrix, 32.00 MB, though the label says S and P; 256 = 2 x its printed 128");
  set_flashbench(row, double(m.standard_layer.kept_bytes), "standard: kept P per layer (S is not kept)");
  preset.rows.push_back(row);

  row = make_row("standard total, 32 layers", gb("8.00 GB", 8.00), standard_total, standard_total * BH,
                 "its formula gives 32 x 32.00 MB = 1.00 GB; the print is 32 x its printed 256 MB");
  set_flashbench(row, double(m.standard.peak_bytes), "standard: modelled peak of the 32-layer stack, all tags");
  preset.rows.push_back(row);

  // Its autograd wrapper saves q, k, v and the output (ctx.save_for_backward(q, k, v, output)),
  // [B, H, N, d] each in fp16, while its memory function counts the output alone; on this operator
  // the stack holds the same four per layer: Q, K, V (input) and v2's kept O, with LSE beside it.
  const double wrapper_saved = 4 * N * d * kFp16;
  row = make_row("saved by its wrapper per layer: q, k, v, output", kNotPrinted, wrapper_saved, wrapper_saved * BH, "");
  set_flashbench(row, saved_qkv(p) + double(m.v2_layer.kept_bytes),
                 "Q, K, V of one layer (tag input) + v2's kept O and LSE (4 B per row)");
  preset.rows.push_back(row);

  // Its list of what V1 stores: Q and K [B, H, S, d_k] and m, l [B, H, S, 1] (fp32, as seed-000
  // keeps them); it omits V, which dP = dO·Vᵀ reads, and the S its memory function adds.
  const double v1_listed = 2 * N * d * kFp16 + 2 * N * 4;
  row = make_row("V1 stores, its list: Q, K, m, l", kNotPrinted, v1_listed, v1_listed * BH, "");
  set_flashbench(row, saved_qkv(p) + double(m.v1_layer.kept_bytes),
                 "v1: Q, K and V (tag input) + S, m, l (kept) per layer: V and S beside the list");
  preset.rows.push_back(row);

  // Its wrapper's backward returns grad_q, grad_k, grad_v (fp16, the shapes of q, k, v), which its
  // memory function leaves out.
  const double gradients = 3 * N * d * kFp16;
  row = make_row("dQ, dK, dV per layer (returned, not counted)", kNotPrinted, gradients, gradients * BH, "");
  set_flashbench(row, double(m.v2_layer.grad_bytes), kGradientsWhat);
  preset.rows.push_back(row);

  row = make_row("V2 saving vs standard", Printed{"97.6%", 97.6, 1, "%", 1, Claim::exact},
                 100.0 * (1.0 - v2_total / standard_total), 100.0 * (1.0 - v2_total / standard_total),
                 "97.6% is 1 - 0.19/8.00 from its printed, not its computed, figures; its formula gives 81.2%",
                 "percent");
  set_flashbench(row, 100.0 * (1.0 - double(m.v2.peak_bytes) / double(m.standard.peak_bytes)),
                 "1 - v2 peak / standard peak, 32 layers, all tags");
  preset.rows.push_back(row);
  return preset;
}

// seed-000 (docs/articles.md): N = 32768, fp16, 32 heads; P of one head, of one layer; m and l as two fp32 vectors.
Preset seed_000(const ModelSource& model) {
  Preset preset;
  preset.source = "seed-000: section 1 (P at N = 32768 in FP16, one head and a 32-head layer) and "
                  "section 2 (m and l, two fp32 scalars per row); its GB is 10^9 B, its KB 2^10 B";
  preset.problem = Problem{.batch = 1, .heads = 32, .seq = 32768, .head_dim = 128, .layers = 1,
                           .causal = false, .dtype = Dtype::fp16};
  preset.assumptions = "head_dim 128 and batch 1 (not stated; P, m and l do not depend on d)";
  const Problem& p = preset.problem;
  const double N = double(p.seq), BH = double(p.heads_total());
  const VariantModels m = model_all(p, model);

  PresetRow row = make_row("P elements per head", Printed{"over 1.07 billion", 1.07, 1e9, "billion", 2, Claim::over},
                           N * N, N * N * BH, "", "count");
  set_flashbench(row, double(p.score_elements()), "standard: elements of kept P per layer, all heads");
  preset.rows.push_back(row);

  row = make_row("P per head, fp16", Printed{"2.14GB", 2.14, kGB, "GB", 2, Claim::exact}, 2 * N * N, 2 * N * N * BH,
                 "2 x 32768^2 = 2,147,483,648 B is 2.15 GB (the print truncates), i.e. 2.00 GiB");
  set_flashbench(row, double(m.standard_layer.kept_bytes), "standard: kept P per layer, all heads");
  preset.rows.push_back(row);

  row = make_row("P per layer, 32 heads, fp16", Printed{"nearly 70GB", 70, kGB, "GB", 0, Claim::nearly},
                 2 * N * N * BH, 2 * N * N * BH, "");
  set_flashbench(row, double(m.standard.peak_bytes), "standard: modelled peak of one layer, all tags");
  preset.rows.push_back(row);

  row = make_row("m and l per head, fp32", Printed{"256KB", 256, 1024, "KB", 0, Claim::exact}, 2 * 4 * N,
                 2 * 4 * N * BH, "");
  set_flashbench(row, double(m.v1_layer.kept_bytes - m.standard_layer.kept_bytes),
                 "v1: kept m + l per layer, all heads (v2 keeps LSE alone: half that)");
  preset.rows.push_back(row);

  // What its backward reloads tile by tile (Q, K, V, dO [N, d] of a head in fp16) and the gradients
  // it computes (dQ, dK, dV, the shapes of Q, K, V): named, not counted; with P they make up the
  // standard layer's peak.
  const double d = double(p.head_dim);
  row = make_row("Q, K, V, dO that backward reloads", kNotPrinted, 4 * N * d * 2, 4 * N * d * 2 * BH, "");
  set_flashbench(row, double(input_bytes(p)), "Q, K, V, dO of the layer (tag input)");
  preset.rows.push_back(row);

  row = make_row("dQ, dK, dV", kNotPrinted, 3 * N * d * 2, 3 * N * d * 2 * BH, "");
  set_flashbench(row, double(m.standard_layer.grad_bytes), kGradientsWhat);
  preset.rows.push_back(row);

  row = make_row("v2 peak, one layer", kNotPrinted, std::nullopt, std::nullopt, "");
  set_flashbench(row, double(m.v2.peak_bytes), "v2: modelled peak of one layer, all tags, fp16 storage");
  preset.rows.push_back(row);
  return preset;
}

// seed-003 (docs/articles.md): N = 128K, fp16: "one P per batch ≈ 32 GB" in its Step 4.
Preset seed_003(const ModelSource& model) {
  Preset preset;
  preset.source = "seed-003: Step 4, one P of 128K x 128K in FP16 'per batch' (its derivation is single-head)";
  preset.problem = Problem{.batch = 1, .heads = 32, .seq = 131072, .head_dim = 128, .layers = 1,
                           .causal = false, .dtype = Dtype::fp16};
  preset.assumptions = "32 heads and head_dim 128 as in seed-000 and seed-002 (the document shows one head)";
  const Problem& p = preset.problem;
  const double N = double(p.seq), BH = double(p.heads_total());
  const VariantModels m = model_all(p, model);

  PresetRow row = make_row("P per head, fp16", Printed{"about 32 GB", 32, kGB, "GB", 0, Claim::about},
                           2 * N * N, 2 * N * N * BH,
                           "2 x 131072^2 B = 34.4 GB; 32 is its size in GiB (2^30 B) printed as GB");
  set_flashbench(row, double(m.standard_layer.kept_bytes), "standard: kept P per layer, all heads");
  preset.rows.push_back(row);

  // Its autograd function saves q, k, v and p (ctx.save_for_backward(q, k, v, p)): Q, K, V [N, d]
  // and P [N, N] of a head in fp16, term by term what the stack holds per standard layer.
  const double d = double(p.head_dim);
  const double saved = (3 * N * d + N * N) * 2;
  row = make_row("saved for backward: q, k, v, p", kNotPrinted, saved, saved * BH, "");
  set_flashbench(row, saved_qkv(p) + double(m.standard_layer.kept_bytes),
                 "Q, K, V of the layer (tag input) + standard's kept P");
  preset.rows.push_back(row);

  // Its backward returns dq, dk, dv, the shapes of q, k, v.
  row = make_row("dq, dk, dv returned by backward", kNotPrinted, 3 * N * d * 2, 3 * N * d * 2 * BH, "");
  set_flashbench(row, double(m.standard_layer.grad_bytes), kGradientsWhat);
  preset.rows.push_back(row);

  row = make_row("standard peak, one layer", kNotPrinted, std::nullopt, std::nullopt, "");
  set_flashbench(row, double(m.standard.peak_bytes), "standard: modelled peak, all tags");
  preset.rows.push_back(row);

  row = make_row("v2 peak, one layer", kNotPrinted, std::nullopt, std::nullopt, "");
  set_flashbench(row, double(m.v2.peak_bytes), "v2: modelled peak, all tags");
  preset.rows.push_back(row);
  return preset;
}

// Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models": one
// transformer layer keeps s·b·h·(34 + 5·a·s/h) bytes of activations in 16 bits without
// recomputation, 5·a·s²·b of them the attention's softmax output P (2 bytes), dropout mask (1) and
// dropped P (2); selective recomputation recomputes those three and keeps 34·s·b·h. For GPT-3 175B
// (a = 96, h = 12288, s = 2048) the paper prints 5as/h = 80 against 34; its 22B, 530B and 1T models
// (Table 3) follow at their own a and h.
Preset korthikanti(const ModelSource& model) {
  Preset preset;
  preset.source = "Korthikanti et al. 2022, \"Reducing Activation Recomputation in Large Transformer Models\": "
                  "per-layer activations s*b*h*(34 + 5*a*s/h), GPT-3 175B (a = 96, h = 12288, s = 2048), 16-bit; then "
                  "its 22B, 530B and 1T models";
  preset.problem = Problem{.batch = 1, .heads = 96, .seq = 2048, .dropout = 0.1, .head_dim = 128, .layers = 1,
                           .causal = true, .dtype = Dtype::fp16};
  preset.assumptions = "micro-batch b = 1, no tensor parallelism (t = 1), head dim h/a = 128, attention dropout 0.1; "
                       "flashbench models the attention core only (its stack has no projections, MLP or LayerNorm)";
  const Problem& p = preset.problem;
  const double a = double(p.heads), s = double(p.seq), b = double(p.batch), h = a * double(p.head_dim);
  const VariantModels m = model_all(p, model);
  const double score_term = 5 * a * s / h;  // 80 for GPT-3 175B

  PresetRow row = make_row("5as/h, the attention-score coefficient",
                           Printed{"80", 80, 1, "", 0, Claim::exact}, score_term, score_term, "", "count");
  preset.rows.push_back(row);

  row = make_row("per-layer activations, no recompute: sbh(34 + 5as/h)", kNotPrinted,
                 s * b * h * (34 + score_term), s * b * h * (34 + score_term), "");
  preset.rows.push_back(row);

  row = make_row("5as^2b: softmax P, dropout mask, dropped P", kNotPrinted, 5 * a * s * s * b, 5 * a * s * s * b, "");
  set_flashbench(row, double(m.standard_layer.kept_bytes), "standard with dropout: kept P, 1-byte mask and P~ per layer");
  preset.rows.push_back(row);

  // The paper's 11sbh of the attention block holds 4sbh for Q and K (the inputs of QKᵀ) and 2sbh for
  // V (the input of the product with the dropped P); the rest (the QKV projection's input, 2sbh, the
  // output projection's input, 2sbh, and its dropout mask, sbh) lies outside the attention core.
  // With h = a·d, Q, K, V [b, a, s, d] in 2 bytes are 3·2·s·b·h = 6sbh: the stack's Q, K, V.
  row = make_row("6sbh: Q, K (QK^T's inputs) and V (the PV product's)", kNotPrinted, 6 * s * b * h, 6 * s * b * h, "");
  set_flashbench(row, saved_qkv(p), "Q, K, V of one layer, kept to its backward (tag input)");
  preset.rows.push_back(row);

  row = make_row("the attention core, no recompute: 6sbh + 5as^2b", kNotPrinted, 6 * s * b * h + 5 * a * s * s * b,
                 6 * s * b * h + 5 * a * s * s * b, "");
  set_flashbench(row, saved_qkv(p) + double(m.standard_layer.kept_bytes),
                 "standard with dropout: Q, K, V and its kept P, mask, P~ per layer");
  preset.rows.push_back(row);

  // Selective recomputation keeps the core's 6sbh and recomputes the 5as²b in backward: what
  // checkpoint does (nothing kept beyond Q, K, V; P, P~ recomputed and the mask redrawn).
  row = make_row("the attention core, selective recompute: 6sbh", kNotPrinted, 6 * s * b * h, 6 * s * b * h, "");
  set_flashbench(row, saved_qkv(p) + double(m.checkpoint_layer.kept_bytes),
                 "checkpoint: Q, K, V per layer, nothing kept beyond them");
  preset.rows.push_back(row);

  // FlashAttention keeps beside Q, K, V its output O, which the paper counts as the output
  // projection's input (2sbh, outside the core), and the log-sum-exp, 4 bytes per row of each head.
  row = make_row("the attention core, flash: 6sbh + 2sbh (O) + 4asb (LSE)", kNotPrinted, 8 * s * b * h + 4 * a * s * b,
                 8 * s * b * h + 4 * a * s * b, "");
  set_flashbench(row, saved_qkv(p) + double(m.v2_layer.kept_bytes), "v2: Q, K, V per layer + its kept O and LSE");
  preset.rows.push_back(row);

  // The whole layer's 34sbh includes the projections, the MLP and LayerNorm, which flashbench's
  // stack does not have: no flashbench column.
  row = make_row("per-layer activations, selective recompute: 34sbh", kNotPrinted, 34 * s * b * h, 34 * s * b * h, "");
  preset.rows.push_back(row);

  row = make_row("share of a layer's activations selective recompute saves", kNotPrinted,
                 100 * score_term / (34 + score_term), 100 * score_term / (34 + score_term), "", "percent");
  preset.rows.push_back(row);

  row = make_row("v1 kept per layer (S, m, l, mask, dropped P)", kNotPrinted, std::nullopt, std::nullopt, "");
  set_flashbench(row, double(m.v1_layer.kept_bytes), "v1 with dropout: kept per layer");
  preset.rows.push_back(row);

  row = make_row("checkpoint kept per layer", kNotPrinted, std::nullopt, std::nullopt, "");
  set_flashbench(row, double(m.checkpoint.kept_bytes), "checkpoint: nothing beyond the layer's Q, K, V (the mask redrawn)");
  preset.rows.push_back(row);

  // The paper's other models (its Table 3; s = 2048 for all), at b = 1 and t = 1 as above: the same
  // formula, and flashbench's standard and v2 at each shape (head dim h/a).
  struct PaperModel {
    const char* name;
    int64_t heads, hidden;
  };
  for (const PaperModel& other : {PaperModel{"22B", 64, 6144}, PaperModel{"530B", 128, 20480},
                                  PaperModel{"1T", 160, 25600}}) {
    Problem q = p;
    q.heads = other.heads;
    q.head_dim = other.hidden / other.heads;
    const VariantModels mq = model_all(q, model);
    const double aq = double(other.heads), hq = double(other.hidden), term = 5 * aq * s / hq;
    const std::string tag = fmt::format("{} (a = {}, h = {})", other.name, other.heads, other.hidden);
    row = make_row(tag + ": 5as/h", kNotPrinted, term, term, "", "count");
    preset.rows.push_back(row);
    row = make_row(tag + ": per-layer activations, no recompute", kNotPrinted, s * b * hq * (34 + term),
                   s * b * hq * (34 + term), "");
    preset.rows.push_back(row);
    row = make_row(tag + ": 5as^2b", kNotPrinted, 5 * aq * s * s * b, 5 * aq * s * s * b, "");
    set_flashbench(row, double(mq.standard_layer.kept_bytes), "standard with dropout: kept P, mask and P~ per layer");
    preset.rows.push_back(row);
    row = make_row(tag + ": 6sbh, Q, K, V", kNotPrinted, 6 * s * b * hq, 6 * s * b * hq, "");
    set_flashbench(row, saved_qkv(q), "Q, K, V of one layer (tag input)");
    preset.rows.push_back(row);
    row = make_row(tag + ": the attention core, selective recompute: 6sbh", kNotPrinted, 6 * s * b * hq,
                   6 * s * b * hq, "");
    set_flashbench(row, saved_qkv(q) + double(mq.checkpoint_layer.kept_bytes),
                   "checkpoint: Q, K, V per layer, nothing kept beyond them");
    preset.rows.push_back(row);
    row = make_row(tag + ": selective recompute, 34sbh", kNotPrinted, 34 * s * b * hq, 34 * s * b * hq, "");
    preset.rows.push_back(row);
  }
  return preset;
}

}  // namespace

namespace {

// Named by each article's title (docs/articles.md); the alias is the name it had here first.
struct PresetEntry {
  PresetName name;
  Preset (*make)(const ModelSource& model);
};
const std::vector<PresetEntry>& preset_entries() {
  static const std::vector<PresetEntry> entries = {
      {{"flashattention-backward", "seed-000",
        "FlashAttention's backward pass, recomputing softmax on chip, and what it saves"},
       seed_000},
      {{"gradient-flow", "seed-002", "How gradients flow back through FlashAttention in training"}, seed_002},
      {{"backward-math", "seed-003", "The mathematics of the attention backward, with a custom autograd function"},
       seed_003},
      {{"activation-recomputation", "korthikanti",
        "Reducing Activation Recomputation in Large Transformer Models (Korthikanti et al. 2022)"},
       korthikanti},
  };
  return entries;
}

}  // namespace

std::vector<PresetName> preset_catalogue() {
  std::vector<PresetName> names;
  for (const PresetEntry& entry : preset_entries()) names.push_back(entry.name);
  return names;
}

Preset make_preset(const std::string& name, const ModelSource& model) {
  std::vector<std::string> known;
  for (const PresetEntry& entry : preset_entries()) {
    if (name == entry.name.name || name == entry.name.alias) {
      Preset preset = entry.make(model);
      preset.name = entry.name.name;
      preset.alias = entry.name.alias;
      preset.title = entry.name.title;
      return preset;
    }
    known.push_back(entry.name.name);
    known.push_back(entry.name.alias);
  }
  if (const std::optional<std::string> near = nearest_name(name, known))
    throw UsageError(fmt::format("unknown preset '{}'; did you mean {}? (--preset list names them)", name, *near));
  throw UsageError(fmt::format("unknown preset '{}' (--preset list names them)", name));
}

}  // namespace flashbench
