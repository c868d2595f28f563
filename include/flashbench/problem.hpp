#pragma once
// The problem one benchmark row describes: B batch, H heads, N sequence length, d head dim,
// L layers, causal or not, and the storage dtype. One set of letters everywhere: B, H, N, d, L.
#include <cstdint>
#include <string>
#include <string_view>

namespace flashbench {

enum class Dtype { fp32, bf16, fp16 };

std::string_view to_string(Dtype dtype);
Dtype parse_dtype(std::string_view name);  // throws UsageError on an unknown name
int element_bytes(Dtype dtype);             // [bytes]

struct Problem {
  int64_t batch = 1;     // B
  int64_t heads = 8;     // H
  int64_t seq = 1024;    // N
  int64_t head_dim = 64; // d
  int64_t layers = 1;    // L
  bool causal = false;
  Dtype dtype = Dtype::fp32;

  int64_t heads_total() const { return batch * heads; }              // B·H
  int64_t qkv_elements() const { return batch * heads * seq * head_dim; }  // one [B,H,N,d] tensor
  int64_t row_elements() const { return batch * heads * seq; }             // one [B,H,N] vector
  int64_t score_elements() const { return batch * heads * seq * seq; }     // one [B,H,N,N] matrix
  float scale() const;  // 1/sqrt(d)

  // FlashAttention convention, per layer and summed over L layers: forward 4·B·H·N²·d,
  // backward 2.5× forward, both halved when causal. [FLOP]
  double forward_flop() const;
  double backward_flop() const;

  std::string describe() const;  // "B=1 H=8 N=4096 d=64 L=1 causal fp32"

  // A conservative size of the largest term of any variant's memory, in double: below
  // kMaxProblemBytes every byte count of the problem fits int64, with room for workspace terms. [bytes]
  double rough_upper_bound_bytes() const;
};
inline constexpr double kMaxProblemBytes = 4.0e18;

// Largest sizes the tool accepts; beyond these a size is a typo, not a benchmark.
inline constexpr int64_t kMaxHeadDim = 256;
inline constexpr int64_t kMaxSeq = int64_t{1} << 24;
inline constexpr int64_t kMaxBatchOrHeads = int64_t{1} << 16;
inline constexpr int64_t kMaxLayers = 4096;

// Throws UsageError naming the first axis out of range, or saying the problem is too large when its
// axes are each in range but its tensors are past what 64-bit byte counts hold.
void validate(const Problem& problem);

}  // namespace flashbench
