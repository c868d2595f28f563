#pragma once
// The CPU kernels' views of what a layer keeps, from the tensors the harness allocated by the
// names of the variant's statement (kept_per_layer): "P" or "S" are the scores, "m", "l" the row
// statistics, "LSE" v2's log-sum-exp.
#include "flashbench/cpu/attention.hpp"
#include "flashbench/cpu/storage16.hpp"
#include "flashbench/harness/implementation.hpp"

namespace flashbench::cpu {

KeptView kept_view(Variant variant, const Problem& problem, const KeptTensors& kept);      // fp32 storage
KeptView16 kept_view16(Variant variant, const Problem& problem, const KeptTensors& kept);  // bf16 / fp16

}  // namespace flashbench::cpu
