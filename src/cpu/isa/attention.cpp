// The attention kernels of the CPU (attention.hpp), compiled once per ISA (prologue.hpp).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <immintrin.h>
#include <limits>

#include <fmt/format.h>

#include "flashbench/core/errors.hpp"
#include "flashbench/core/storage.hpp"
#include "flashbench/cpu/attention.hpp"
#include "flashbench/cpu/gemm.hpp"

#include "prologue.hpp"
#include "kernels.hpp"
#include "vector_math.hpp"

// Per query head h, with N query rows and N_k key rows of d features (K, V those of head h / r):
//   forward   S = scale·Q·Kᵀ, P = softmax(S) row-wise (masked entries 0), O = P·V
//   backward  dV = Pᵀ·dO, dP = dO·Vᵀ, D_i = Σ_j P_ij·dP_ij = Σ_k dO_ik·O_ik,
//             dS = P ∘ (dP − D), dQ = scale·dS·K, dK = scale·dSᵀ·Q  (seed 003, docs/articles.md)
// D is a sum over the whole row i; a tiled kernel must never sum it inside one tile (the bug in
// seed 000's tile code, docs/articles.md).

namespace flashbench::cpu::FLASHBENCH_CPU_ISA {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

int64_t block_count(int64_t n, int64_t block) { return (n + block - 1) / block; }

// N_k − N: under the causal mask row i sees columns 0 … i + offset (bottom-right aligned).
int64_t causal_offset(const LayerShape& s) { return s.key_rows() - s.seq; }

// Columns row i attends to: all N_k, or the first i + N_k − N + 1 of them under the causal mask
// (none for the first N − N_k rows when N > N_k).
int64_t visible_columns(const LayerShape& s, int64_t row) {
  return s.causal ? std::clamp<int64_t>(row + causal_offset(s) + 1, 0, s.key_rows()) : s.key_rows();
}

// Columns any row of a block ending at row r1 (exclusive) attends to: those of its last row.
int64_t block_columns(const LayerShape& s, int64_t r1) { return visible_columns(s, r1 - 1); }

// The first row that sees column j: under the causal mask j − (N_k − N), clamped to [0, N].
int64_t first_row_seeing(const LayerShape& s, int64_t j) {
  return s.causal ? std::clamp<int64_t>(j - causal_offset(s), 0, s.seq) : 0;
}

// The first row that sees any column (rows before it are fully masked): N − N_k when causal and N > N_k.
int64_t first_live_row(const LayerShape& s) { return first_row_seeing(s, 0); }

// The dropout mask's element index of weight (i, j) of query head h: (h·N + i)·N_k + j.
uint64_t weight_index(const LayerShape& s, int64_t h, int64_t i, int64_t j) {
  return uint64_t((h * s.seq + i) * s.key_rows() + j);
}

// Row i of head h, columns [c0, c0 + width) held in P_row[0, width): P̃ = P ∘ Z/(1 − p) into
// dropped_row (may be P_row), and Z into mask_row (1 = kept) where given.
void drop_row(const LayerShape& s, int64_t h, int64_t i, int64_t c0, const float* P_row, int64_t width,
              float* dropped_row, uint8_t* mask_row) {
  constexpr int64_t kChunk = 64;
  float factor[kChunk];
  for (int64_t j0 = 0; j0 < width; j0 += kChunk) {
    const int64_t count = std::min(kChunk, width - j0);
    s.dropout.factors(weight_index(s, h, i, c0 + j0), count, factor);
    for (int64_t j = 0; j < count; ++j) {
      dropped_row[j0 + j] = P_row[j0 + j] * factor[j];
      if (mask_row) mask_row[j0 + j] = factor[j] != 0.0f;
    }
  }
}

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

// row[0:visible] = softmax(row[0:visible]); row[visible:width] = 0 (all of it for a fully masked row).
void softmax_row(float* row, int64_t visible, int64_t width) {
  if (visible == 0) {
    std::fill(row, row + width, 0.0f);
    return;
  }
  const float max = row_max(row, visible);
  const float sum = exp_scaled_shifted_sum(row, visible, 1.0f, max);
  scale_row(row, visible, 1.0f / sum);
  std::fill(row + visible, row + width, 0.0f);
}

// Σ_j exp(row[j] − shift) over row[0:n], row unchanged.
float exp_shifted_sum(const float* row, int64_t n, float shift) {
  using namespace simd;
  vec sum{};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) sum += simd::exp(load(row + j) - shift);
  if (j < n) sum += simd::exp(load_partial(row + j, n - j, kNegInf) - shift);
  return reduce_sum(sum);
}

// out[0:visible] = exp(in[0:visible] − shift) · factor; out[visible:width] = 0. (out may be in.)
void exp_shifted_scaled(const float* in, float* out, int64_t visible, int64_t width, float shift, float factor) {
  using namespace simd;
  int64_t j = 0;
  for (; j + kLanes <= visible; j += kLanes) store(out + j, simd::exp(load(in + j) - shift) * factor);
  if (j < visible) store_partial(out + j, simd::exp(load_partial(in + j, visible - j) - shift) * factor, visible - j);
  std::fill(out + visible, out + width, 0.0f);
}

// dst[c, r] = factor · src[r, c] for src [rows, cols] (leading dim ld_src) into dst [cols, ·]
// (leading dim ld_dst); dst[c, rows:rows_padded] = 0, so a padded tile holds only finite values.
void transpose(const float* src, int64_t ld_src, int64_t rows, int64_t cols, float factor, float* dst,
               int64_t ld_dst, int64_t rows_padded) {
  constexpr int64_t kBlock = simd::kLanes;  // whole blocks go through registers, edges element-wise
  for (int64_t r0 = 0; r0 < rows; r0 += kBlock)
    for (int64_t c0 = 0; c0 < cols; c0 += kBlock) {
      if (r0 + kBlock <= rows && c0 + kBlock <= cols) {
        simd::transpose_block(src + r0 * ld_src + c0, ld_src, dst + c0 * ld_dst + r0, ld_dst, factor);
        continue;
      }
      for (int64_t c = c0; c < std::min(cols, c0 + kBlock); ++c)
        for (int64_t r = r0; r < std::min(rows, r0 + kBlock); ++r) dst[c * ld_dst + r] = factor * src[r * ld_src + c];
    }
  for (int64_t c = 0; c < cols; ++c) std::fill(dst + c * ld_dst + rows, dst + c * ld_dst + rows_padded, 0.0f);
}

// n rounded up to whole SIMD registers.
int64_t padded_to_lanes(int64_t n) { return (n + simd::kLanes - 1) / simd::kLanes * simd::kLanes; }

