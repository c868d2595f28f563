#include "flashbench/cpu/attention.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "flashbench/cpu/gemm.hpp"

// Per head h, with N rows of d features:
//   forward   S = scale·Q·Kᵀ, P = softmax(S) row-wise (masked entries 0), O = P·V
//   backward  dV = Pᵀ·dO, dP = dO·Vᵀ, D_i = Σ_j P_ij·dP_ij = Σ_k dO_ik·O_ik,
//             dS = P ∘ (dP − D), dQ = scale·dS·K, dK = scale·dSᵀ·Q            (seed 003)
// D is a sum over the whole row i; a tiled kernel must never sum it inside one tile (seed 000's bug).

namespace flashbench::cpu {

LayerShape LayerShape::of(const Problem& p) {
  return {p.heads_total(), p.seq, p.head_dim, p.causal, p.scale()};
}

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

int64_t block_count(int64_t n, int64_t block) { return (n + block - 1) / block; }

// Columns row i attends to: all N, or 0..i under the causal mask.
int64_t visible_columns(const LayerShape& s, int64_t row) { return s.causal ? row + 1 : s.seq; }

// Runs fn(head, block) for every (head, block) pair, spread over the OpenMP threads; dynamic
// scheduling because causal blocks differ in cost.
template <class Fn>
void parallel_over_blocks(int64_t heads, int64_t blocks, Fn&& fn) {
  const int64_t items = heads * blocks;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t item = 0; item < items; ++item) fn(item / blocks, item % blocks);
}

template <class Fn>
void parallel_over_heads(int64_t heads, Fn&& fn) {
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t h = 0; h < heads; ++h) fn(h);
}

// One thread's slice of a workspace block split evenly over the threads.
float* thread_slice(float* workspace, int64_t per_thread) {
  return workspace + static_cast<int64_t>(omp_get_thread_num()) * per_thread;
}

// row[0:visible] = softmax(row[0:visible]); row[visible:width] = 0.
void softmax_row(float* row, int64_t visible, int64_t width) {
  float row_max = kNegInf;
  for (int64_t j = 0; j < visible; ++j) row_max = std::max(row_max, row[j]);
  float sum = 0.0f;
  for (int64_t j = 0; j < visible; ++j) {
    row[j] = std::exp(row[j] - row_max);
    sum += row[j];
  }
  const float inverse = 1.0f / sum;
  for (int64_t j = 0; j < visible; ++j) row[j] *= inverse;
  std::fill(row + visible, row + width, 0.0f);
}

// Tensors of one head.
struct HeadPointers {
  const float* Q;
  const float* K;
  const float* V;
  static HeadPointers of(const LayerShape& s, int64_t h, const float* Q, const float* K, const float* V) {
    const int64_t stride = s.seq * s.head_dim;
    return {Q + h * stride, K + h * stride, V + h * stride};
  }
};

// P rows r0..r1 of one head, written to P_rows [r1-r0, N] (leading dimension N): the standard forward.
void probability_rows(const LayerShape& s, const HeadPointers& head, int64_t r0, int64_t r1, float* P_rows) {
  const int64_t N = s.seq, d = s.head_dim, rows = r1 - r0;
  const int64_t columns = s.causal ? r1 : N;  // no row of the block sees past column r1-1
  gemm(Op::none, Op::transpose, rows, columns, d, s.scale, head.Q + r0 * d, d, head.K, d, 0.0f, P_rows, N);
  for (int64_t i = r0; i < r1; ++i) softmax_row(P_rows + (i - r0) * N, visible_columns(s, i), N);
}

// O rows r0..r1 = P_rows · V, with P_rows [r1-r0, N] (leading dimension N).
void output_rows(const LayerShape& s, const HeadPointers& head, int64_t r0, int64_t r1, const float* P_rows,
                 float* O_head) {
  const int64_t N = s.seq, d = s.head_dim;
  const int64_t columns = s.causal ? r1 : N;
  gemm(Op::none, Op::none, r1 - r0, d, columns, 1.0f, P_rows, N, head.V, d, 0.0f, O_head + r0 * d, d);
}

