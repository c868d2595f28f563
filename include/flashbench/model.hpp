#pragma once
// The analytic memory model: what a backend's implementation allocates for one problem and
// variant, per tag, in closed form from the problem, the variant (its kept_per_layer statement)
// and the tiling. It runs no kernel and costs O(L), so it answers instantly even for N = 1M.
//
// CPU schedule it reproduces (src/cpu, include/flashbench/cpu/attention.hpp), with X the bytes of
// one [B,H,N,d] tensor in the storage dtype and G the bytes of one fp32 [B,H,N,d] gradient:
//   setup     X0 and dO (tag input), alive throughout.
//   forward   per layer i: its output X_{i+1} (tag kept for v2, whose kept O it is; activation
//             otherwise), the rest of kept_per_layer (tag kept), then the forward workspace, freed
//             when the kernel returns.
//   backward  non-v2 variants free X_L at once. Per layer i = L-1..0: dQ, dK, dV (3G, grad), the
//             backward workspace, freed; then the layer's kept tensors and its input X_i (i ≥ 1;
//             v2 frees its output X_{i+1} instead); dX_i = dQ+dK+dV stays (G), the incoming dX_{i+1}
//             (never dO) is freed.
// With 16-bit storage each layer call's workspace also holds fp32 staging of its inputs, and standard
// and v1 compute one head's N×N at a time (cpu::workspace16_elements, storage16.hpp).
// Everything only grows during forward, so its peak is at the last layer's workspace; in backward
// each layer's workspace allocation is a candidate. The model evaluates every candidate moment and,
// as the ledger does, keeps the first one that reaches the maximum.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "flashbench/cpu/attention.hpp"
#include "flashbench/memory.hpp"
#include "flashbench/problem.hpp"
#include "flashbench/result.hpp"
#include "flashbench/variant.hpp"

namespace flashbench {

// Which implementation the model describes. Only the CPU schedule is modelled so far.
enum class BackendKind { cpu };

// Bytes one layer allocates, in this implementation. [bytes]
struct LayerMemory {
  int64_t output_bytes = 0;              // X_{i+1} [B,H,N,d] in the storage dtype
  int64_t kept_bytes = 0;                // everything kept_per_layer lists (v2: O included)
  int64_t held_bytes = 0;                // alive from this layer's forward to its backward:
                                         // output + kept, O counted once
  int64_t forward_workspace_bytes = 0;   // one block per forward kernel call (fp32)
  int64_t backward_workspace_bytes = 0;  // one block per backward kernel call (fp32)
  int64_t grad_bytes = 0;                // dQ + dK + dV [B,H,N,d] fp32
};

// Bytes of the tensors alive for the whole run: X0 and dO, storage dtype. [bytes]
int64_t input_bytes(const Problem& problem);

// The storage dtype's element size for inputs, activations and kept N×N / [B,H,N,d] tensors,
// and the fixed fp32 size of gradients and workspace. [bytes]
int storage_element_bytes(const Problem& problem);
inline constexpr int kGradElementBytes = 4;
inline constexpr int kWorkspaceElementBytes = 4;

LayerMemory layer_memory(BackendKind kind, const Problem& problem, Variant variant,
                         const cpu::Tiling& tiling, int threads);

// Peak, its phase and tag split, and kept bytes, for the whole stack of problem.layers layers.
ModelledMemory model_memory(BackendKind kind, const Problem& problem, Variant variant,
                            const cpu::Tiling& tiling, int threads);

// Pre-flight check: nullopt when `model_peak_bytes` fits in `limit_bytes`, otherwise the reason
// for a skipped row, e.g. "needs 66.0 GiB, 21.3 GiB available".
std::optional<std::string> does_not_fit(int64_t model_peak_bytes, int64_t limit_bytes);

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
FitResult fit_in_budget(BackendKind kind, const Problem& problem, Variant variant, FitAxis axis,
                        int64_t budget_bytes, const cpu::Tiling& tiling, int threads);

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
  std::string name;         // "seed-002"
  std::string source;       // the document and the call or passage it reproduces
  Problem problem;          // the configuration the head-aware and flashbench columns use
  std::string assumptions;  // axes the document does not state, and what was assumed
  std::vector<PresetRow> rows;
};

std::vector<std::string> preset_names();
// Throws UsageError on an unknown name. `threads` sizes the CPU workspace in the flashbench column.
Preset make_preset(const std::string& name, const cpu::Tiling& tiling, int threads);

}  // namespace flashbench