// A rectangle of one head's score matrix that v2 computes as one product: rows [row_begin, row_end) ×
// columns [col_begin, col_end). `on_diagonal`: row i of it sees only its columns up to i.
struct Piece {
  int64_t row_begin, row_end, col_begin, col_end;
  bool on_diagonal;
};

// Calls fn(piece) for the pieces of rows [r0, r1) × columns [c0, c1) that hold visible entries, in
// increasing column order; rows r0 … r1−1 must all see column 0 (r0 ≥ first_live_row). Without the
// causal mask that is the whole rectangle in Bc-wide tiles. With it (offset o = N_k − N), the columns
// before r0 + o (which every row sees) in Bc-wide tiles, then the columns r0 + o … r1 − 1 + o in
// chunks of Bg (the diagonal block), each with only the rows from the first that sees its first
// column on: rows that see none of a chunk are not computed, and a chunk computes Bg·Bg/2 masked
// entries where a whole diagonal tile would compute Br·Br/2. Over a head that is N·Bg/2 wasted entries
// instead of N·Br/2 (1.6 % of the useful N²/2 instead of 3.1 % at N = 2048, Bg = 32, Br = 64).
template <class Fn>
void for_each_piece(const LayerShape& s, const Tiling& t, int64_t r0, int64_t r1, int64_t c0, int64_t c1, Fn&& fn) {
  const int64_t o = causal_offset(s);
  const int64_t full_end = s.causal ? std::clamp(r0 + o, c0, c1) : c1;
  for (int64_t c = c0; c < full_end; c += t.col_block) fn(Piece{r0, r1, c, std::min(c + t.col_block, full_end), false});
  if (!s.causal) return;
  const int64_t diagonal_end = std::min(c1, r1 + o);
  for (int64_t a = std::max(c0, r0 + o); a < diagonal_end; a += t.diagonal_block)
    fn(Piece{a - o, r1, a, std::min(a + t.diagonal_block, diagonal_end), true});
}

// Tensors of one query head: its Q rows and the K, V of the K/V head it reads.
struct HeadPointers {
  const float* Q;
  const float* K;
  const float* V;
  static HeadPointers of(const LayerShape& s, int64_t h, const float* Q, const float* K, const float* V) {
    const int64_t kv_offset = h / s.group_size * s.key_rows() * s.head_dim;
    return {Q + h * s.seq * s.head_dim, K + kv_offset, V + kv_offset};
  }
};

// P rows r0..r1 of one head, written to P_rows [r1-r0, N_k] (leading dimension N_k): the standard forward.
void probability_rows(const LayerShape& s, const HeadPointers& head, int64_t r0, int64_t r1, float* P_rows) {
  const int64_t Nk = s.key_rows(), d = s.head_dim, rows = r1 - r0;
  const int64_t columns = block_columns(s, r1);  // no row of the block sees past it
  this_isa::gemm(Op::none, Op::transpose, rows, columns, d, s.scale, head.Q + r0 * d, d, head.K, d, 0.0f, P_rows, Nk);
  for (int64_t i = r0; i < r1; ++i) softmax_row(P_rows + (i - r0) * Nk, visible_columns(s, i), Nk);
}

// O rows r0..r1 = P_rows · V, with P_rows [r1-r0, N_k] (leading dimension N_k); rows that see nothing get 0.
void output_rows(const LayerShape& s, const HeadPointers& head, int64_t r0, int64_t r1, const float* P_rows,
                 float* O_head) {
  const int64_t Nk = s.key_rows(), d = s.head_dim;
  this_isa::gemm(Op::none, Op::none, r1 - r0, d, block_columns(s, r1), 1.0f, P_rows, Nk, head.V, d, 0.0f, O_head + r0 * d, d);
}

// ---------------------------------------------------------------------------------------------
// standard / checkpoint forward: P materialised row block by row block.

// With dropout it keeps P̃ and the mask Z beside P (what a framework's softmax, dropout and matmul
// save), and O = P̃·V. A null O computes P (P̃, Z) alone: checkpoint's recompute, whose backward reads
// no O.
void standard_forward(const LayerShape& s, const Tiling& t, const float* Q, const float* K, const float* V,
                      float* O, float* P, float* dropped, uint8_t* mask) {
  const int64_t N = s.seq, Nk = s.key_rows(), Br = t.row_block;
  parallel_over_blocks(s.heads_total, block_count(N, Br), [&](int64_t h, int64_t rb) {
    const int64_t r0 = rb * Br, r1 = std::min(N, r0 + Br);
    const HeadPointers head = HeadPointers::of(s, h, Q, K, V);
    const int64_t rows_offset = (h * N + r0) * Nk;
    probability_rows(s, head, r0, r1, P + rows_offset);
    const float* weights = P + rows_offset;
    if (s.dropout.active()) {
      for (int64_t i = r0; i < r1; ++i)
        drop_row(s, h, i, 0, P + rows_offset + (i - r0) * Nk, Nk, dropped + rows_offset + (i - r0) * Nk,
                 mask + rows_offset + (i - r0) * Nk);
      weights = dropped + rows_offset;
    }
    if (O) output_rows(s, head, r0, r1, weights, O + h * N * s.head_dim);
  });
}

// Same arithmetic, but each row block's P lives only in the thread's workspace [Br, N_k].
void checkpoint_forward(const LayerShape& s, const Tiling& t, const float* Q, const float* K, const float* V,
                        float* O, float* workspace) {
  const int64_t N = s.seq, Br = t.row_block;
  parallel_over_blocks(s.heads_total, block_count(N, Br), [&](int64_t h, int64_t rb) {
    const int64_t r0 = rb * Br, r1 = std::min(N, r0 + Br);
    const HeadPointers head = HeadPointers::of(s, h, Q, K, V);
    float* P_rows = thread_slice(workspace, Br * s.key_rows());
    probability_rows(s, head, r0, r1, P_rows);
    if (s.dropout.active())  // the mask regenerated, as a framework's checkpoint replays the generator
      for (int64_t i = r0; i < r1; ++i)
        drop_row(s, h, i, 0, P_rows + (i - r0) * s.key_rows(), s.key_rows(), P_rows + (i - r0) * s.key_rows(), nullptr);
    output_rows(s, head, r0, r1, P_rows, O + h * N * s.head_dim);
  });
}

// ---------------------------------------------------------------------------------------------
// v1 forward: keep S and the row statistics m, l; O accumulated from P tiles [Br, Bc].