// ---------------------------------------------------------------------------------------------
// standard / checkpoint forward: P materialised row block by row block.

void standard_forward(const LayerShape& s, const Tiling& t, const float* Q, const float* K, const float* V,
                      float* O, float* P) {
  const int64_t N = s.seq, Br = t.row_block;
  parallel_over_blocks(s.heads_total, block_count(N, Br), [&](int64_t h, int64_t rb) {
    const int64_t r0 = rb * Br, r1 = std::min(N, r0 + Br);
    const HeadPointers head = HeadPointers::of(s, h, Q, K, V);
    float* P_head = P + h * N * N;
    probability_rows(s, head, r0, r1, P_head + r0 * N);
    output_rows(s, head, r0, r1, P_head + r0 * N, O + h * N * s.head_dim);
  });
}

// Same arithmetic, but each row block's P lives only in the thread's workspace [Br, N].
void checkpoint_forward(const LayerShape& s, const Tiling& t, const float* Q, const float* K, const float* V,
                        float* O, float* workspace) {
  const int64_t N = s.seq, Br = t.row_block;
  parallel_over_blocks(s.heads_total, block_count(N, Br), [&](int64_t h, int64_t rb) {
    const int64_t r0 = rb * Br, r1 = std::min(N, r0 + Br);
    const HeadPointers head = HeadPointers::of(s, h, Q, K, V);
    float* P_rows = thread_slice(workspace, Br * N);
    probability_rows(s, head, r0, r1, P_rows);
    output_rows(s, head, r0, r1, P_rows, O + h * N * s.head_dim);
  });
}

// ---------------------------------------------------------------------------------------------
// v1 forward: keep S and the row statistics m, l; O accumulated from P tiles [Br, Bc].

void v1_forward(const LayerShape& s, const Tiling& t, const float* Q, const float* K, const float* V, float* O,
                float* S, float* m, float* l, float* workspace) {
  const int64_t N = s.seq, d = s.head_dim, Br = t.row_block, Bc = t.col_block;
  parallel_over_blocks(s.heads_total, block_count(N, Br), [&](int64_t h, int64_t rb) {
    const int64_t r0 = rb * Br, r1 = std::min(N, r0 + Br), rows = r1 - r0;
    const int64_t columns = s.causal ? r1 : N;
    const HeadPointers head = HeadPointers::of(s, h, Q, K, V);
    float* S_rows = S + h * N * N + r0 * N;
    float* m_rows = m + h * N + r0;
    float* l_rows = l + h * N + r0;
    gemm(Op::none, Op::transpose, rows, columns, d, s.scale, head.Q + r0 * d, d, head.K, d, 0.0f, S_rows, N);
    for (int64_t i = r0; i < r1; ++i) {
      const float* row = S_rows + (i - r0) * N;
      const int64_t visible = visible_columns(s, i);
      float row_max = kNegInf;
      for (int64_t j = 0; j < visible; ++j) row_max = std::max(row_max, row[j]);
      float sum = 0.0f;
      for (int64_t j = 0; j < visible; ++j) sum += std::exp(row[j] - row_max);
      m_rows[i - r0] = row_max;
      l_rows[i - r0] = sum;
    }
    float* P_tile = thread_slice(workspace, Br * Bc);
    float* O_rows = O + h * N * d + r0 * d;
    for (int64_t c0 = 0; c0 < columns; c0 += Bc) {
      const int64_t width = std::min(Bc, columns - c0);
      for (int64_t i = r0; i < r1; ++i) {
        const float* S_row = S_rows + (i - r0) * N + c0;
        float* P_row = P_tile + (i - r0) * Bc;
        const int64_t visible = std::clamp<int64_t>(visible_columns(s, i) - c0, 0, width);
        const float row_max = m_rows[i - r0], inverse_sum = 1.0f / l_rows[i - r0];
        for (int64_t j = 0; j < visible; ++j) P_row[j] = std::exp(S_row[j] - row_max) * inverse_sum;
        std::fill(P_row + visible, P_row + width, 0.0f);
      }
      gemm(Op::none, Op::none, rows, d, width, 1.0f, P_tile, Bc, head.V + c0 * d, d, c0 == 0 ? 0.0f : 1.0f,
           O_rows, d);
    }
  });
}

