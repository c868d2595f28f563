#pragma once
// The analytic memory model: what an implementation allocates for one problem, per tag, in closed
// form from the problem, the variant's statement of what it keeps (variant.hpp), the
// implementation's per-layer costs and the device's parameters. It runs no kernel and costs O(L),
// so it answers instantly even for N = 1M. Every device runs the same layer-stack schedule
// (harness/stack.hpp), which this model reproduces; with O the bytes of one [B,H,N,d] tensor in the
// storage dtype:
//   setup     R input sets, each Q_i, K_i, V_i and dO_i of all L layers (tag input), and the
//             device's persistent workspace, alive throughout.
//   forward   per layer i: its output O_i (tag kept for v2, whose kept O it is; activation
//             otherwise), the rest of kept_per_layer (tag kept), then the forward workspace, freed
//             when the layer returns.
//   backward  per layer i = L-1..0: layer i+1's gradients freed; dQ_i, dK_i, dV_i (grad, the
//             device's gradient dtype), then inside the layer its extra gradient buffers (grad) and
//             its backward workspace, freed; then the layer's kept tensors and O_i. Layer 0's
//             gradients stay: the stack's result.
// Everything only grows during forward, so its peak is at the last layer's workspace; in backward
// each layer's workspace allocation is a candidate. The model evaluates every candidate moment and,
// as the ledger does, keeps the first one that reaches the maximum.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "flashbench/core/memory.hpp"
#include "flashbench/core/problem.hpp"
#include "flashbench/core/result.hpp"
#include "flashbench/core/statistics.hpp"
#include "flashbench/core/variant.hpp"

