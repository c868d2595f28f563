#pragma once
// One benchmark row: an implementation of a variant running on a device on a problem, what it
// measured and how it went. Reporters (table, json, ...) read rows; the harness fills them.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "flashbench/core/gpu_state.hpp"
#include "flashbench/core/memory.hpp"
#include "flashbench/core/problem.hpp"
#include "flashbench/core/statistics.hpp"
#include "flashbench/core/variant.hpp"

namespace flashbench {

enum class Status { ok, skipped, oom, failed };
std::string_view to_string(Status status);

struct MeasuredMemory {
  int64_t peak_bytes = 0;          // highest total of live tracked bytes [bytes]
  Phase peak_phase = Phase::fwd;   // when that peak happened
  int64_t kept_bytes = 0;          // `kept` bytes live at the end of the forward pass [bytes]
  TagBytes by_tag;                 // split of peak_bytes at the moment of the peak
  TagBytes high_water;             // each tag's own maximum
  std::optional<int64_t> os_peak_bytes;  // operating system's view (VmHWM, pool used-high) [bytes]
};

struct ModelledMemory {
  int64_t peak_bytes = 0;
  int64_t kept_bytes = 0;
  TagBytes by_tag;  // split at the modelled peak
  Phase peak_phase = Phase::fwd;
};

// max |x − ref| / max |ref|: the error relative to the scale of the reference tensor; NaN counts as
// infinitely wrong. What every row's `check` reports. A reference that is zero throughout has no
// scale of its own (dQ and dK where every query sees one key: the softmax is constant, so dS = 0):
// its error is then relative to `scale_if_zero`, the scale of the layer it belongs to (the largest
// max |ref| of its O, dQ, dK, dV), so that rounding in the terms that cancel to zero is judged on the
// same footing as everywhere else; with no such scale (0) it is the absolute error.
double max_relative_error(std::span<const float> x, std::span<const float> ref, double scale_if_zero = 0);
double max_relative_error(std::span<const float> x, std::span<const double> ref, double scale_if_zero = 0);
// max |ref|: a tensor's scale, as max_relative_error divides by it.
double max_abs(std::span<const double> ref);

// One compared tensor of a check: its error and the naive computation's on it.
struct CheckedTensor {
  std::string name;  // "O", "dQ", "dK" or "dV" of layer 0 (files of the tied operator: "output",
                     // "input_grad", "context_grad")
  double rel_err = 0;
  std::optional<double> naive_rel_err;
};

// A comparison that took place: the implementation's layer 0 (O, dQ, dK, dV) against a reference.
struct Check {
  std::string reference;   // what they were compared with, e.g. "float64"
  double max_rel_err = 0;  // max over outputs of max|x - ref| / max|ref|
  double tolerance = 0;
  // The error of the same computation done naively in the storage precision, against the same
  // reference: the bar the tolerance is a multiple of. Empty in files written before it existed.
  std::optional<double> naive_rel_err;
  // Each compared tensor's errors, of which the two above are the largest: which one a failure is
  // in. Empty in files written before it existed.
  std::vector<CheckedTensor> tensors;
  // What the check could not compare, and why (dK and dV where one K/V head's group is over the
  // budget); empty when every tensor was compared.
  std::string not_compared;
  // How long the reference took to compute [s]: once per configuration, shared by its rows (what a
  // dry run's estimate and the live ETA learn the check's cost from). Empty in files written before.
  std::optional<double> reference_seconds;
  bool passed() const { return max_rel_err <= tolerance; }
};

// Whether a row's numbers can be had again: what its inputs were and whether the computation gives
// the same bits twice. Hashes are 64-bit FNV-1a over the float values of the tensors as stored, in
// 16 hexadecimal digits.
struct Reproducibility {
  uint64_t seed = 0;          // the run's --seed (each problem's inputs come from it and the problem)
  double input_scale = 1;     // Q, K and V were multiplied by this (--input-scale)
  std::string inputs_hash;    // input set 0: Q, K, V, dO of each layer in turn
  std::string results_hash;   // the measured pass: O of each layer, then dQ, dK, dV of layer 0
  // A second pass on input set 0 gave the same results bit for bit again; empty when the row ended
  // before that pass.
  std::optional<bool> deterministic;
};

struct Row {
  std::string backend = "cpu";           // the device
  Variant variant = Variant::standard;
  std::string impl;                      // the implementation ("v2", "v2.split"); empty = the variant's name
  std::string implementation() const;   // impl, or the variant's name when impl is empty
  Problem problem;
  Status status = Status::ok;
  std::string reason;  // why, when status is not ok
  TimingSummary fwd, bwd;
  MeasuredMemory measured;
  std::optional<ModelledMemory> model;
  std::optional<Check> check;
  std::string not_checked;              // why nothing was compared, when check is empty and a check was asked for
  std::optional<Reproducibility> reproducibility;  // empty for rows that did not run
  // Numerical hazards of the problem's inputs, named (fp16 logits beyond its range); each is also a
  // warning under the row.
  std::vector<std::string> hazards;
  int threads = 0;                      // CPU threads used
  bool cold = false;                    // the device's caches were flushed before every pass (--cold)
  int64_t row_block = 0, col_block = 0; // kernel tile [rows of Q, rows of K/V]; 0 when not tiled
  int64_t diagonal_block = 0;           // v2's causal diagonal chunk [columns]; 0 when not tiled
  std::string device;                   // GPU name, for CUDA rows
  std::string isa;                      // CPU rows of flashbench's kernels: the ISA they ran on (cpu/isa.hpp)
  // The vendor library an implementation calls, with the version that ran ("cuDNN 9.10.2"); empty
  // for flashbench's own kernels. A peer's row names its own (torch's cuDNN), so a table can say
  // where two "cudnn" rows ran different versions.
  std::string library;
  std::string driver;                   // CUDA rows: the driver's version ("13.0")
  std::optional<int> device_index;      // which GPU of the machine ran it (--device-index), on CUDA rows
  // The GPU's clocks, power and throttling before and after the timed samples (NVML; CUDA rows where
  // NVML answers).
  std::optional<GpuState> gpu_start, gpu_end;
  // The implementations whose samples alternated with this row's in rounds (the runner takes a
  // configuration's samples so where the implementations fit in memory side by side); empty when
  // it was sampled alone, and then sampled_alone says why where others were measured too.
  std::vector<std::string> interleaved_with;
  std::string sampled_alone;
  // Where run --time-budget stopped the samples before the stopping rule was met: what it cut
  // (a warning under the row; timing.time_budget in JSON).
  std::string time_budget_cut;
  // run --trace: the ledger's history during the measured pass (written as a trace file, not as a
  // field of the results).
  std::shared_ptr<const MemoryTimeline> timeline;
  std::optional<double> peak_gflops;    // CPU sgemm ceiling the rates are read against (run --peak) [GFLOP/s]
  double fwd_tflops() const;            // FlashAttention convention, from the median [TFLOP/s]
  double bwd_tflops() const;
  // The rates as fractions of peak_gflops; empty without a ceiling or a time.
  std::optional<double> fwd_of_peak() const;
  std::optional<double> bwd_of_peak() const;
};

}  // namespace flashbench