// ---------------------------------------------------------------------------------------------
// v2 forward: online softmax over column tiles; keeps O and LSE = m + log(l).

void v2_forward(const LayerShape& s, const Tiling& t, const float* Q, const float* K, const float* V, float* O,
                float* lse, float* workspace) {
  const int64_t N = s.seq, d = s.head_dim, Br = t.row_block, Bc = t.col_block;
  parallel_over_blocks(s.heads_total, block_count(N, Br), [&](int64_t h, int64_t rb) {
    const int64_t r0 = rb * Br, r1 = std::min(N, r0 + Br), rows = r1 - r0;
    const int64_t columns = s.causal ? r1 : N;
    const HeadPointers head = HeadPointers::of(s, h, Q, K, V);
    float* tile = thread_slice(workspace, Br * Bc + 2 * Br);  // S, then P, of one tile [Br, Bc]
    float* running_max = tile + Br * Bc;                      // m of the columns seen so far [Br]
    float* running_sum = running_max + Br;                    // l of the columns seen so far [Br]
    float* O_rows = O + h * N * d + r0 * d;
    std::fill(running_max, running_max + rows, kNegInf);
    std::fill(running_sum, running_sum + rows, 0.0f);
    for (int64_t c0 = 0; c0 < columns; c0 += Bc) {
      const int64_t width = std::min(Bc, columns - c0);
      gemm(Op::none, Op::transpose, rows, width, d, s.scale, head.Q + r0 * d, d, head.K + c0 * d, d, 0.0f, tile,
           Bc);
      for (int64_t i = r0; i < r1; ++i) {
        float* row = tile + (i - r0) * Bc;
        // The first tile always holds column 0, which every row sees, so m is finite after it.
        const int64_t visible = std::clamp<int64_t>(visible_columns(s, i) - c0, 0, width);
        float tile_max = kNegInf;
        for (int64_t j = 0; j < visible; ++j) tile_max = std::max(tile_max, row[j]);
        const float old_max = running_max[i - r0];
        const float new_max = std::max(old_max, tile_max);
        float tile_sum = 0.0f;
        for (int64_t j = 0; j < visible; ++j) {
          row[j] = std::exp(row[j] - new_max);
          tile_sum += row[j];
        }
        std::fill(row + visible, row + width, 0.0f);
        if (c0 > 0) {  // rescale what earlier tiles accumulated: O and l were relative to old_max
          const float correction = std::exp(old_max - new_max);
          float* O_row = O_rows + (i - r0) * d;
          for (int64_t k = 0; k < d; ++k) O_row[k] *= correction;
          running_sum[i - r0] *= correction;
        }
        running_sum[i - r0] += tile_sum;
        running_max[i - r0] = new_max;
      }
      // The first tile overwrites O (beta = 0): O holds whatever the buffer held before.
      gemm(Op::none, Op::none, rows, d, width, 1.0f, tile, Bc, head.V + c0 * d, d, c0 == 0 ? 0.0f : 1.0f, O_rows,
           d);
    }
    for (int64_t i = r0; i < r1; ++i) {
      const float inverse_sum = 1.0f / running_sum[i - r0];
      float* O_row = O_rows + (i - r0) * d;
      for (int64_t k = 0; k < d; ++k) O_row[k] *= inverse_sum;
      lse[h * N + i] = running_max[i - r0] + std::log(running_sum[i - r0]);
    }
  });
}

// ---------------------------------------------------------------------------------------------
// Backward with P materialised (standard, v1 after recomputing P, checkpoint after re-running the
// standard forward). dS overwrites P in place, which is dead after this pass.
//   pass 1 (column blocks c):  dV_c = P[:, c]ᵀ·dO
//   pass 2 (row blocks r):     dP_r = dO_r·Vᵀ, D_i = Σ_j P_ij·dP_ij over the whole row,
//                              dS_r = P_r ∘ (dP_r − D), dQ_r = scale·dS_r·K
//   pass 3 (column blocks c):  dK_c = scale·dS[:, c]ᵀ·Q
// Under the causal mask P_ij = 0 for j > i, so column block c only needs rows i ≥ c0, and row block r
// only columns j < r1. Workspace: dP rows [Br, N] per thread.