namespace flashbench {

// What the device contributes to the model. [bytes, counts]
struct ModelParams {
  int threads = 0;                          // workers whose per-thread workspace an implementation sizes
                                            // (0: the device sizes nothing per thread)
  int64_t input_sets = 1;                   // sets of every layer's (Q, K, V, dO) the timing loop rotates through
  int64_t persistent_workspace_bytes = 0;   // held by the device for the whole run (cuBLAS's)
  int gradient_element_bytes = 4;           // dQ, dK, dV's element size on this device
};

// What one implementation allocates per layer beyond what its variant keeps. [bytes]
struct LayerCosts {
  int64_t forward_workspace_bytes = 0;   // the most one forward layer call holds at once
  int64_t backward_workspace_bytes = 0;  // the most one backward layer call holds at once
  int64_t backward_extra_grad_bytes = 0; // gradient buffers beside dQ, dK, dV inside backward
                                         // (naive GQA: dK, dV of the repeated heads)
};

// Bytes one layer allocates. [bytes]
struct LayerMemory {
  int64_t output_bytes = 0;              // O_i [B,H,N,d] in the storage dtype
  int64_t kept_bytes = 0;                // everything kept_per_layer lists (v2: O included)
  int64_t held_bytes = 0;                // alive from this layer's forward to its backward:
                                         // output + kept, O counted once
  int64_t forward_workspace_bytes = 0;
  int64_t backward_workspace_bytes = 0;
  int64_t grad_bytes = 0;                // dQ_i, dK_i, dV_i and the extra gradient buffers of its backward
};

// Bytes of one input set: Q_i, K_i, V_i and dO_i of every layer, storage dtype. [bytes]
int64_t input_bytes(const Problem& problem);
// Bytes of what a training step saves of one layer's inputs for its backward, Q, K and V (storage
// dtype): here inputs (tag input), beside the variant's kept tensors; the articles count them per
// layer. [bytes]
int64_t saved_input_bytes_per_layer(const Problem& problem);

LayerMemory layer_memory(const Problem& problem, Variant variant, const LayerCosts& costs, const ModelParams& params);

// The stack's schedule (harness/stack.hpp) evaluated for per-layer bytes `layer`: what
// model_memory does with layer_memory's, and context parallelism with a device's local layer.
ModelledMemory model_stack(const Problem& problem, Variant variant, const LayerMemory& layer,
                           const ModelParams& params);

// Peak, its phase and tag split, and kept bytes, for the whole stack of problem.layers layers.
ModelledMemory model_memory(const Problem& problem, Variant variant, const LayerCosts& costs,
                            const ModelParams& params);

// ---- context parallelism: one stack split over P devices along N (ring attention) ----
//
// The schedule each of the P devices runs (docs/memory.md derives it term by term). With
// n = N/P local rows, every device holds its n rows of Q, K and V (the operator is square here:
// G = H, N_k = N), and its n rows of dO. A ring step is one call of the implementation on an
// [n queries × n keys] block, so its workspace is the implementation's own for the local problem
// (seq = N_k = n). What travels around the ring is a K block and a V block, two [B,H,n,d] tensors in
// the storage dtype per step, and in backward beside them their partial gradients dK and dV (two
// fp32 [B,H,n,d] sums), which end at the blocks' owner; dQ is summed locally. A device's results are
// dQ, dK and dV of its own rows. Causal runs use the zig-zag split (each device holds chunks i and
// 2P-1-i of 2P), which balances the unmasked pairs and changes neither the bytes held nor the bytes
// sent. With P = 1 every ring term is 0 and the model is model_memory's.
struct RingBytes {
  // Held on one device beyond the single-device schedule of the local problem. [bytes]
  int64_t forward_ring_bytes = 0;   // K, V block pairs in flight, min(2, P-1), and the merge of the
                                    // blocks' partial outputs (fp32 O and LSE, one block's O and LSE)
  int64_t backward_ring_bytes = 0;  // min(2, P-1) K, V block pairs, two dK and two dV fp32 sums (the
                                    // ones worked on and the ones arriving) and the fp32 dQ sum
  int64_t recompute_rows_bytes = 0; // checkpoint: its recomputed P spans all N keys [B,H,n,N], not n
  // Sent by one device per layer (each device sends as much as it receives). [bytes]
  int64_t forward_sent_bytes = 0;   // (P-1) K blocks and (P-1) V blocks
  int64_t backward_sent_bytes = 0;  // (P-1) K and V blocks, P dK and P dV sums (checkpoint: and its
                                    // recomputed forward's K and V blocks)
};

struct ContextParallelModel {
  int64_t ranks = 1;             // P
  Problem local;                 // the problem with seq = N/P
  LayerMemory layer;             // one device's, ring terms included in the workspace
  ModelledMemory per_device;     // the peak of one device
  RingBytes ring;
  int64_t stack_sent_bytes = 0;  // L × (forward + backward) sent by one device [bytes]
};

// Throws UsageError for P < 1; for P > 1, for a problem the ring is not modelled for (G < H,
// N_k ≠ N, dropout), or N not a multiple of P (of 2P when causal: the zig-zag split's chunks).
void validate_context_parallel(const Problem& problem, int64_t ranks);
Problem local_problem(const Problem& problem, int64_t ranks);  // seq = N_k = N/P
// The ring terms alone, for `problem` split over `ranks` devices.
RingBytes ring_bytes(const Problem& problem, int64_t ranks, Variant variant);
// How N's rows are dealt: P contiguous chunks, or the zig-zag split (chunks i and 2P-1-i of 2P).
enum class SeqSplit { contiguous, zigzag };
// The split a ring run of `problem` uses: zig-zag when causal (it balances the unmasked pairs),
// contiguous otherwise.
SeqSplit seq_split(const Problem& problem);
// Rows [begin, end) of the sequence.
struct RowRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};
// The rows of N that device `rank` (0..ranks-1) holds, in the order it stores them: one range
// (contiguous: rows [rank·N/P, (rank+1)·N/P)) or two (zig-zag: chunks rank and 2P-1-rank of 2P,
// each N/(2P) rows). The one statement of the split: the model's pair counts and the ring's
// gathering and placing of rows both read it.
std::vector<RowRange> local_rows(int64_t seq, int64_t ranks, int64_t rank, SeqSplit split);
// The query-key pairs the causal mask leaves to device `rank` (0..ranks-1), per head: its work.
// Under the zig-zag split every device gets N(N+1)/(2P); contiguous, the last gets 2P-1 times the first's.
int64_t causal_pairs(int64_t seq, int64_t ranks, int64_t rank, SeqSplit split);
// `local_costs` and `local_params` are the implementation's and the device's for local_problem().
ContextParallelModel model_context_parallel(const Problem& problem, int64_t ranks, Variant variant,
                                            const LayerCosts& local_costs, const ModelParams& local_params);

// An implementation's model on one device, as a function of the problem: what `fit` searches and
// the presets' "flashbench" column evaluate.
struct ModelSource {
  std::function<LayerMemory(const Problem&, Variant)> layer;
  std::function<ModelledMemory(const Problem&, Variant)> stack;
  int threads = 1;  // the workers its workspace is sized for, for the words beside the numbers
};