// Rows r0..r1 of one head's scores [rows, N_k] rounded to s.score_storage and widened back.
[[gnu::noinline]] void round_in_place(const LayerShape& s, float* S_rows, int64_t r0, int64_t r1) {
  for (int64_t i = r0; i < r1; ++i) {
    float* row = S_rows + (i - r0) * s.key_rows();
    const int64_t visible = visible_columns(s, i);
    for (int64_t j = 0; j < visible; ++j) row[j] = widen_half(s.score_storage, round_to_half(s.score_storage, row[j]));
  }
}

void v1_forward(const LayerShape& s, const Tiling& t, const float* Q, const float* K, const float* V, float* O,
                float* S, float* m, float* l, float* dropped, uint8_t* mask, float* workspace) {
  const int64_t N = s.seq, Nk = s.key_rows(), d = s.head_dim, Br = t.row_block, Bc = t.col_block;
  parallel_over_blocks(s.heads_total, block_count(N, Br), [&](int64_t h, int64_t rb) {
    const int64_t r0 = rb * Br, r1 = std::min(N, r0 + Br), rows = r1 - r0;
    const int64_t columns = block_columns(s, r1);
    const HeadPointers head = HeadPointers::of(s, h, Q, K, V);
    float* S_rows = S + h * N * Nk + r0 * Nk;
    float* m_rows = m + h * N + r0;
    float* l_rows = l + h * N + r0;
    this_isa::gemm(Op::none, Op::transpose, rows, columns, d, s.scale, head.Q + r0 * d, d, head.K, d, 0.0f, S_rows, Nk);
    // The statistics of S as it will be kept (LayerShape says why), in a pass of its own so that the
    // statistics loop below stays as tight as in fp32.
    if (s.score_storage != Dtype::fp32) round_in_place(s, S_rows, r0, r1);
    for (int64_t i = r0; i < r1; ++i) {  // a fully masked row: m = −inf, l = 0, its P all 0 below
      const float* row = S_rows + (i - r0) * Nk;
      const int64_t visible = visible_columns(s, i);
      m_rows[i - r0] = row_max(row, visible);
      l_rows[i - r0] = exp_shifted_sum(row, visible, m_rows[i - r0]);
    }
    float* P_tile = thread_slice(workspace, Br * Bc);
    float* O_rows = O + h * N * d + r0 * d;
    if (columns == 0) std::fill(O_rows, O_rows + rows * d, 0.0f);  // rows that see nothing
    for (int64_t c0 = 0; c0 < columns; c0 += Bc) {
      const int64_t width = std::min(Bc, columns - c0);
      for (int64_t i = r0; i < r1; ++i) {
        const float* S_row = S_rows + (i - r0) * Nk + c0;
        float* P_row = P_tile + (i - r0) * Bc;
        const int64_t visible = std::clamp<int64_t>(visible_columns(s, i) - c0, 0, width);
        exp_shifted_scaled(S_row, P_row, visible, width, m_rows[i - r0], 1.0f / l_rows[i - r0]);
        if (s.dropout.active()) {  // keep P̃ and Z as standard does; O from P̃
          const int64_t offset = (h * N + i) * Nk + c0;
          drop_row(s, h, i, c0, P_row, width, P_row, mask + offset);
          std::copy_n(P_row, width, dropped + offset);
        }
      }
      this_isa::gemm(Op::none, Op::none, rows, d, width, 1.0f, P_tile, Bc, head.V + c0 * d, d, c0 == 0 ? 0.0f : 1.0f,
           O_rows, d);
    }
    if (s.dropout.active())  // columns no row of the block sees: P̃ = 0 there, as in standard's
      for (int64_t i = r0; i < r1; ++i) {
        std::fill(dropped + (h * N + i) * Nk + columns, dropped + (h * N + i + 1) * Nk, 0.0f);
        std::fill(mask + (h * N + i) * Nk + columns, mask + (h * N + i + 1) * Nk, uint8_t{0});
      }
  });
}

// ---------------------------------------------------------------------------------------------
// v2 forward: online softmax over column tiles; keeps O and LSE = m + log(l).
//
// A work item is (head, row block r of Br rows). The tile is computed transposed, Sᵀ = K_c·(scale·Q_r)ᵀ
// [Bc, Br], so that every matrix product reads its operands in place (no packing: Q_rᵀ is transposed
// once per item) and the softmax statistics of Br rows are SIMD registers across each tile row:
//   Sᵀ_tile = K_c · Q̃ᵀ          with Q̃ᵀ = scale·Q_rᵀ [d, Br]
//   m' = max(m, max_j S_ij),  α = exp(m − m'),  Pᵀ_tile = exp(Sᵀ_tile − m'),  l' = α·l + Σ_j P_ij
//   O_r = α ∘ O_r + (Pᵀ_tile)ᵀ · V_c
// Under the causal mask the tiles are the pieces of `for_each_piece`: the diagonal ones are narrower
// and cover only the rows that see them.
// Per thread (the working set that stays in L2): Q̃ᵀ, the tile, m, l, α, plus the K_c and V_c tiles
// and the O_r rows it reads: (d·Br' + max(Bc, Bg)·Br' + 3·Br') floats of workspace, Br' = Br padded
// to a SIMD register.

struct V2ForwardScratch {
  float* Qt;          // [d, Br']  scale·Q_rᵀ, zero past the block's rows
  float* St;          // [max(Bc, Bg), Br'] Sᵀ of one piece, then Pᵀ
  float* row_max;     // [Br'] m
  float* row_sum;     // [Br'] l
  float* correction;  // [Br'] α of the latest piece
  static int64_t tile_columns(const Tiling& t) { return std::max(t.col_block, t.diagonal_block); }
  static int64_t elements(const LayerShape& s, const Tiling& t) {
    const int64_t Brp = padded_to_lanes(t.row_block);
    return s.head_dim * Brp + tile_columns(t) * Brp + 3 * Brp;
  }
  static V2ForwardScratch of(float* base, const LayerShape& s, const Tiling& t) {
    const int64_t Brp = padded_to_lanes(t.row_block);
    float* Qt = base;
    float* St = Qt + s.head_dim * Brp;
    float* row_max = St + tile_columns(t) * Brp;
    return {Qt, St, row_max, row_max + Brp, row_max + 2 * Brp};
  }
};

