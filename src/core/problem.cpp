#include "flashbench/core/problem.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "flashbench/core/errors.hpp"

namespace flashbench {

std::string_view to_string(Dtype dtype) {
  switch (dtype) {
    case Dtype::fp32: return "fp32";
    case Dtype::bf16: return "bf16";
    case Dtype::fp16: return "fp16";
  }
  return "?";
}

Dtype parse_dtype(std::string_view name) {
  if (name == "fp32" || name == "float32") return Dtype::fp32;
  if (name == "bf16" || name == "bfloat16") return Dtype::bf16;
  if (name == "fp16" || name == "float16") return Dtype::fp16;
  throw UsageError(fmt::format("unknown dtype '{}' (expected fp32, bf16 or fp16)", name));
}

int element_bytes(Dtype dtype) { return dtype == Dtype::fp32 ? 4 : 2; }

float Problem::scale() const { return 1.0f / std::sqrt(static_cast<float>(head_dim)); }

double Problem::visible_fraction() const {
  const int64_t N = seq, Nk = key_seq();
  if (!causal) return 1.0;
  double visible = 0;  // rows with i + N_k − N + 1 in [1, N_k): a run of consecutive counts, then full rows
  for (int64_t i = 0; i < N; ++i) visible += double(std::clamp<int64_t>(i + Nk - N + 1, 0, Nk));
  return visible / (double(N) * double(Nk));
}

double Problem::forward_flop() const {
  const double per_layer = 4.0 * double(batch) * double(heads) * double(seq) * double(key_seq()) * double(head_dim);
  const double masked = !causal ? 1.0 : key_seq() == seq ? 0.5 : visible_fraction();
  return per_layer * double(layers) * masked;
}

double Problem::backward_flop() const { return 2.5 * forward_flop(); }

double Problem::rough_upper_bound_bytes() const {
  // N_k > N makes the context and the scores' columns the larger terms: bound both by the longer length.
  const double rows = double(std::max(seq, key_seq()));
  const double per_layer = double(batch) * double(heads) * rows * (rows + double(head_dim) + 8.0) * 8.0;
  return per_layer * (double(layers) + 3.0);
}

std::string Problem::describe() const {
  const std::string extras = workload();
  return fmt::format("B={} H={} N={} d={} L={}{}{}{} {}", batch, heads, seq, head_dim, layers, causal ? " causal" : "",
                     extras.empty() ? "" : " ", extras, to_string(dtype));
}

std::string Problem::workload() const {
  std::string text;
  auto add = [&text](const std::string& part) { text += (text.empty() ? "" : " ") + part; };
  if (key_heads() != heads) add(fmt::format("G={}", key_heads()));
  if (key_seq() != seq) add(fmt::format("Nk={}", key_seq()));
  if (repeats_kv()) add("expand-kv");
  if (dropout > 0) add(fmt::format("dropout={:g}", dropout));
  return text;
}

bool same_problem(const Problem& a, const Problem& b) {
  return a.batch == b.batch && a.heads == b.heads && a.key_heads() == b.key_heads() && a.seq == b.seq &&
         a.key_seq() == b.key_seq() && a.head_dim == b.head_dim && a.layers == b.layers && a.causal == b.causal &&
         a.dtype == b.dtype && a.repeats_kv() == b.repeats_kv() && a.dropout == b.dropout;
}

namespace {
void check_axis(std::string_view flag, int64_t value, int64_t max_value) {
  if (value < 1) throw UsageError(fmt::format("{} must be at least 1 (got {})", flag, value));
  if (value > max_value)
    throw UsageError(fmt::format("{} {} is larger than the limit {}", flag, value, max_value));
}
}  // namespace

void validate(const Problem& problem) {
  check_axis("--batch", problem.batch, kMaxBatchOrHeads);
  check_axis("--heads", problem.heads, kMaxBatchOrHeads);
  check_axis("--seq", problem.seq, kMaxSeq);
  if (problem.seq_kv != 0) check_axis("--seq-k", problem.seq_kv, kMaxSeq);
  if (problem.kv_heads != 0) {
    check_axis("--kv-heads", problem.kv_heads, kMaxBatchOrHeads);
    if (problem.heads % problem.kv_heads != 0)
      throw UsageError(fmt::format("--kv-heads {} does not divide --heads {} (each K/V head serves H/G query heads)",
                                   problem.kv_heads, problem.heads));
  }
  if (!(problem.dropout >= 0 && problem.dropout <= kMaxDropout))
    throw UsageError(fmt::format("--dropout {} is outside [0, {}]", problem.dropout, kMaxDropout));
  check_axis("--head-dim", problem.head_dim, kMaxHeadDim);
  check_axis("--layers", problem.layers, kMaxLayers);
  if (problem.rough_upper_bound_bytes() > kMaxProblemBytes)
    throw UsageError(fmt::format("{} is too large: its tensors would hold about {:.2g} bytes, more than 64-bit "
                                 "counts allow", problem.describe(), problem.rough_upper_bound_bytes()));
}

}  // namespace flashbench