void materialised_backward(const LayerShape& s, const Tiling& t, const float* Q, const float* K, const float* V,
                           const float* dO, float* P, float* dQ, float* dK, float* dV, float* workspace) {
  const int64_t N = s.seq, d = s.head_dim, Br = t.row_block, Bc = t.col_block;
  const int64_t head_stride = N * d;
  parallel_over_blocks(s.heads_total, block_count(N, Bc), [&](int64_t h, int64_t cb) {
    const int64_t c0 = cb * Bc, width = std::min(Bc, N - c0);
    const int64_t first_row = s.causal ? c0 : 0;
    // in the forward pass this was O_i += P_ij·V_j, so dV_j += P_ijᵀ·dO_i
    gemm(Op::transpose, Op::none, width, d, N - first_row, 1.0f, P + h * N * N + first_row * N + c0, N,
         dO + h * head_stride + first_row * d, d, 0.0f, dV + h * head_stride + c0 * d, d);
  });
  parallel_over_blocks(s.heads_total, block_count(N, Br), [&](int64_t h, int64_t rb) {
    const int64_t r0 = rb * Br, r1 = std::min(N, r0 + Br), rows = r1 - r0;
    const int64_t columns = s.causal ? r1 : N;
    const HeadPointers head = HeadPointers::of(s, h, Q, K, V);
    float* dP_rows = thread_slice(workspace, Br * N);
    float* P_rows = P + h * N * N + r0 * N;
    // in the forward pass this was O_i = Σ_j P_ij·V_j, so dP_ij = dO_i·V_j
    gemm(Op::none, Op::transpose, rows, columns, d, 1.0f, dO + h * head_stride + r0 * d, d, head.V, d, 0.0f,
         dP_rows, N);
    for (int64_t i = r0; i < r1; ++i) {
      float* P_row = P_rows + (i - r0) * N;
      const float* dP_row = dP_rows + (i - r0) * N;
      const int64_t visible = visible_columns(s, i);
      float D = 0.0f;
      for (int64_t j = 0; j < visible; ++j) D += P_row[j] * dP_row[j];
      for (int64_t j = 0; j < visible; ++j) P_row[j] *= dP_row[j] - D;  // P_row now holds dS
    }
    // S_ij = scale·Q_i·K_j, so dQ_i = scale·Σ_j dS_ij·K_j
    gemm(Op::none, Op::none, rows, d, columns, s.scale, P_rows, N, head.K, d, 0.0f, dQ + h * head_stride + r0 * d,
         d);
  });
  parallel_over_blocks(s.heads_total, block_count(N, Bc), [&](int64_t h, int64_t cb) {
    const int64_t c0 = cb * Bc, width = std::min(Bc, N - c0);
    const int64_t first_row = s.causal ? c0 : 0;
    // ... and dK_j = scale·Σ_i dS_ij·Q_i
    gemm(Op::transpose, Op::none, width, d, N - first_row, s.scale, P + h * N * N + first_row * N + c0, N,
         Q + h * head_stride + first_row * d, d, 0.0f, dK + h * head_stride + c0 * d, d);
  });
}

// v1: P = exp(S − m) / l, in place over the kept S, row block by row block; masked entries become 0.
void v1_recompute_probabilities(const LayerShape& s, const Tiling& t, float* S, const float* m, const float* l) {
  const int64_t N = s.seq, Br = t.row_block;
  parallel_over_blocks(s.heads_total, block_count(N, Br), [&](int64_t h, int64_t rb) {
    const int64_t r0 = rb * Br, r1 = std::min(N, r0 + Br);
    for (int64_t i = r0; i < r1; ++i) {
      float* row = S + h * N * N + i * N;
      const int64_t visible = visible_columns(s, i);
      const float row_max = m[h * N + i], inverse_sum = 1.0f / l[h * N + i];
      for (int64_t j = 0; j < visible; ++j) row[j] = std::exp(row[j] - row_max) * inverse_sum;
      std::fill(row + visible, row + N, 0.0f);
    }
  });
}