// The online-softmax step over one transposed tile St [width, rows] (leading dim ld), `rows` a whole
// number of SIMD registers, kLanes rows per register. Every row sees at least one column of the tile
// (a masked entry is -inf), so the new maximum is finite. Padded rows hold finite values and are never
// read back.
void online_softmax_step(float* St, int64_t ld, int64_t width, int64_t rows, float* row_max, float* row_sum,
                         float* correction) {
  using namespace simd;
  for (int64_t i0 = 0; i0 < rows; i0 += kLanes) {
    const vec old_max = load(row_max + i0);
    vec new_max = old_max;
    for (int64_t j = 0; j < width; ++j) new_max = simd::max(new_max, load(St + j * ld + i0));
    const vec alpha = simd::exp(old_max - new_max);  // exp(-inf − finite) = 0 on a row's first piece
    vec sum = load(row_sum + i0) * alpha;
    for (int64_t j = 0; j < width; ++j) {
      const vec p = simd::exp(load(St + j * ld + i0) - new_max);
      store(St + j * ld + i0, p);
      sum += p;
    }
    store(row_max + i0, new_max);
    store(row_sum + i0, sum);
    store(correction + i0, alpha);
  }
}

// Pᵀ [width, ·] (leading dim ld) of rows [i0, i1) and columns [c0, c0 + width) of head h, row i0
// first: multiplied by Z/(1 − p).
void drop_transposed_tile(const LayerShape& s, int64_t h, int64_t i0, int64_t i1, int64_t c0, int64_t width,
                          float* Pt, int64_t ld) {
  constexpr int64_t kChunk = 64;
  float factor[kChunk];
  for (int64_t i = i0; i < i1; ++i)
    for (int64_t j0 = 0; j0 < width; j0 += kChunk) {
      const int64_t count = std::min(kChunk, width - j0);
      s.dropout.factors(weight_index(s, h, i, c0 + j0), count, factor);
      for (int64_t j = 0; j < count; ++j) Pt[(j0 + j) * ld + (i - i0)] *= factor[j];
    }
}

void v2_forward(const LayerShape& s, const Tiling& t, const float* Q, const float* K, const float* V, float* O,
                float* lse, float* workspace) {
  const int64_t N = s.seq, Nk = s.key_rows(), d = s.head_dim, Br = t.row_block, Brp = padded_to_lanes(Br);
  // Rows before the first live one see no column: O = 0 and LSE = +inf (so that exp(S − LSE) = 0), as
  // FlashAttention leaves them; the row blocks start at the first live row, so every row of a block
  // sees column 0 and the diagonal chunks stay aligned to whole SIMD registers.
  const int64_t live = first_live_row(s);
  for (int64_t h = 0; h < s.heads_total; ++h) {
    std::fill(O + h * N * d, O + (h * N + live) * d, 0.0f);
    std::fill(lse + h * N, lse + h * N + live, std::numeric_limits<float>::infinity());
  }
  const int64_t per_thread = V2ForwardScratch::elements(s, t), blocks = block_count(N - live, Br);
  parallel_over_blocks(s.heads_total, blocks, [&](int64_t h, int64_t item) {
    // Under the causal mask a row block costs in proportion to its last row: hand out the dearest
    // first, so that the cheap ones fill the gaps at the end.
    const int64_t rb = s.causal ? blocks - 1 - item : item;
    const int64_t r0 = live + rb * Br, r1 = std::min(N, r0 + Br), rows = r1 - r0;
    const HeadPointers head = HeadPointers::of(s, h, Q, K, V);
    const V2ForwardScratch w = V2ForwardScratch::of(thread_slice(workspace, per_thread), s, t);
    float* O_rows = O + h * N * d + r0 * d;
    transpose(head.Q + r0 * d, d, rows, d, s.scale, w.Qt, Brp, Brp);
    std::fill(w.row_max, w.row_max + Brp, kNegInf);
    std::fill(w.row_sum, w.row_sum + Brp, 0.0f);
    // Pieces start at r0 plus a multiple of the diagonal block, a whole number of SIMD registers, so
    // `first` below is one too and the softmax step runs on whole registers.
    for_each_piece(s, t, r0, r1, 0, Nk, [&](const Piece& piece) {
      const int64_t first = piece.row_begin - r0, c0 = piece.col_begin, width = piece.col_end - c0;
      float* St = w.St + first;
      // Sᵀ_piece [width, Br'−first] = K_c [width, d] · Q̃ᵀ [d, first:Br']
      this_isa::gemm(Op::none, Op::none, width, Brp - first, d, 1.0f, head.K + c0 * d, d, w.Qt + first, Brp, 0.0f, St, Brp);
      if (piece.on_diagonal)  // column c0+j is masked for the first j rows of the piece
        for (int64_t j = 0; j < width; ++j) std::fill(St + j * Brp, St + j * Brp + j, kNegInf);
      online_softmax_step(St, Brp, width, Brp - first, w.row_max + first, w.row_sum + first, w.correction + first);
      // Dropout after the statistics (they normalise the undropped P): Pᵀ_piece ∘= Zᵀ/(1 − p), the
      // mask drawn for these weights and nothing stored.
      if (s.dropout.active()) drop_transposed_tile(s, h, r0 + first, r1, c0, width, St, Brp);
      if (c0 > 0)  // what earlier pieces accumulated in O was relative to the old maximum
        for (int64_t i = first; i < rows; ++i) scale_row(O_rows + i * d, d, w.correction[i]);
      // O_r (+)= (Pᵀ_piece)ᵀ · V_c; the piece at column 0 covers every row of the block and comes
      // first, so it overwrites O (beta = 0), which held anything before.
      this_isa::gemm(Op::transpose, Op::none, rows - first, d, width, 1.0f, St, Brp, head.V + c0 * d, d, c0 == 0 ? 0.0f : 1.0f,
           O_rows + first * d, d);
    });
    for (int64_t i = 0; i < rows; ++i) {
      scale_row(O_rows + i * d, d, 1.0f / w.row_sum[i]);
      lse[h * N + r0 + i] = w.row_max[i] + std::log(w.row_sum[i]);
    }
  });
}

// ---------------------------------------------------------------------------------------------
// Backward with P materialised (standard, v1 after recomputing P, checkpoint after recomputing P as
// the standard forward computes it). dS overwrites P in place, which is dead after this pass.
//   pass 1 (K/V head g, column blocks c):  dV_c = Σ_h P_h[:, c]ᵀ·dO_h over g's query heads h
//   pass 2 (query head h, row blocks r):   dP_r = dO_r·Vᵀ, D_i = Σ_j P_ij·dP_ij over the whole row,
//                                          dS_r = P_r ∘ (dP_r − D), dQ_r = scale·dS_r·K
//   pass 3 (K/V head g, column blocks c):  dK_c = scale·Σ_h dS_h[:, c]ᵀ·Q_h
// The sums over a group run inside one work item, so dK and dV are written by one thread and need no
// reduction buffer. Under the causal mask P_ij = 0 for j > i + N_k − N, so column block c only needs
// the rows from first_row_seeing(c0) on, and row block r only its block_columns. Workspace: dP rows
// [Br, N_k] per thread. With dropout P̃ is read by pass 1 alone, so the dP rows may lie over it
// (checkpoint's recomputed P̃ is workspace; standard's and v1's are kept).

