// The CUDA side of the memory model: the schedule of src/cuda/layers.cpp in closed form.
// It needs no GPU and is compiled into every build.
//
// With x the bytes of one [B,H,N,d] tensor in the storage dtype, s of one [B,H,N,N] matrix in the
// storage dtype, r of one [B,H,N] fp32 vector, a of one [B,H,N,d] fp32 tensor:
//   alive throughout  R input sets of (X0, dO) = 2·R·x (input), the cuBLAS workspace W (workspace)
//   per layer, from its forward to its backward  h = x (its output X_{i+1}) + kept_per_layer
//                     (v2's O is that output: h = x + r)
//   forward workspace standard 0 (S is computed into the kept P), v1 s (P for O = P·V),
//                     v2 0, checkpoint s (P)
//   backward          dX_i = x (grad) and workspace: standard and v1 s (dP, then dS in place),
//                     checkpoint 2s (recomputed P, and dP), v2 r + a (D and the fp32 dX accumulator)
// Forward peaks at the last layer: I + W + L·h + ws_fwd. Backward peaks in layer L-1: non-v2
// variants have freed X_L (I + W + L·h − x + x + ws_bwd), v2 still holds it (… + x + ws_bwd).
// Earlier layers hold less (h ≥ x), so these two moments are the candidates; on a tie the ledger
// keeps the first, forward.
#include <algorithm>

#include "flashbench/cuda/stack.hpp"

namespace flashbench::cuda {

int64_t input_sets(const Problem& problem, int64_t l2_bytes) {
  const int64_t set_bytes = 2 * problem.qkv_elements() * element_bytes(problem.dtype);
  const int64_t wanted = (2 * l2_bytes + set_bytes - 1) / std::max<int64_t>(set_bytes, 1);
  return std::clamp<int64_t>(wanted, 1, 4);
}

ModelledMemory model_memory_cuda(const Problem& problem, Variant variant, const CudaModelParams& params) {
  const int64_t L = problem.layers;
  const int64_t x = problem.qkv_elements() * element_bytes(problem.dtype);
  const int64_t s = problem.score_elements() * element_bytes(problem.dtype);
  const int64_t r = problem.row_elements() * 4;
  const int64_t a = problem.qkv_elements() * 4;
  const int64_t inputs = 2 * params.input_sets * x;
  const int64_t W = params.blas_workspace_bytes;
  const bool reads_output = backward_reads_output(variant);
  const int64_t kept_extra = reads_output ? r : kept_bytes_per_layer(variant, problem);  // beyond X_{i+1}

  int64_t fwd_workspace = 0, bwd_workspace = 0;
  switch (variant) {
    case Variant::standard: fwd_workspace = 0; bwd_workspace = s; break;
    case Variant::v1: fwd_workspace = s; bwd_workspace = s; break;
    case Variant::v2: fwd_workspace = 0; bwd_workspace = r + a; break;
    case Variant::checkpoint: fwd_workspace = s; bwd_workspace = 2 * s; break;
  }

  TagBytes fwd;
  fwd[Tag::input] = inputs;
  fwd[Tag::workspace] = W + fwd_workspace;
  fwd[Tag::kept] = L * kept_extra + (reads_output ? L * x : 0);
  fwd[Tag::activation] = reads_output ? 0 : L * x;

  TagBytes bwd;
  bwd[Tag::input] = inputs;
  bwd[Tag::workspace] = W + bwd_workspace;
  bwd[Tag::kept] = fwd[Tag::kept];
  bwd[Tag::activation] = reads_output ? 0 : (L - 1) * x;
  bwd[Tag::grad] = x;

  ModelledMemory model;
  model.kept_bytes = L * kept_bytes_per_layer(variant, problem);
  const bool backward_peaks = bwd.total() > fwd.total();
  model.by_tag = backward_peaks ? bwd : fwd;
  model.peak_bytes = model.by_tag.total();
  model.peak_phase = backward_peaks ? Phase::bwd : Phase::fwd;
  return model;
}

}  // namespace flashbench::cuda