// ---------------------------------------------------------------------------------------------
// v2 backward (FlashAttention-2 style): S and P recomputed per tile from Q, K and LSE.

struct V2Backward {
  const LayerShape& s;
  const Tiling& t;
  const float *Q, *K, *V, *dO, *lse, *D;
  float *dQ, *dK, *dV;

  // Whether tile (row block starting r0 ending r1, column block starting c0) has any visible entry.
  bool tile_needed(int64_t r1, int64_t c0) const { return !s.causal || c0 < r1; }

  // For the tile rows r0..r1 × columns c0..c0+width of head h:
  //   P_tile  = exp(scale·Q_r·K_cᵀ − LSE_r)   (masked → 0)           [Br, Bc]
  //   dS_tile = P_tile ∘ (dO_r·V_cᵀ − D_r)                             [Br, Bc]
  void tile(int64_t h, int64_t r0, int64_t r1, int64_t c0, int64_t width, float* P_tile, float* dS_tile) const {
    const int64_t N = s.seq, d = s.head_dim, Bc = t.col_block, rows = r1 - r0;
    const int64_t offset = h * N * d;
    gemm(Op::none, Op::transpose, rows, width, d, s.scale, Q + offset + r0 * d, d, K + offset + c0 * d, d, 0.0f,
         P_tile, Bc);
    gemm(Op::none, Op::transpose, rows, width, d, 1.0f, dO + offset + r0 * d, d, V + offset + c0 * d, d, 0.0f,
         dS_tile, Bc);
    for (int64_t i = r0; i < r1; ++i) {
      float* P_row = P_tile + (i - r0) * Bc;
      float* dS_row = dS_tile + (i - r0) * Bc;
      const int64_t visible = std::clamp<int64_t>(visible_columns(s, i) - c0, 0, width);
      const float row_lse = lse[h * N + i], row_D = D[h * N + i];
      for (int64_t j = 0; j < visible; ++j) {
        P_row[j] = std::exp(P_row[j] - row_lse);
        dS_row[j] = P_row[j] * (dS_row[j] - row_D);
      }
      std::fill(P_row + visible, P_row + width, 0.0f);
      std::fill(dS_row + visible, dS_row + width, 0.0f);
    }
  }

  void accumulate_dK_dV(int64_t h, int64_t r0, int64_t r1, int64_t c0, int64_t width, const float* P_tile,
                        const float* dS_tile) const {
    const int64_t N = s.seq, d = s.head_dim, Bc = t.col_block, rows = r1 - r0, offset = h * N * d;
    gemm(Op::transpose, Op::none, width, d, rows, 1.0f, P_tile, Bc, dO + offset + r0 * d, d, 1.0f,
         dV + offset + c0 * d, d);
    gemm(Op::transpose, Op::none, width, d, rows, s.scale, dS_tile, Bc, Q + offset + r0 * d, d, 1.0f,
         dK + offset + c0 * d, d);
  }

  void accumulate_dQ(int64_t h, int64_t r0, int64_t r1, int64_t c0, int64_t width, const float* dS_tile) const {
    const int64_t N = s.seq, d = s.head_dim, Bc = t.col_block, offset = h * N * d;
    gemm(Op::none, Op::none, r1 - r0, d, width, s.scale, dS_tile, Bc, K + offset + c0 * d, d, 1.0f,
         dQ + offset + r0 * d, d);
  }
};