int64_t dP_rows_elements(const LayerShape& s, const Tiling& t, int threads) {
  return int64_t{threads} * t.row_block * s.key_rows();
}

void materialised_backward(const LayerShape& s, const Tiling& t, const float* Q, const float* K, const float* V,
                           const float* dO, float* P, const float* dropped, const uint8_t* mask, float* dQ, float* dK,
                           float* dV, float* workspace) {
  const int64_t N = s.seq, Nk = s.key_rows(), d = s.head_dim, Br = t.row_block, Bc = t.col_block;
  const int64_t r = s.group_size, q_stride = N * d, kv_stride = Nk * d, p_stride = N * Nk;
  // in the forward pass this was O_i += P_ij·V_j, so dV_j += P_ijᵀ·dO_i (with `scores` = P, `rows` =
  // dO, factor 1); S_ij = scale·Q_i·K_j, so dK_j += scale·dS_ijᵀ·Q_i (scores = dS, rows = Q, scale).
  auto column_pass = [&](const float* scores, const float* rows_of, float factor, float* out) {
    parallel_over_blocks(s.kv_heads_total(), block_count(Nk, Bc), [&](int64_t g, int64_t cb) {
      const int64_t c0 = cb * Bc, width = std::min(Bc, Nk - c0);
      const int64_t first_row = first_row_seeing(s, c0);
      for (int64_t h = g * r; h < (g + 1) * r; ++h)
        this_isa::gemm(Op::transpose, Op::none, width, d, N - first_row, factor, scores + h * p_stride + first_row * Nk + c0, Nk,
             rows_of + h * q_stride + first_row * d, d, h == g * r ? 0.0f : 1.0f, out + g * kv_stride + c0 * d, d);
    });
  };
  // With dropout O = P̃·V: dV = P̃ᵀ·dO, and dP = dP̃ ∘ Z/(1 − p) with dP̃ = dO·Vᵀ.
  const bool dropout = s.dropout.active();
  column_pass(dropout ? dropped : P, dO, 1.0f, dV);
  parallel_over_blocks(s.heads_total, block_count(N, Br), [&](int64_t h, int64_t rb) {
    const int64_t r0 = rb * Br, r1 = std::min(N, r0 + Br), rows = r1 - r0;
    const int64_t columns = block_columns(s, r1);
    const HeadPointers head = HeadPointers::of(s, h, Q, K, V);
    float* dP_rows = thread_slice(workspace, Br * Nk);
    float* P_rows = P + h * p_stride + r0 * Nk;
    // in the forward pass this was O_i = Σ_j P_ij·V_j, so dP_ij = dO_i·V_j
    this_isa::gemm(Op::none, Op::transpose, rows, columns, d, 1.0f, dO + h * q_stride + r0 * d, d, head.V, d, 0.0f,
         dP_rows, Nk);
    for (int64_t i = r0; i < r1; ++i) {
      float* P_row = P_rows + (i - r0) * Nk;
      const float* dP_row = dP_rows + (i - r0) * Nk;
      const int64_t visible = visible_columns(s, i);
      if (dropout) {
        float* dP_mutable = dP_rows + (i - r0) * Nk;
        const uint8_t* Z = mask + (h * N + i) * Nk;
        for (int64_t j = 0; j < visible; ++j) dP_mutable[j] = Z[j] ? dP_mutable[j] * s.dropout.scale : 0.0f;
      }
      const float D = dot(P_row, dP_row, visible);
      for (int64_t j = 0; j < visible; ++j) P_row[j] *= dP_row[j] - D;  // P_row now holds dS
    }
    // S_ij = scale·Q_i·K_j, so dQ_i = scale·Σ_j dS_ij·K_j
    this_isa::gemm(Op::none, Op::none, rows, d, columns, s.scale, P_rows, Nk, head.K, d, 0.0f, dQ + h * q_stride + r0 * d, d);
  });
  column_pass(P, Q, s.scale, dK);
}

// v1: P = exp(S − m) / l, in place over the kept S, row block by row block; masked entries become 0.
void v1_recompute_probabilities(const LayerShape& s, const Tiling& t, float* S, const float* m, const float* l) {
  const int64_t N = s.seq, Nk = s.key_rows(), Br = t.row_block;
  parallel_over_blocks(s.heads_total, block_count(N, Br), [&](int64_t h, int64_t rb) {
    const int64_t r0 = rb * Br, r1 = std::min(N, r0 + Br);
    for (int64_t i = r0; i < r1; ++i) {
      float* row = S + (h * N + i) * Nk;
      const int64_t visible = visible_columns(s, i);
      exp_shifted_scaled(row, row, visible, Nk, m[h * N + i], 1.0f / l[h * N + i]);
    }
  });
}

// ---------------------------------------------------------------------------------------------
// v2 backward (FlashAttention-2 style): S and P recomputed per tile from Q, K and LSE.
// For column block c (K_c, V_c fixed) and each row block r:
//   S_tile  = Q_r · K̃ᵀ_c            K̃ᵀ_c = scale·K_cᵀ [d, Bc], transposed once per column block
//   P_tile  = exp(S_tile − LSE_r)    (masked → 0)                                      [Br, Bc]
//   dP_tile = dO_r · Vᵀ_c            Vᵀ_c [d, Bc], transposed once per column block
//   dS_tile = P_tile ∘ (dP_tile − D_r)                                                 [Br, Bc]
//   dV_c += P_tileᵀ·dO_r,  dK_c += scale·dS_tileᵀ·Q_r,  dQ_r += scale·dS_tile·K_c
// Every product reads its operands in place. Per thread: the P and dS tiles and K̃ᵀ_c, Vᵀ_c, their
// rows `ld` floats apart: (2·Br + 2·d)·ld floats of workspace; with the K_c, V_c, dK_c, dV_c rows and
// one row block of Q, dO, dQ that is the working set kept in L2.

