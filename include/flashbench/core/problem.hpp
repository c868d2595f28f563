#pragma once
// The problem one benchmark row describes: B batch, H query heads, G key/value heads, N (= N_q)
// query rows, N_k key/value rows, d head dim, L layers, causal or not, dropout, and the storage dtype.
// One set of letters everywhere: B, H, G, N (N_q), N_k, d, L.
//
// The operator (docs/workloads.md): every layer i is attention(Q_i, K_i, V_i) with Q_i [B,H,N,d] and
// K_i, V_i [B,G,N_k,d] independent inputs, and its backward returns dQ_i, dK_i and dV_i — the
// attention that FlashAttention, cuDNN and PyTorch compute. Self-attention (G = H, N_k = N),
// cross-attention, GQA/MQA and unequal lengths are one code path.
#include <cstdint>
#include <string>
#include <string_view>

namespace flashbench {

enum class Dtype { fp32, bf16, fp16 };
inline constexpr Dtype kAllDtypes[] = {Dtype::fp32, Dtype::bf16, Dtype::fp16};

std::string_view to_string(Dtype dtype);
Dtype parse_dtype(std::string_view name);  // throws UsageError on an unknown name
int element_bytes(Dtype dtype);             // [bytes]

struct Problem {
  int64_t batch = 1;     // B
  int64_t heads = 8;     // H
  int64_t seq = 1024;    // N = N_q, the query rows
  int64_t seq_kv = 0;    // N_k, the key/value rows; 0: N
  int64_t kv_heads = 0;  // G, key/value heads, a divisor of H; 0: H
  bool expand_kv = false;  // G < H run naively: K and V repeated to H heads before the kernels
  double dropout = 0;    // p, the probability that an attention weight is dropped
  int64_t head_dim = 64; // d
  int64_t layers = 1;    // L
  bool causal = false;
  Dtype dtype = Dtype::fp32;

  int64_t key_seq() const { return seq_kv > 0 ? seq_kv : seq; }          // N_k
  int64_t key_heads() const { return kv_heads > 0 ? kv_heads : heads; }   // G
  int64_t group_size() const { return heads / key_heads(); }              // H/G query heads per K/V head
  // Square (G = H, N_k = N): the shape the 16-bit CPU kernels and the ring run.
  bool square() const { return key_heads() == heads && key_seq() == seq; }
  // Whether K and V are repeated to H heads (expand_kv with G < H): then what the kernels see is G = H.
  bool repeats_kv() const { return expand_kv && key_heads() < heads; }

  int64_t heads_total() const { return batch * heads; }                  // B·H
  int64_t q_elements() const { return batch * heads * seq * head_dim; }  // one [B,H,N,d] tensor (Q, O, dO, dQ)
  int64_t kv_elements() const { return batch * key_heads() * key_seq() * head_dim; }  // one [B,G,N_k,d] (K, V, dK, dV)
  int64_t expanded_kv_elements() const { return batch * heads * key_seq() * head_dim; }  // [B,H,N_k,d]
  int64_t row_elements() const { return batch * heads * seq; }                // one [B,H,N] vector
  int64_t score_elements() const { return batch * heads * seq * key_seq(); }  // one [B,H,N,N_k] matrix
  // Entries of one head's [N, N_k] score matrix that the mask leaves visible: N·N_k, or under the
  // bottom-right causal mask (row i sees columns j ≤ i + N_k − N) Σ_i clamp(i + N_k − N + 1, 0, N_k).
  double visible_fraction() const;
  float scale() const;  // 1/sqrt(d)

  // FlashAttention convention, per layer and summed over L layers: forward 4·B·H·N·N_k·d,
  // backward 2.5× forward; causal: halved when N_k = N (the convention), the visible fraction of the
  // N×N_k scores otherwise. [FLOP]
  double forward_flop() const;
  double backward_flop() const;

  // "B=1 H=8 N=4096 d=64 L=1 causal fp32"; "G=2", "Nk=8192", "expand-kv", "dropout=0.1" where set.
  std::string describe() const;
  // The axes beyond B, H, N, d, L, causal and dtype that differ from square self-attention without
  // dropout, e.g. "G=2 Nk=8192 expand-kv dropout=0.1"; empty when none does.
  std::string workload() const;

  // A conservative size of the largest term of any variant's memory, in double: below
  // kMaxProblemBytes every byte count of the problem fits int64, with room for workspace terms. [bytes]
  double rough_upper_bound_bytes() const;
};
inline constexpr double kMaxProblemBytes = 4.0e18;

// Whether two problems are the same workload: every axis equal, G and N_k compared as resolved (an
// N_k of 0 is N), expand_kv only where it repeats anything.
bool same_problem(const Problem& a, const Problem& b);

// Largest sizes the tool accepts; beyond these a size is a typo, not a benchmark.
inline constexpr int64_t kMaxHeadDim = 256;
inline constexpr int64_t kMaxSeq = int64_t{1} << 24;
inline constexpr int64_t kMaxBatchOrHeads = int64_t{1} << 16;
inline constexpr int64_t kMaxLayers = 4096;

inline constexpr double kMaxDropout = 0.999;  // p = 1 drops everything: no gradient to measure

// Throws UsageError naming the first axis out of range, a G that does not divide H, or a p outside
// [0, 1); or saying the problem is too large when its axes are each in range but its tensors are past
// what 64-bit byte counts hold.
void validate(const Problem& problem);

}  // namespace flashbench
