// The choice of ISA (isa.hpp) and the public entry points of the CPU kernels (gemm.hpp,
// attention.hpp), which call the active ISA's table (src/cpu/isa/, compiled once per ISA).
#include "flashbench/cpu/isa.hpp"

#include <atomic>
#include <cstdint>
#include <string>

#include <fmt/format.h>

#include "flashbench/core/errors.hpp"
#include "flashbench/cpu/attention.hpp"
#include "flashbench/cpu/gemm.hpp"
#include "flashbench/cpu/isa_kernels.hpp"

namespace flashbench::cpu {

// The tables of src/cpu/isa/table.cpp, one per ISA.
extern const IsaKernels kernels_scalar, kernels_avx2, kernels_avx512;

namespace {

std::atomic<const IsaKernels*>& active_table() {
  static std::atomic<const IsaKernels*> table{&isa_kernels(best_isa())};
  return table;
}

}  // namespace

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::scalar: return "scalar";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
  }
  return "?";
}

std::optional<Isa> parse_isa(std::string_view name) {
  for (Isa isa : kAllIsas)
    if (isa_name(isa) == name) return isa;
  return std::nullopt;
}

int64_t isa_lanes(Isa isa) { return isa_kernels(isa).lanes; }

bool cpu_supports(Isa isa) {
  // libgcc's CPUID reading also asks the OS (XGETBV) whether it saves the ymm / zmm registers. Its
  // constructor may not have run yet when a static initialiser asks.
  __builtin_cpu_init();
  switch (isa) {
    case Isa::scalar: return true;  // the build's baseline (x86-64-v2): the binary would not start without it
    case Isa::avx2:  // x86-64-v3, which its kernels are compiled for
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi") &&
             __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("f16c");
    case Isa::avx512:  // x86-64-v4
      return cpu_supports(Isa::avx2) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  }
  return false;
}

Isa best_isa() {
  if (cpu_supports(Isa::avx512)) return Isa::avx512;
  if (cpu_supports(Isa::avx2)) return Isa::avx2;
  return Isa::scalar;
}

Isa active_isa() { return active_table().load()->isa; }

void use_isa(Isa isa, std::string_view source) {
  if (!cpu_supports(isa))
    throw UsageError(fmt::format("{} {}: this CPU does not support it (its widest is {})", source, isa_name(isa),
                                 isa_name(best_isa())));
  active_table().store(&isa_kernels(isa));
}

void use_isa(std::string_view name, std::string_view source) {
  const std::optional<Isa> isa = parse_isa(name);
  if (!isa) throw UsageError(fmt::format("{} '{}': not an ISA (scalar, avx2, avx512)", source, name));
  use_isa(*isa, source);
}

std::string isa_help() {
  // One line of --help; `info` lists which ISAs this CPU runs.
  return fmt::format("CPU kernels' ISA: avx512|avx2|scalar (default {}, the widest here)", isa_name(best_isa()));
}

const IsaKernels& isa_kernels(Isa isa) {
  switch (isa) {
    case Isa::scalar: return kernels_scalar;
    case Isa::avx2: return kernels_avx2;
    case Isa::avx512: return kernels_avx512;
  }
  return kernels_scalar;
}

const IsaKernels& active_kernels() { return *active_table().load(); }

// gemm.hpp and attention.hpp, on the active ISA.

void gemm(Op op_a, Op op_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  active_kernels().gemm(op_a, op_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void validate(const Tiling& tiling) { active_kernels().validate(tiling); }

int64_t workspace_elements(Variant variant, Pass pass, const LayerShape& shape, const Tiling& tiling, int threads) {
  return active_kernels().workspace_elements(variant, pass, shape, tiling, threads);
}

void forward(Variant variant, const LayerShape& shape, const Tiling& tiling, const float* Q, const float* K,
             const float* V, float* O, const KeptView& kept, MemorySpace& space) {
  active_kernels().forward(variant, shape, tiling, Q, K, V, O, kept, space);
}

void backward(Variant variant, const LayerShape& shape, const Tiling& tiling, const float* Q, const float* K,
              const float* V, const float* O, const float* dO, const KeptView& kept, float* dQ, float* dK, float* dV,
              MemorySpace& space) {
  active_kernels().backward(variant, shape, tiling, Q, K, V, O, dO, kept, dQ, dK, dV, space);
}

// What is not ISA code: the float64 reference product and the kernels' view of a problem.

void gemm_reference(Op op_a, Op op_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                    int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const auto element = [](const float* X, int64_t ld, Op op, int64_t row, int64_t col) {
    return op == Op::none ? X[row * ld + col] : X[col * ld + row];
  };
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double sum = 0.0;
      for (int64_t k = 0; k < K; ++k)
        sum += double(element(A, lda, op_a, i, k)) * double(element(B, ldb, op_b, k, j));
      const double old = beta == 0.0f ? 0.0 : double(beta) * C[i * ldc + j];
      C[i * ldc + j] = float(double(alpha) * sum + old);
    }
}

LayerShape LayerShape::of(const Problem& p) {
  // The dropout mask keyed by seed 0 and offset 0: whether there is one, for workspace sizes; a layer
  // call keys it with its stack's seed and layer.
  return {p.heads_total(), p.seq, p.head_dim, p.causal, p.scale(), p.dtype, p.key_seq(),
          p.repeats_kv() ? 1 : p.group_size(), philox::make_dropout_mask(p.dropout, 0, 0)};
}

}  // namespace flashbench::cpu