struct V2BackwardScratch {
  float* P;    // [Br, ld] (Bc columns used)
  float* dS;   // [Br, ld] dP, then dS
  float* Kt;   // [d, ld] scale·K_cᵀ
  float* Vt;   // [d, ld] V_cᵀ
  int64_t ld;  // the tiles' leading dimension
  // Bc rounded up to whole cache lines, and to an odd number of them: with Bc = 128 the rows of a
  // tile lay 512 bytes apart, so a product walking one column strip down d or Br rows touched only an
  // eighth of L1's sets and evicted its own lines (the micro-kernel waited on its B loads and
  // broadcasts); 144 floats (9 lines) spread them over every set.
  static int64_t leading_dimension(const Tiling& t) {
    constexpr int64_t kLineFloats = 16;
    const int64_t lines = (t.col_block + kLineFloats - 1) / kLineFloats;
    return (lines % 2 == 0 ? lines + 1 : lines) * kLineFloats;
  }
  static int64_t elements(const LayerShape& s, const Tiling& t) {
    return (2 * t.row_block + 2 * s.head_dim) * leading_dimension(t);
  }
  static V2BackwardScratch of(float* base, const LayerShape& s, const Tiling& t) {
    const int64_t ld = leading_dimension(t), tile = t.row_block * ld, panel = s.head_dim * ld;
    return {base, base + tile, base + 2 * tile, base + 2 * tile + panel, ld};
  }
};

struct V2Backward {
  const LayerShape& s;
  const Tiling& t;
  const float *Q, *K, *V, *dO, *lse, *D;
  float *dQ, *dK, *dV;

  int64_t q_offset(int64_t h) const { return h * s.seq * s.head_dim; }             // query head h
  int64_t kv_offset(int64_t h) const { return h / s.group_size * s.key_rows() * s.head_dim; }  // its K/V head

  // K̃ᵀ_c and Vᵀ_c of column block c0..c0+width of K/V head g.
  void load_column_block(int64_t g, int64_t c0, int64_t width, const V2BackwardScratch& w) const {
    const int64_t d = s.head_dim, offset = g * s.key_rows() * d;
    transpose(K + offset + c0 * d, d, width, d, s.scale, w.Kt, w.ld, width);
    transpose(V + offset + c0 * d, d, width, d, 1.0f, w.Vt, w.ld, width);
  }

  // D_i = Σ_k dO_ik·O_ik over the whole row, for rows r0..r1 of head h: equal to Σ_j P_ij·dP_ij,
  // computed once, before any tile of these rows.
  void row_dot(int64_t h, int64_t r0, int64_t r1, const float* O, float* D_out) const {
    const int64_t N = s.seq, d = s.head_dim;
    for (int64_t i = r0; i < r1; ++i) D_out[h * N + i] = dot(dO + (h * N + i) * d, O + (h * N + i) * d, d);
  }

  // P and dS of `piece` of query head h, a piece of the column block loaded from c0, into the first
  // rows × columns of the scratch tiles (leading dim w.ld).
  void tile(int64_t h, const Piece& piece, int64_t c0, const V2BackwardScratch& w) const {
    using namespace simd;
    const int64_t N = s.seq, d = s.head_dim, ld = w.ld, offset = q_offset(h);
    const int64_t rows = piece.row_end - piece.row_begin, width = piece.col_end - piece.col_begin;
    const int64_t panel_column = piece.col_begin - c0;
    this_isa::gemm(Op::none, Op::none, rows, width, d, 1.0f, Q + offset + piece.row_begin * d, d, w.Kt + panel_column, ld, 0.0f,
         w.P, ld);
    this_isa::gemm(Op::none, Op::none, rows, width, d, 1.0f, dO + offset + piece.row_begin * d, d, w.Vt + panel_column, ld,
         0.0f, w.dS, ld);
    ivec lane;
    for (int64_t l = 0; l < kLanes; ++l) lane[l] = int32_t(l);
    for (int64_t i = piece.row_begin; i < piece.row_end; ++i) {
      float* P_row = w.P + (i - piece.row_begin) * ld;
      float* dS_row = w.dS + (i - piece.row_begin) * ld;
      const int64_t visible = std::clamp<int64_t>(visible_columns(s, i) - piece.col_begin, 0, width);
      const float row_lse = lse[h * N + i], row_D = D[h * N + i];
      if (s.dropout.active()) {
        dropped_row(h, i, piece.col_begin, width, visible, row_lse, row_D, P_row, dS_row);
        continue;
      }
      for (int64_t j = 0; j < width; j += kLanes) {
        const int64_t lanes = std::min(kLanes, width - j);
        vec S = load_partial(P_row + j, lanes);
        if (visible - j < lanes) {  // masked lanes: P = exp(-inf) = 0, hence dS = 0
          const ivec masked = lane >= int32_t(std::max<int64_t>(visible - j, 0));
          S = masked ? broadcast(kNegInf) : S;
        }
        const vec P = simd::exp(S - row_lse);
        const vec dS = P * (load_partial(dS_row + j, lanes) - row_D);
        store_partial(P_row + j, P, lanes);
        store_partial(dS_row + j, dS, lanes);
      }
    }
  }

  // With dropout, one row of a tile: P = exp(S − LSE) (the undropped weights), the mask Z regenerated
  // from the generator exactly as forward drew it, then
  //   dP = dP̃ ∘ Z/(1 − p)   (O = P̃·V, so dP̃ = dO·Vᵀ is what the product left in dS_row)
  //   dS = P ∘ (dP − D)     (D = rowsum(dO ∘ O) = Σ_j P̃_ij·dP̃_ij = Σ_j P_ij·dP_ij still)
  // and P_row becomes P̃ for dV += P̃ᵀ·dO.
  void dropped_row(int64_t h, int64_t i, int64_t col_begin, int64_t width, int64_t visible, float row_lse, float row_D,
                   float* P_row, float* dS_row) const {
    constexpr int64_t kChunk = 64;
    float factor[kChunk];
    for (int64_t j0 = 0; j0 < width; j0 += kChunk) {
      const int64_t count = std::min(kChunk, width - j0);
      s.dropout.factors(weight_index(s, h, i, col_begin + j0), count, factor);
      for (int64_t j = j0; j < j0 + count; ++j) {
        const float P = j < visible ? std::exp(P_row[j] - row_lse) : 0.0f;
        dS_row[j] = P * (dS_row[j] * factor[j - j0] - row_D);
        P_row[j] = P * factor[j - j0];
      }
    }
  }