void v2_backward(const LayerShape& s, const Tiling& t, const float* Q, const float* K, const float* V,
                 const float* O, const float* dO, const float* lse, float* dQ, float* dK, float* dV,
                 float* workspace) {
  const int64_t N = s.seq, d = s.head_dim, Br = t.row_block, Bc = t.col_block, BH = s.heads_total;
  float* D = workspace;  // [BH, N]
  float* tiles = workspace + BH * N;
  const int64_t per_thread = 2 * Br * Bc;

  // D_i = Σ_k dO_ik·O_ik over the whole row: equal to Σ_j P_ij·dP_ij, computed once, before any tile.
  parallel_over_blocks(BH, block_count(N, Br), [&](int64_t h, int64_t rb) {
    for (int64_t i = rb * Br; i < std::min(N, rb * Br + Br); ++i) {
      const float* dO_row = dO + (h * N + i) * d;
      const float* O_row = O + (h * N + i) * d;
      float sum = 0.0f;
      for (int64_t k = 0; k < d; ++k) sum += dO_row[k] * O_row[k];
      D[h * N + i] = sum;
    }
  });
  std::fill(dQ, dQ + BH * N * d, 0.0f);
  std::fill(dK, dK + BH * N * d, 0.0f);
  std::fill(dV, dV + BH * N * d, 0.0f);

  const V2Backward kernel{s, t, Q, K, V, dO, lse, D, dQ, dK, dV};
  const int threads = omp_get_max_threads();
  if (BH % threads == 0 || BH >= 4 * threads) {
    // Enough heads for every thread: a thread owns whole heads, so dQ, dK and dV accumulate
    // without conflicts and each tile is computed once.
    parallel_over_heads(BH, [&](int64_t h) {
      float* P_tile = thread_slice(tiles, per_thread);
      float* dS_tile = P_tile + Br * Bc;
      for (int64_t c0 = 0; c0 < N; c0 += Bc) {
        const int64_t width = std::min(Bc, N - c0);
        for (int64_t r0 = s.causal ? c0 / Br * Br : 0; r0 < N; r0 += Br) {
          const int64_t r1 = std::min(N, r0 + Br);
          if (!kernel.tile_needed(r1, c0)) continue;
          kernel.tile(h, r0, r1, c0, width, P_tile, dS_tile);
          kernel.accumulate_dK_dV(h, r0, r1, c0, width, P_tile, dS_tile);
          kernel.accumulate_dQ(h, r0, r1, c0, width, dS_tile);
        }
      }
    });
    return;
  }
  // Few heads: split each head over column blocks for dK, dV, then over row blocks for dQ,
  // recomputing the tiles in the second pass instead of sharing dQ between threads.
  parallel_over_blocks(BH, block_count(N, Bc), [&](int64_t h, int64_t cb) {
    float* P_tile = thread_slice(tiles, per_thread);
    float* dS_tile = P_tile + Br * Bc;
    const int64_t c0 = cb * Bc, width = std::min(Bc, N - c0);
    for (int64_t r0 = s.causal ? c0 / Br * Br : 0; r0 < N; r0 += Br) {
      const int64_t r1 = std::min(N, r0 + Br);
      if (!kernel.tile_needed(r1, c0)) continue;
      kernel.tile(h, r0, r1, c0, width, P_tile, dS_tile);
      kernel.accumulate_dK_dV(h, r0, r1, c0, width, P_tile, dS_tile);
    }
  });
  parallel_over_blocks(BH, block_count(N, Br), [&](int64_t h, int64_t rb) {
    float* P_tile = thread_slice(tiles, per_thread);
    float* dS_tile = P_tile + Br * Bc;
    const int64_t r0 = rb * Br, r1 = std::min(N, r0 + Br);
    for (int64_t c0 = 0; c0 < N && kernel.tile_needed(r1, c0); c0 += Bc) {
      const int64_t width = std::min(Bc, N - c0);
      kernel.tile(h, r0, r1, c0, width, P_tile, dS_tile);
      kernel.accumulate_dQ(h, r0, r1, c0, width, dS_tile);
    }
  });
}

HostBuffer<float> allocate_workspace(HostAllocator& allocator, int64_t elements) {
  return elements > 0 ? HostBuffer<float>(allocator, Tag::workspace, elements) : HostBuffer<float>();
}

}  // namespace