// Pre-flight check: nullopt when `model_peak_bytes` fits in `limit_bytes`, otherwise the reason
// for a skipped row, e.g. "needs 66.0 GiB, 21.3 GiB available".
std::optional<std::string> does_not_fit(int64_t model_peak_bytes, int64_t limit_bytes);

// ---- time: what a sweep's configuration costs, for dealing a sweep to shards (shard.hpp) ----

// Modelled wall time of one configuration [s]: `implementations` implementations, each a forward and
// a backward pass of problem.forward_flop() + backward_flop() at `flop_rate` [FLOP/s], run as the
// stopping rule runs them when the noise target is never met: warm-up (policy.warmup passes and at
// least policy.warmup_ms), the measured pass, then samples until max_time_s is spent, at least
// min_samples and at most max_samples of them. It depends on nothing but its arguments, so every
// process of a job array deals the same plan; only the ratios between configurations matter to the
// dealing, and the float64 reference (capped by --check-budget) is left out.
double modelled_run_seconds(const Problem& problem, int implementations, const SamplingPolicy& policy,
                            double flop_rate);

// ---- fit: the largest N (or B) whose modelled peak fits a budget ----

enum class FitAxis { seq, batch };

struct FitResult {
  Variant variant = Variant::standard;
  FitAxis axis = FitAxis::seq;
  int64_t max_value = 0;         // largest N (or B) that fits; 0 when not even 1 fits
  int64_t model_peak_bytes = 0;  // modelled peak at max_value (0 when nothing fits) [bytes]
  int64_t budget_bytes = 0;
  bool at_axis_limit = false;    // max_value is the largest size the tool accepts, not the budget's
};

// Binary search over the axis (the modelled peak grows with N and with B); `problem` supplies
// every other axis. O(L·log N).
// With seq_step > 1 only multiples of it are candidates for N (context parallelism splits N).
FitResult fit_in_budget(const ModelSource& model, const Problem& problem, Variant variant, FitAxis axis,
                        int64_t budget_bytes, int64_t seq_step = 1);

// ---- presets: the seed documents' memory figures, as published and recomputed ----

// How a published figure is worded, which decides what counts as agreeing with its formula.
enum class Claim { none, exact, about, over, nearly };  // none: nothing printed for this row

// One figure of a document. Published and formula are in the document's scope (often one head);
// head-aware and flashbench are for the preset's whole configuration, every head and batch counted.
struct PresetRow {
  std::string quantity;         // e.g. "V1 extra per layer (S)"
  std::string published_text;   // as printed in the document, e.g. "128.00 MB"; "-" when none
  double published_value = 0;   // the printed number, in `unit_bytes` units
  double unit_bytes = 1;        // what the document's unit means there (2^20 for 002's "MB") [bytes]
  std::string unit_label;       // the document's unit as printed: "MB", "GB", "%"
  int decimals = 2;             // printed precision
  Claim claim = Claim::exact;
  std::optional<double> formula;     // the document's own formula [bytes, or a count / percent]
  std::optional<double> head_aware;  // the same formula with every head and batch element counted
  std::optional<double> flashbench;  // what this tool's implementation allocates for it
  std::string flashbench_what;       // which of the tool's quantities that is
  std::string value_kind = "bytes";  // "bytes", "count" or "percent"
  bool mismatch = false;             // published disagrees with the document's own formula
  std::string explanation;           // one line, on mismatching rows
};

struct Preset {
  std::string name;         // "gradient-flow": from the article's title
  std::string alias;        // "seed-002": the name it had first, still accepted
  std::string title;        // the article's title (in English, docs/articles.md)
  std::string source;       // the document and the call or passage it reproduces
  Problem problem;          // the configuration the head-aware and flashbench columns use
  std::string assumptions;  // axes the document does not state, and what was assumed
  std::vector<PresetRow> rows;
};

struct PresetName {
  std::string name;   // "gradient-flow"
  std::string alias;  // "seed-002"
  std::string title;  // "How gradients flow back through FlashAttention in training"
};
// Every preset, in the order `model --preset list` prints them.
std::vector<PresetName> preset_catalogue();
// `name` is a preset's name or its alias. Throws UsageError on an unknown one, naming the nearest. The flashbench column is `model`'s (the CPU's, as `model` runs).
Preset make_preset(const std::string& name, const ModelSource& model);

}  // namespace flashbench