  // dK and dV of query head h's K/V head gather the pieces of all its group's query heads, so they
  // accumulate (beta = 1) into blocks that the caller cleared first.
  void accumulate_dK_dV(int64_t h, const Piece& piece, const V2BackwardScratch& w) const {
    const int64_t d = s.head_dim, ld = w.ld, q = q_offset(h), kv = kv_offset(h);
    const int64_t rows = piece.row_end - piece.row_begin, width = piece.col_end - piece.col_begin;
    // in the forward pass this was O_i += P_ij·V_j, so dV_j += P_ijᵀ·dO_i
    this_isa::gemm(Op::transpose, Op::none, width, d, rows, 1.0f, w.P, ld, dO + q + piece.row_begin * d, d, 1.0f,
         dV + kv + piece.col_begin * d, d);
    // S_ij = scale·Q_i·K_j, so dK_j += scale·dS_ijᵀ·Q_i ...
    this_isa::gemm(Op::transpose, Op::none, width, d, rows, s.scale, w.dS, ld, Q + q + piece.row_begin * d, d, 1.0f,
         dK + kv + piece.col_begin * d, d);
  }

  // ... and dQ_i += scale·dS_ij·K_j, into rows the caller cleared first.
  void accumulate_dQ(int64_t h, const Piece& piece, const V2BackwardScratch& w) const {
    const int64_t d = s.head_dim;
    const int64_t rows = piece.row_end - piece.row_begin, width = piece.col_end - piece.col_begin;
    this_isa::gemm(Op::none, Op::none, rows, d, width, s.scale, w.dS, w.ld, K + kv_offset(h) + piece.col_begin * d, d, 1.0f,
         dQ + q_offset(h) + piece.row_begin * d, d);
  }

  // Rows [first_live_row, N) in blocks of Br, as v2's forward cuts them: the index of the first block
  // with a row that sees column c0.
  int64_t first_row_block_seeing(int64_t c0) const {
    const int64_t live = first_live_row(s);
    return live + (first_row_seeing(s, c0) - live) / t.row_block * t.row_block;
  }

  // Column block c0..c1 (already loaded) against every row block of query head h that sees it: into
  // dK_c and dV_c of its K/V head, and with `with_dQ` into h's dQ rows too (the whole-head path; the
  // split path leaves dQ to its second pass).
  void column_block(int64_t h, int64_t c0, int64_t c1, bool with_dQ, const V2BackwardScratch& w) const {
    const int64_t N = s.seq, Br = t.row_block;
    for (int64_t r0 = first_row_block_seeing(c0); r0 < N; r0 += Br)
      for_each_piece(s, t, r0, std::min(N, r0 + Br), c0, c1, [&](const Piece& piece) {
        tile(h, piece, c0, w);
        accumulate_dK_dV(h, piece, w);
        if (with_dQ) accumulate_dQ(h, piece, w);
      });
  }
};

void v2_backward(const LayerShape& s, const Tiling& t, const float* Q, const float* K, const float* V,
                 const float* O, const float* dO, const float* lse, float* dQ, float* dK, float* dV,
                 float* workspace) {
  const int64_t N = s.seq, Nk = s.key_rows(), d = s.head_dim, Br = t.row_block, Bc = t.col_block;
  const int64_t BH = s.heads_total, BG = s.kv_heads_total(), r = s.group_size, live = first_live_row(s);
  float* D = workspace;  // [BH, N]
  float* scratch = workspace + BH * N;
  const int64_t per_thread = V2BackwardScratch::elements(s, t);

  const V2Backward kernel{s, t, Q, K, V, dO, lse, D, dQ, dK, dV};
  // A thread that owns whole K/V heads (with their r query heads) shares nothing and computes each
  // tile once, but the busiest thread then has ceil(BG/T) of them where a perfect split would give it
  // BG/T. Splitting heads by column blocks (dK, dV) and then row blocks (dQ) balances perfectly but
  // recomputes S and dP for dQ: 7 tile products instead of 5. Take whole heads unless that balances
  // worse than 5/7, or leaves threads with no head at all: measured (N = 2048, d = 64,
  // docs/journal/cpu-bench-2026-11-29.md) the split costs only 1.1-1.2x there, and idle threads lose more than that (12
  // heads on 16 threads: split 848-969 GFLOP/s against whole heads 786-881; 24 heads: whole heads
  // 930-1032 against 831-897).
  const int threads = omp_get_max_threads();
  const double whole_head_balance = double(BG) / threads / std::ceil(double(BG) / threads);
  const bool whole_heads = t.v2_backward == V2BackwardPath::automatic
                               ? BG >= threads && whole_head_balance >= 5.0 / 7.0
                               : t.v2_backward == V2BackwardPath::whole_heads;
  if (whole_heads) {
    parallel_over_heads(BG, [&](int64_t g) {
      const V2BackwardScratch w = V2BackwardScratch::of(thread_slice(scratch, per_thread), s, t);
      std::fill(dK + g * Nk * d, dK + (g + 1) * Nk * d, 0.0f);
      std::fill(dV + g * Nk * d, dV + (g + 1) * Nk * d, 0.0f);
      for (int64_t h = g * r; h < (g + 1) * r; ++h) {
        std::fill(dQ + h * N * d, dQ + (h + 1) * N * d, 0.0f);
        kernel.row_dot(h, live, N, O, D);  // this thread's own heads: their dO is then warm for the first tiles
      }
      for (int64_t c0 = 0; c0 < Nk; c0 += Bc) {
        const int64_t c1 = std::min(Nk, c0 + Bc);
        kernel.load_column_block(g, c0, c1 - c0, w);
        for (int64_t h = g * r; h < (g + 1) * r; ++h) kernel.column_block(h, c0, c1, true, w);
      }
    });
    return;
  }
  // Few heads: split each K/V head over column blocks for dK, dV (its query heads in turn), then each
  // query head over row blocks for dQ, recomputing the tiles in the second pass instead of sharing dQ
  // between threads. Under the causal mask the dearest blocks go first (low column blocks, high row
  // blocks).
  const int64_t column_blocks = block_count(Nk, Bc), row_blocks = block_count(N - live, Br);
  parallel_over_blocks(BH, row_blocks, [&](int64_t h, int64_t rb) {
    const int64_t r0 = live + rb * Br;
    kernel.row_dot(h, r0, std::min(N, r0 + Br), O, D);
  });
  parallel_over_blocks(BG, column_blocks, [&](int64_t g, int64_t cb) {
    const V2BackwardScratch w = V2BackwardScratch::of(thread_slice(scratch, per_thread), s, t);
    const int64_t c0 = cb * Bc, c1 = std::min(Nk, c0 + Bc);
    std::fill(dK + (g * Nk + c0) * d, dK + (g * Nk + c1) * d, 0.0f);
    std::fill(dV + (g * Nk + c0) * d, dV + (g * Nk + c1) * d, 0.0f);
    kernel.load_column_block(g, c0, c1 - c0, w);
    for (int64_t h = g * r; h < (g + 1) * r; ++h) kernel.column_block(h, c0, c1, false, w);
  });
  for (int64_t h = 0; h < BH; ++h) std::fill(dQ + h * N * d, dQ + (h * N + live) * d, 0.0f);  // rows that see nothing
  parallel_over_blocks(BH, row_blocks, [&](int64_t h, int64_t item) {
    const V2BackwardScratch w = V2BackwardScratch::of(thread_slice(scratch, per_thread), s, t);
    const int64_t rb = s.causal ? row_blocks - 1 - item : item;
    const int64_t r0 = live + rb * Br, r1 = std::min(N, r0 + Br);
    std::fill(dQ + (h * N + r0) * d, dQ + (h * N + r1) * d, 0.0f);
    for (int64_t c0 = 0; c0 < block_columns(s, r1); c0 += Bc) {
      const int64_t c1 = std::min(Nk, c0 + Bc);
      kernel.load_column_block(h / r, c0, c1 - c0, w);
      for_each_piece(s, t, r0, r1, c0, c1, [&](const Piece& piece) {
        kernel.tile(h, piece, c0, w);
        kernel.accumulate_dQ(h, piece, w);
      });
    }
  });
}