int64_t workspace_elements(Variant variant, Pass pass, const LayerShape& s, const Tiling& t, int threads) {
  const int64_t T = threads, Br = t.row_block, Bc = t.col_block, N = s.seq, BH = s.heads_total;
  const int64_t dP_rows = T * Br * N;  // materialised backward: dP of one row block per thread
  if (pass == Pass::forward) {
    switch (variant) {
      case Variant::standard: return 0;
      case Variant::v1: return T * Br * Bc;
      case Variant::v2: return T * (Br * Bc + 2 * Br);
      case Variant::checkpoint: return T * Br * N;
    }
  }
  switch (variant) {
    case Variant::standard: return dP_rows;
    case Variant::v1: return dP_rows;
    case Variant::v2: return BH * N + T * 2 * Br * Bc;
    case Variant::checkpoint: return BH * N * N + BH * N * s.head_dim + dP_rows;
  }
  return 0;
}

void forward(Variant variant, const LayerShape& s, const Tiling& t, const float* Q, const float* K, const float* V,
             float* O, KeptState& kept, HostAllocator& allocator) {
  const int64_t BH = s.heads_total, N = s.seq;
  switch (variant) {
    case Variant::standard:
      kept.scores = HostBuffer<float>(allocator, Tag::kept, BH * N * N);
      break;
    case Variant::v1:
      kept.scores = HostBuffer<float>(allocator, Tag::kept, BH * N * N);
      kept.row_max = HostBuffer<float>(allocator, Tag::kept, BH * N);
      kept.row_sum = HostBuffer<float>(allocator, Tag::kept, BH * N);
      break;
    case Variant::v2:
      kept.lse = HostBuffer<float>(allocator, Tag::kept, BH * N);
      break;
    case Variant::checkpoint:
      break;
  }
  HostBuffer<float> workspace =
      allocate_workspace(allocator, workspace_elements(variant, Pass::forward, s, t, omp_get_max_threads()));
  switch (variant) {
    case Variant::standard: standard_forward(s, t, Q, K, V, O, kept.scores.data()); break;
    case Variant::v1:
      v1_forward(s, t, Q, K, V, O, kept.scores.data(), kept.row_max.data(), kept.row_sum.data(), workspace.data());
      break;
    case Variant::v2: v2_forward(s, t, Q, K, V, O, kept.lse.data(), workspace.data()); break;
    case Variant::checkpoint: checkpoint_forward(s, t, Q, K, V, O, workspace.data()); break;
  }
}

void backward(Variant variant, const LayerShape& s, const Tiling& t, const float* Q, const float* K, const float* V,
              const float* O, const float* dO, KeptState& kept, float* dQ, float* dK, float* dV,
              HostAllocator& allocator) {
  const int64_t BH = s.heads_total, N = s.seq, d = s.head_dim;
  const int threads = omp_get_max_threads();
  HostBuffer<float> workspace =
      allocate_workspace(allocator, workspace_elements(variant, Pass::backward, s, t, threads));
  float* dP_rows = workspace.data();
  switch (variant) {
    case Variant::standard:
      materialised_backward(s, t, Q, K, V, dO, kept.scores.data(), dQ, dK, dV, dP_rows);
      break;
    case Variant::v1:
      v1_recompute_probabilities(s, t, kept.scores.data(), kept.row_max.data(), kept.row_sum.data());
      materialised_backward(s, t, Q, K, V, dO, kept.scores.data(), dQ, dK, dV, dP_rows);
      break;
    case Variant::v2:
      v2_backward(s, t, Q, K, V, O, dO, kept.lse.data(), dQ, dK, dV, workspace.data());
      break;
    case Variant::checkpoint: {
      // Re-run the whole standard forward of this layer (P and O), then the standard backward.
      float* P = workspace.data();
      float* O_recomputed = P + BH * N * N;
      dP_rows = O_recomputed + BH * N * d;
      standard_forward(s, t, Q, K, V, O_recomputed, P);
      materialised_backward(s, t, Q, K, V, dO, P, dQ, dK, dV, dP_rows);
      break;
    }
  }
  workspace.reset();
  kept = KeptState{};
}

}  // namespace flashbench::cpu
