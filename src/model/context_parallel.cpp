// The memory model of context parallelism (model.hpp, "context parallelism"; docs/memory.md): one
// stack split over P devices along N, each device running model_stack on its local problem with the
// ring's terms added to each layer.
#include <algorithm>

#include <fmt/format.h>

#include "flashbench/core/errors.hpp"
#include "flashbench/model/model.hpp"

namespace flashbench {

void validate_context_parallel(const Problem& problem, int64_t ranks) {
  if (ranks < 1) throw UsageError(fmt::format("--cp {}: the number of devices must be at least 1", ranks));
  if (ranks == 1) return;
  // The ring is modelled for the square operator (G = H, N_k = N): rank r holds rows r of Q, K and V
  // alike and K, V travel as [B,H,n,d] blocks. GQA (K, V blocks of G heads), a separate context
  // (N_k ≠ N: its own split of the keys) and dropout (the mask's element index would be the global
  // one) change what travels or what a step computes and are not modelled yet.
  if (!problem.square() || problem.dropout > 0)
    throw UsageError(fmt::format("--cp {}: the ring is modelled for G = H and N_k = N without dropout (p = 0); "
                                 "this problem has {}",
                                 ranks, problem.workload()));
  // Causal: the zig-zag split cuts N into 2P chunks and gives device i chunks i and 2P-1-i.
  const int64_t chunks = problem.causal ? 2 * ranks : ranks;
  if (problem.seq % chunks != 0)
    throw UsageError(fmt::format("--cp {}: N = {} must be a multiple of {} ({}{} chunks of equal length)", ranks,
                                 problem.seq, chunks, problem.causal ? "the zig-zag split's 2P = " : "P = ", chunks));
}

Problem local_problem(const Problem& problem, int64_t ranks) {
  validate_context_parallel(problem, ranks);
  Problem local = problem;
  local.seq = problem.seq / ranks;
  local.seq_kv = 0;  // N_k = n: a rank holds the same rows of K and V as of Q
  return local;
}

SeqSplit seq_split(const Problem& problem) { return problem.causal ? SeqSplit::zigzag : SeqSplit::contiguous; }

std::vector<RowRange> local_rows(int64_t seq, int64_t ranks, int64_t rank, SeqSplit split) {
  if (split == SeqSplit::contiguous) {
    const int64_t n = seq / ranks;
    return {{rank * n, (rank + 1) * n}};
  }
  const int64_t chunk = seq / (2 * ranks);
  const int64_t mirrored = 2 * ranks - 1 - rank;
  return {{rank * chunk, (rank + 1) * chunk}, {mirrored * chunk, (mirrored + 1) * chunk}};
}

int64_t causal_pairs(int64_t seq, int64_t ranks, int64_t rank, SeqSplit split) {
  // Row q attends keys 0..q: rows [a, b) hold sum (q + 1) = (b(b+1) - a(a+1)) / 2 pairs.
  int64_t pairs = 0;
  for (const RowRange& rows : local_rows(seq, ranks, rank, split))
    pairs += (rows.end * (rows.end + 1) - rows.begin * (rows.begin + 1)) / 2;
  return pairs;
}

RingBytes ring_bytes(const Problem& problem, int64_t ranks, Variant variant) {
  const Problem local = local_problem(problem, ranks);
  RingBytes ring;
  if (ranks == 1) return ring;  // nothing to receive, nothing to merge
  const int64_t block = local.kv_elements() * element_bytes(local.dtype);  // one K or V block [B,H,n,d]
  const int64_t block_fp32 = local.kv_elements() * 4;                      // [B,H,n,d] in fp32
  const int64_t output_block = local.q_elements() * element_bytes(local.dtype);  // O_s [B,H,n,d]
  const int64_t queries_fp32 = local.q_elements() * 4;                     // running O, the dQ sum
  const int64_t rows_fp32 = local.row_elements() * 4;                      // [B,H,n] in fp32
  // Step s computes on the K, V pair received at step s-1 (its own K and V at s = 0) while the next
  // one arrives: two pairs, one when P = 2 (step 0 works on its own, step 1 receives nothing).
  const int64_t pairs_in_flight = std::min<int64_t>(2, ranks - 1) * 2 * block;
  // Forward merges each step's partial result (O_s in the storage dtype, LSE_s) into the running
  // fp32 O and LSE, rescaled by the new LSE (the online softmax across blocks).
  ring.forward_ring_bytes = pairs_in_flight + (output_block + rows_fp32) + (queries_fp32 + rows_fp32);
  // Backward: the pair worked on travels with its dK and dV partial sums (fp32); the next pair and
  // its sums arrive while this one is computed: two dK sums and two dV sums. The local queries' dQ
  // is summed over all steps in fp32.
  ring.backward_ring_bytes = pairs_in_flight + 2 * 2 * block_fp32 + queries_fp32;
  if (variant == Variant::checkpoint) {
    // Re-running the standard forward rebuilds P for n rows and all N keys; the step call's own
    // workspace (local costs) holds an [n, n] block of it, the rest is this.
    int64_t standard_p_local = 0;
    for (const KeptTensor& t : kept_per_layer(Variant::standard, local)) standard_p_local += t.bytes();
    ring.recompute_rows_bytes = (ranks - 1) * standard_p_local;
  }
  // K and V blocks P-1 times each.
  ring.forward_sent_bytes = (ranks - 1) * 2 * block;
  // K and V blocks again; the dK and dV sums P times each, the last send bringing them home.
  ring.backward_sent_bytes = (ranks - 1) * 2 * block + ranks * 2 * block_fp32;
  if (variant == Variant::checkpoint) ring.backward_sent_bytes += ring.forward_sent_bytes;  // its recomputed forward
  return ring;
}

ContextParallelModel model_context_parallel(const Problem& problem, int64_t ranks, Variant variant,
                                            const LayerCosts& local_costs, const ModelParams& local_params) {
  ContextParallelModel model;
  model.ranks = ranks;
  model.local = local_problem(problem, ranks);
  model.ring = ring_bytes(problem, ranks, variant);
  LayerMemory& layer = model.layer;
  layer = layer_memory(model.local, variant, local_costs, local_params);
  // Kept tensors over keys keep all N columns for the n local rows.
  layer.kept_bytes = 0;
  for (const KeptTensor& t : kept_per_layer(variant, model.local)) layer.kept_bytes += t.bytes() * (t.spans_keys ? ranks : 1);
  layer.held_bytes = layer.kept_bytes + (keeps_layer_output(variant) ? 0 : layer.output_bytes);
  layer.forward_workspace_bytes += model.ring.forward_ring_bytes;
  // Checkpoint's backward first re-runs the ring forward (its merge state alive), then the ring
  // backward; the recomputed rows of P live through both.
  const int64_t backward_ring = variant == Variant::checkpoint
                                    ? std::max(model.ring.forward_ring_bytes, model.ring.backward_ring_bytes)
                                    : model.ring.backward_ring_bytes;
  layer.backward_workspace_bytes += model.ring.recompute_rows_bytes + backward_ring;
  model.per_device = model_stack(model.local, variant, layer, local_params);
  model.stack_sent_bytes = problem.layers * (model.ring.forward_sent_bytes + model.ring.backward_sent_bytes);
  return model;
}

}  // namespace flashbench