Buffer<float> allocate_workspace(MemorySpace& space, int64_t elements) {
  return elements > 0 ? Buffer<float>(space, Tag::workspace, elements) : Buffer<float>();
}

}  // namespace

void validate(const Tiling& t) {
  if (t.row_block < 1 || t.col_block < 1)
    throw UsageError(fmt::format("tiling: Br = {} and Bc = {} must be at least 1", t.row_block, t.col_block));
  if (t.diagonal_block < 1 || t.diagonal_block % simd::kLanes != 0)
    throw UsageError(fmt::format("tiling: the diagonal block Bg = {} must be a positive multiple of {} (the SIMD width)",
                                 t.diagonal_block, simd::kLanes));
}

int64_t workspace_elements(Variant variant, Pass pass, const LayerShape& s, const Tiling& t, int threads) {
  this_isa::validate(t);
  const int64_t T = threads, Br = t.row_block, Bc = t.col_block, N = s.seq, Nk = s.key_rows(), BH = s.heads_total;
  const int64_t dP_rows = dP_rows_elements(s, t, threads);  // materialised backward: dP of one row block per thread
  if (pass == Pass::forward) {
    switch (variant) {
      case Variant::standard: return 0;
      case Variant::v1: return T * Br * Bc;
      case Variant::v2: return T * V2ForwardScratch::elements(s, t);
      case Variant::checkpoint: return T * Br * Nk;
    }
  }
  switch (variant) {
    case Variant::standard: return dP_rows;
    case Variant::v1: return dP_rows;
    case Variant::v2: return BH * N + T * V2BackwardScratch::elements(s, t);
    case Variant::checkpoint: {
      // What standard keeps, recomputed: P, and with dropout P̃ and the mask (bytes, in whole
      // floats); the dP rows lie over P̃, which is dead once dV is made.
      const int64_t scores = BH * N * Nk;
      if (!s.dropout.active()) return scores + dP_rows;
      return scores + std::max(scores, dP_rows) + (scores + 3) / 4;
    }
  }
  return 0;
}

void forward(Variant variant, const LayerShape& s, const Tiling& t, const float* Q, const float* K, const float* V,
             float* O, const KeptView& kept, MemorySpace& space) {
  this_isa::validate(t);
  Buffer<float> workspace =
      allocate_workspace(space, this_isa::workspace_elements(variant, Pass::forward, s, t, omp_get_max_threads()));
  switch (variant) {
    case Variant::standard: standard_forward(s, t, Q, K, V, O, kept.scores, kept.dropped, kept.mask); break;
    case Variant::v1:
      v1_forward(s, t, Q, K, V, O, kept.scores, kept.row_max, kept.row_sum, kept.dropped, kept.mask, workspace.data());
      break;
    case Variant::v2: v2_forward(s, t, Q, K, V, O, kept.lse, workspace.data()); break;
    case Variant::checkpoint: checkpoint_forward(s, t, Q, K, V, O, workspace.data()); break;
  }
}

void backward(Variant variant, const LayerShape& s, const Tiling& t, const float* Q, const float* K, const float* V,
              const float* O, const float* dO, const KeptView& kept, float* dQ, float* dK, float* dV,
              MemorySpace& space) {
  this_isa::validate(t);
  const int64_t BH = s.heads_total, N = s.seq, Nk = s.key_rows();
  const int threads = omp_get_max_threads();
  Buffer<float> workspace = allocate_workspace(space, this_isa::workspace_elements(variant, Pass::backward, s, t, threads));
  float* dP_rows = workspace.data();
  switch (variant) {
    case Variant::standard:
      materialised_backward(s, t, Q, K, V, dO, kept.scores, kept.dropped, kept.mask, dQ, dK, dV, dP_rows);
      break;
    case Variant::v1:
      v1_recompute_probabilities(s, t, kept.scores, kept.row_max, kept.row_sum);
      materialised_backward(s, t, Q, K, V, dO, kept.scores, kept.dropped, kept.mask, dQ, dK, dV, dP_rows);
      break;
    case Variant::v2:
      v2_backward(s, t, Q, K, V, O, dO, kept.lse, dQ, dK, dV, workspace.data());
      break;
    case Variant::checkpoint: {
      // Recompute what standard keeps (P, with dropout P̃ and the mask drawn again from the
      // generator), then the standard backward. O is not recomputed: the backward reads none, and
      // holding it would put checkpoint's backward above standard's (the CUDA checkpoint
      // recomputes P alone too).
      // Its workspace: P, then P̃ with the dP rows over it, then the mask (workspace_elements).
      const int64_t scores = BH * N * Nk;
      float* P = workspace.data();
      float* dropped = P + scores;
      dP_rows = dropped;
      uint8_t* mask = nullptr;
      if (s.dropout.active())
        mask = reinterpret_cast<uint8_t*>(dropped + std::max(scores, dP_rows_elements(s, t, threads)));
      standard_forward(s, t, Q, K, V, /*O=*/nullptr, P, dropped, mask);
      materialised_backward(s, t, Q, K, V, dO, P, dropped, mask, dQ, dK, dV, dP_rows);
      break;
    }
  }
}

}  // namespace flashbench::cpu::FLASHBENCH_CPU_ISA

#include "epilogue.hpp"
