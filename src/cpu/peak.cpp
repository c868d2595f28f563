#include "flashbench/cpu/peak.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <vector>

#include "flashbench/core/statistics.hpp"
#include "flashbench/cpu/gemm.hpp"
#include "flashbench/cpu/isa_kernels.hpp"
#include "flashbench/cpu/threads.hpp"

#if defined(FLASHBENCH_HAVE_OPENBLAS)
#include <cblas.h>
#endif

namespace flashbench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kRepetitions = 7;

constexpr int64_t kFmaSteps = 4'000'000;  // per thread per repetition
constexpr int kFmaWarmupMs = 300;         // every thread busy this long before the timed repetitions

// [GFLOP/s] per repetition of the FMA loop on every thread at once.
// The active ISA's loop (src/cpu/isa/table.cpp): as many independent chains as its registers hold,
// at least an FMA's latency times the FMA pipes of a core.
std::vector<double> time_fma(int threads) {
  const cpu::IsaKernels& kernels = cpu::active_kernels();
  const double flop = 2.0 * double(kernels.lanes) * kernels.fma_chains * double(kFmaSteps) * threads;
  std::vector<double> rates;
  volatile float sink = 0.0f;
  const auto run_once = [&] {
    float total = 0.0f;
    const auto start = Clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : total)
    total += kernels.fma_loop(float(omp_get_thread_num()), kFmaSteps);
    sink = sink + total;
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  // Warm up for a time, not a count: a repetition is a few milliseconds, and on a virtual machine
  // that sat idle a core can take tens of them to run at full speed (or to be scheduled at all), so
  // one warm-up repetition left the median of the first `info --peak` after a pause at half the
  // peak — below the sgemm rate, which a ceiling cannot be.
  const auto warm_until = Clock::now() + std::chrono::milliseconds(kFmaWarmupMs);
  while (Clock::now() < warm_until) run_once();
  for (int rep = 0; rep < kRepetitions; ++rep) rates.push_back(flop / run_once() * 1e-9);
  return rates;
}

// C = A·B, n×n row-major, cut into a grid of row bands × column panels, one block per thread, each a
// cpu::gemm call. A thread reads (and packs) its rows of A and its columns of B, so a grid near
// square reads each operand √T times instead of T times: with column panels alone, 16 threads each
// streamed all of A and the "ceiling" fell below what the attention kernels reach.
void parallel_gemm(int threads, int64_t n, const float* A, const float* B, float* C) {
  int row_bands = 1;
  for (int p = 1; p * p <= threads; ++p)
    if (threads % p == 0) row_bands = p;  // the largest divisor ≤ √T; the panels take the rest
  const int column_panels = threads / row_bands;
  constexpr int64_t kColumnQuantum = 32;  // panels a whole number of register tiles wide
  const int64_t panel = (n / column_panels + kColumnQuantum - 1) / kColumnQuantum * kColumnQuantum;
  const int64_t band = (n + row_bands - 1) / row_bands;
#pragma omp parallel for num_threads(threads) schedule(static, 1)
  for (int t = 0; t < threads; ++t) {
    const int64_t i0 = std::min(n, (t / column_panels) * band), rows = std::min(band, n - i0);
    const int64_t j0 = std::min(n, (t % column_panels) * panel), width = std::min(panel, n - j0);
    if (rows > 0 && width > 0)
      cpu::gemm(cpu::Op::none, cpu::Op::none, rows, width, n, 1.0f, A + i0 * n, n, B + j0, n, 0.0f, C + i0 * n + j0, n);
  }
}

template <class Product>
std::vector<double> time_product(int64_t n, Product&& product) {
  const double flop = 2.0 * double(n) * double(n) * double(n);
  std::vector<double> rates;
  for (int rep = 0; rep < kRepetitions / 2 + 2; ++rep) {
    const auto start = Clock::now();
    product();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (rep > 0) rates.push_back(flop / seconds * 1e-9);
  }
  return rates;
}

// The products the CPU kernels call at N = 2048, d = 64 with the default 64 × 128 tiles.
struct ProductShape {
  const char* name;
  cpu::Op op_a, op_b;
  int64_t M, N, K;
};
constexpr ProductShape kAttentionProducts[] = {
    {"standard fwd: S = Q_r·Kᵀ (64 rows)", cpu::Op::none, cpu::Op::transpose, 64, 2048, 64},
    {"standard fwd: O_r = P_r·V", cpu::Op::none, cpu::Op::none, 64, 64, 2048},
    {"standard bwd: dV_c = P_cᵀ·dO", cpu::Op::transpose, cpu::Op::none, 128, 64, 2048},
    {"standard bwd: dP_r = dO_r·Vᵀ", cpu::Op::none, cpu::Op::transpose, 64, 2048, 64},
    {"standard bwd: dQ_r = dS_r·K", cpu::Op::none, cpu::Op::none, 64, 64, 2048},
    {"v2 fwd: Sᵀ = K_c·Q̃ᵀ tile", cpu::Op::none, cpu::Op::none, 128, 64, 64},
    {"v2 fwd: O_r += (Pᵀ)ᵀ·V_c tile", cpu::Op::transpose, cpu::Op::none, 64, 64, 128},
    {"v2 bwd: S = Q_r·K̃ᵀ tile", cpu::Op::none, cpu::Op::none, 64, 128, 64},
    {"v2 bwd: dV_c += Pᵀ·dO_r tile", cpu::Op::transpose, cpu::Op::none, 128, 64, 64},
    {"v2 bwd: dQ_r += dS·K_c tile", cpu::Op::none, cpu::Op::none, 64, 64, 128},
};

// Median rate of `product` on one thread, repeated to about 50 ms per sample. [GFLOP/s]
template <class Product>
double single_thread_rate(double flop, Product&& product) {
  const int repeats = std::max(1, int(2.5e9 * 0.05 / flop));  // ~50 ms at ~150 GFLOP/s
  std::vector<double> rates;
  for (int rep = 0; rep < 6; ++rep) {
    const auto start = Clock::now();
    for (int r = 0; r < repeats; ++r) product();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (rep > 0) rates.push_back(flop * repeats / seconds * 1e-9);
  }
  return median_of(rates);
}

std::vector<ProductRate> time_attention_products() {
  std::vector<ProductRate> results;
  std::mt19937 generator(11);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (const ProductShape& shape : kAttentionProducts) {
    const int64_t M = shape.M, N = shape.N, K = shape.K;
    const int64_t lda = shape.op_a == cpu::Op::none ? K : M, ldb = shape.op_b == cpu::Op::none ? N : K;
    std::vector<float> A(size_t(M * K)), B(size_t(K * N)), C(size_t(M * N), 0.0f);
    for (float& x : A) x = uniform(generator);
    for (float& x : B) x = uniform(generator);
    const double flop = 2.0 * double(M) * double(N) * double(K);
    ProductRate rate;
    rate.name = shape.name;
    rate.ops = std::string(shape.op_a == cpu::Op::none ? "N" : "T") + (shape.op_b == cpu::Op::none ? "N" : "T");
    rate.M = M;
    rate.N = N;
    rate.K = K;
    rate.gflops = single_thread_rate(flop, [&] {
      cpu::gemm(shape.op_a, shape.op_b, M, N, K, 1.0f, A.data(), lda, B.data(), ldb, 1.0f, C.data(), N);
    });
#if defined(FLASHBENCH_HAVE_OPENBLAS)
    openblas_set_num_threads(1);
    const auto trans = [](cpu::Op op) { return op == cpu::Op::none ? CblasNoTrans : CblasTrans; };
    rate.openblas_gflops = single_thread_rate(flop, [&] {
      cblas_sgemm(CblasRowMajor, trans(shape.op_a), trans(shape.op_b), int(M), int(N), int(K), 1.0f, A.data(), int(lda),
                  B.data(), int(ldb), 1.0f, C.data(), int(N));
    });
#endif
    results.push_back(rate);
  }
  return results;
}

}  // namespace

PeakReport measure_peak(int threads, int64_t sgemm_size, bool products) {
  PeakReport report;
  report.threads = cpu::bounded_thread_count(threads, "--threads");
  report.simd = std::string(cpu::isa_name(cpu::active_isa()));

  const std::vector<double> fma = time_fma(report.threads);
  report.fma_gflops = median_of(fma);
  report.fma_gflops_best = *std::max_element(fma.begin(), fma.end());

  const int64_t n = sgemm_size;
  report.sgemm_size = n;
  std::vector<float> A(size_t(n * n)), B(size_t(n * n)), C(size_t(n * n));
  std::mt19937 generator(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (float& x : A) x = uniform(generator);
  for (float& x : B) x = uniform(generator);
  const std::vector<double> ours =
      time_product(n, [&] { parallel_gemm(report.threads, n, A.data(), B.data(), C.data()); });
  report.sgemm_gflops = median_of(ours);
  report.sgemm_gflops_best = *std::max_element(ours.begin(), ours.end());

#if defined(FLASHBENCH_HAVE_OPENBLAS)
  openblas_set_num_threads(report.threads);
  report.openblas_core = openblas_get_corename();
  report.openblas_gflops = median_of(time_product(n, [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(n), int(n), int(n), 1.0f, A.data(), int(n), B.data(),
                int(n), 0.0f, C.data(), int(n));
  }));
#endif
  if (products) report.products = time_attention_products();
  return report;
}

}  // namespace flashbench
