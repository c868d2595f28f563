// The CUDA backend: each variant's layer stack on the same random inputs, forward and backward
// timed separately with CUDA events, every buffer from a fresh pool per variant through the tagged
// ledger, and every variant's outputs compared with `standard`.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "flashbench/backend.hpp"
#include "flashbench/cuda/stack.hpp"
#include "flashbench/errors.hpp"
#include "flashbench/report.hpp"
#include "layers.hpp"

namespace flashbench {
namespace cuda {
namespace {

// Device tensor (storage dtype) -> host floats. Synchronises the stream.
std::vector<float> download(const void* device, Dtype dtype, int64_t count, cudaStream_t stream) {
  std::vector<float> out(count);
  const size_t bytes = size_t(count) * size_t(element_bytes(dtype));
  if (dtype == Dtype::fp32) {
    check_cuda(cudaMemcpyAsync(out.data(), device, bytes, cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync");
    check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    return out;
  }
  std::vector<uint16_t> raw(count);
  check_cuda(cudaMemcpyAsync(raw.data(), device, bytes, cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync");
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  for (int64_t i = 0; i < count; ++i) {
    if (dtype == Dtype::bf16) {
      __nv_bfloat16_raw r;
      r.x = raw[i];
      out[i] = __bfloat162float(__nv_bfloat16(r));
    } else {
      __half_raw r;
      r.x = raw[i];
      out[i] = __half2float(__half(r));
    }
  }
  return out;
}

// Host floats -> device tensor in the storage dtype (rounded to nearest). Synchronises the stream.
void upload(const std::vector<float>& host, Dtype dtype, void* device, cudaStream_t stream) {
  const size_t bytes = host.size() * size_t(element_bytes(dtype));
  std::vector<uint16_t> raw;
  const void* source = host.data();
  if (dtype != Dtype::fp32) {
    raw.resize(host.size());
    for (size_t i = 0; i < host.size(); ++i) {
      if (dtype == Dtype::bf16)
        raw[i] = __nv_bfloat16_raw(__float2bfloat16_rn(host[i])).x;
      else
        raw[i] = __half_raw(__float2half_rn(host[i])).x;
    }
    source = raw.data();
  }
  check_cuda(cudaMemcpyAsync(device, source, bytes, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}


// Variants agree with `standard` to within the storage precision: fp32 differs by summation order
// only; 16-bit variants round P, dS and the outputs at different points (bf16 has 8 significant
// bits, fp16 11), which over a few layers stays well within these bounds while a wrong mask, a
// wrong D or a missing rescale lands far outside them.
double check_tolerance(Dtype dtype) {
  switch (dtype) {
    case Dtype::fp32: return 1e-4;
    case Dtype::fp16: return 1e-2;
    case Dtype::bf16: return 5e-2;
  }
  return 0;
}

struct Reference {
  std::vector<float> output, input_grad;
};

class Events {
 public:
  Events() {
    for (cudaEvent_t& e : events_) check_cuda(cudaEventCreate(&e), "cudaEventCreate");
  }
  ~Events() {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }
  cudaEvent_t operator[](int i) const { return events_[i]; }
  static double between(cudaEvent_t a, cudaEvent_t b) {
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
    return ms;
  }

 private:
  cudaEvent_t events_[3]{};
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    check_cuda(cudaGetDeviceProperties(&properties_, device_), "cudaGetDeviceProperties");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    if (cublasCreate(&blas_) != CUBLAS_STATUS_SUCCESS) throw RuntimeFailure("cublasCreate failed");
    cublasSetStream(blas_, stream_);
  }
  ~CudaBackend() override {
    if (flush_buffer_) cudaFree(flush_buffer_);
    cublasDestroy(blas_);
    cudaStreamDestroy(stream_);
  }

  std::string_view name() const override { return "cuda"; }

  std::vector<Row> run(const Problem& problem, std::span<const Variant> variants, const RunOptions& options) override {
    validate(problem);
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    const uint64_t seed = options.seed ^ std::hash<std::string>{}(problem.describe());

    const std::vector<Variant> order = standard_first(variants);
    std::optional<Reference> reference;
    const bool has_standard = std::find(order.begin(), order.end(), Variant::standard) != order.end();
    if (options.check && !has_standard) reference = standard_reference(problem, options, seed);

    std::vector<Row> rows;
    for (Variant variant : order) rows.push_back(run_variant(problem, variant, options, seed, reference));
    return in_order_of(std::move(rows), variants);
  }

 private:
  int64_t l2_bytes() const { return properties_.l2CacheSize; }

  CudaModelParams model_params(const Problem& problem) const {
    return {kBlasWorkspaceBytes, input_sets(problem, l2_bytes())};
  }

  // Buffers alive for a whole variant: the cuBLAS workspace and the rotated input sets.
  struct Setup {
    DeviceBuffer blas_workspace;
    std::vector<DeviceBuffer> X0, dO;
  };

  Setup make_setup(DeviceAllocator& allocator, const Problem& problem, uint64_t seed, int64_t sets) {
    Setup setup;
    setup.blas_workspace = DeviceBuffer(allocator, Tag::workspace, kBlasWorkspaceBytes);
    // cublasSetStream resets the workspace, so the stream is set first.
    cublasSetStream(blas_, stream_);
    if (cublasSetWorkspace(blas_, setup.blas_workspace.data(), size_t(kBlasWorkspaceBytes)) != CUBLAS_STATUS_SUCCESS)
      throw RuntimeFailure("cublasSetWorkspace failed");
    const int64_t elements = problem.qkv_elements();
    const int64_t bytes = elements * element_bytes(problem.dtype);
    for (int64_t k = 0; k < sets; ++k) {
      setup.X0.emplace_back(allocator, Tag::input, bytes);
      setup.dO.emplace_back(allocator, Tag::input, bytes);
      fill_normal(problem.dtype, setup.X0.back().data(), elements, seed + 2 * uint64_t(k), stream_);
      fill_normal(problem.dtype, setup.dO.back().data(), elements, seed + 2 * uint64_t(k) + 1, stream_);
    }
    return setup;
  }

  void release_blas_workspace() {
    // Back to cuBLAS's own workspace before ours is freed with its pool.
    cublasSetStream(blas_, stream_);
  }

  std::optional<Reference> standard_reference(const Problem& problem, const RunOptions& options, uint64_t seed) {
    MemoryLedger ledger(options.mem_limit_bytes > 0 ? options.mem_limit_bytes : MemoryLedger::kUnlimited);
    try {
      DeviceAllocator allocator(ledger, device_, stream_);
      Context context{allocator, blas_, stream_};
      Setup setup = make_setup(allocator, problem, seed, 1);
      StackState state;
      stack_forward(Variant::standard, problem, context, setup.X0[0].data(), state);
      Reference reference;
      reference.output = download(state.outputs.back().data(), problem.dtype, problem.qkv_elements(), stream_);
      DeviceBuffer dX0 = stack_backward(Variant::standard, problem, context, setup.X0[0].data(), setup.dO[0].data(), state);
      reference.input_grad = download(dX0.data(), problem.dtype, problem.qkv_elements(), stream_);
      release_blas_workspace();
      return reference;
    } catch (const OutOfMemory&) {
      release_blas_workspace();
      return std::nullopt;
    }
  }

  void flush_l2() {
    const size_t bytes = size_t(2) * size_t(l2_bytes());
    if (!flush_buffer_) check_cuda(cudaMalloc(&flush_buffer_, bytes), "cudaMalloc(L2 flush buffer)");
    check_cuda(cudaMemsetAsync(flush_buffer_, 0x5a, bytes, stream_), "cudaMemsetAsync(L2 flush)");
  }

  Row run_variant(const Problem& problem, Variant variant, const RunOptions& options, uint64_t seed,
                  std::optional<Reference>& reference) {
    Row row;
    row.backend = "cuda";
    row.variant = variant;
    row.problem = problem;
    row.device = properties_.name;
    const CudaModelParams params = model_params(problem);
    row.model = model_memory_cuda(problem, variant, params);
    if (variant == Variant::v2 && !flash_supports(problem.head_dim)) {
      row.status = Status::skipped;
      row.reason = fmt::format("v2 on CUDA is built for head_dim 64 and 128, not {}", problem.head_dim);
      return row;
    }
    MemoryLedger ledger(options.mem_limit_bytes > 0 ? options.mem_limit_bytes : MemoryLedger::kUnlimited);
    try {
      DeviceAllocator allocator(ledger, device_, stream_);
      Context context{allocator, blas_, stream_};
      ledger.set_phase(Phase::setup);
      Setup setup = make_setup(allocator, problem, seed, params.input_sets);
      Events events;

      // One pass of one input set: fills fwd_ms and bwd_ms, optionally downloads X_L and dX_0.
      auto pass = [&](int64_t set, double& fwd_ms, double& bwd_ms, Reference* capture) {
        if (options.cold) flush_l2();
        StackState state;
        ledger.set_phase(Phase::fwd);
        check_cuda(cudaEventRecord(events[0], stream_), "cudaEventRecord");
        stack_forward(variant, problem, context, setup.X0[set].data(), state);
        check_cuda(cudaEventRecord(events[1], stream_), "cudaEventRecord");
        if (capture) {
          row.measured.kept_bytes = ledger.live()[Tag::kept];
          capture->output = download(state.outputs.back().data(), problem.dtype, problem.qkv_elements(), stream_);
        }
        ledger.set_phase(Phase::bwd);
        DeviceBuffer dX0 = stack_backward(variant, problem, context, setup.X0[set].data(), setup.dO[set].data(), state);
        check_cuda(cudaEventRecord(events[2], stream_), "cudaEventRecord");
        check_cuda(cudaEventSynchronize(events[2]), "cudaEventSynchronize");
        check_cuda(cudaGetLastError(), "the layer stack");
        fwd_ms = Events::between(events[0], events[1]);
        bwd_ms = Events::between(events[1], events[2]);
        if (capture) capture->input_grad = download(dX0.data(), problem.dtype, problem.qkv_elements(), stream_);
      };

      // The measured pass: memory (ledger and pool high-water) and the outputs for the check.
      check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
      allocator.reset_pool_high();
      ledger.reset_peaks();
      Reference outputs;
      double fwd_ms = 0, bwd_ms = 0;
      pass(0, fwd_ms, bwd_ms, &outputs);
      row.measured.peak_bytes = ledger.peak_bytes();
      row.measured.peak_phase = ledger.peak_phase();
      row.measured.by_tag = ledger.at_peak();
      row.measured.high_water = ledger.high_water();
      row.measured.os_peak_bytes = allocator.pool_used_high();
      record_check(row, variant, options, std::move(outputs), reference);

      // Warm-up, then samples until the median is steady, rotating input sets.
      const SamplingPolicy& policy = options.sampling;
      int warmups_done = 0;
      double warmup_ms = 0;
      int64_t next_set = 0;
      while (warmups_done < policy.warmup || warmup_ms < policy.warmup_ms) {
        pass(next_set++ % params.input_sets, fwd_ms, bwd_ms, nullptr);
        ++warmups_done;
        warmup_ms += fwd_ms + bwd_ms;
      }
      std::vector<double> fwd_samples, bwd_samples;
      const auto start = std::chrono::steady_clock::now();
      auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
      while (needs_more_samples(policy, {&fwd_samples, &bwd_samples}, seconds())) {
        pass(next_set++ % params.input_sets, fwd_ms, bwd_ms, nullptr);
        fwd_samples.push_back(fwd_ms);
        bwd_samples.push_back(bwd_ms);
      }
      row.fwd = summarize(std::move(fwd_samples), policy.max_noise);
      row.bwd = summarize(std::move(bwd_samples), policy.max_noise);
      if (row.check && !row.check->passed()) {
        row.status = Status::failed;
        row.reason = fmt::format("outputs differ from {} by {:.2e} (tolerance {:.0e})", row.check->reference,
                                 row.check->max_rel_err, row.check->tolerance);
      }
      release_blas_workspace();
    } catch (const OutOfMemory& e) {
      release_blas_workspace();
      row.status = Status::oom;
      row.reason = e.what();
    }
    return row;
  }

  static void record_check(Row& row, Variant variant, const RunOptions& options, Reference outputs,
                           std::optional<Reference>& reference) {
    if (!options.check) return;
    const double tolerance = check_tolerance(row.problem.dtype);
    if (!reference) {  // the first variant that runs (standard, when asked for) is the reference
      reference = std::move(outputs);
      if (variant != Variant::standard) row.check = Check{"none (standard did not run)", 0.0, tolerance};
      return;
    }
    const double error = std::max(max_relative_error(outputs.output, reference->output),
                                  max_relative_error(outputs.input_grad, reference->input_grad));
    row.check = Check{"standard", error, tolerance};
  }

  int device_;
  cudaDeviceProp properties_{};
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  void* flush_buffer_ = nullptr;  // L2 flush for --cold: harness memory, outside the tracked pool
};

void install_gpu_meta(const cudaDeviceProp& properties) {
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  const std::string name = properties.name;
  const int64_t memory = int64_t(properties.totalGlobalMem);
  const int sms = properties.multiProcessorCount, l2 = properties.l2CacheSize;
  const std::string capability = fmt::format("{}.{}", properties.major, properties.minor);
  set_gpu_meta_hook([=](nlohmann::ordered_json& meta) {
    meta["gpu"] = {{"name", name},
                   {"compute_capability", capability},
                   {"memory_bytes", memory},
                   {"multiprocessors", sms},
                   {"l2_bytes", l2},
                   {"driver_version", fmt::format("{}.{}", driver / 1000, (driver % 1000) / 10)},
                   {"runtime_version", fmt::format("{}.{}", runtime / 1000, (runtime % 1000) / 10)}};
  });
}

}  // namespace

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

StackResult run_stack_once(Variant variant, const Problem& problem, const std::vector<float>& X0,
                           const std::vector<float>& dO) {
  validate(problem);
  if (device_count() == 0) throw UsageError("no CUDA device found");
  if (variant == Variant::v2 && !flash_supports(problem.head_dim))
    throw UsageError(fmt::format("v2 on CUDA is built for head_dim 64 and 128, not {}", problem.head_dim));
  const int64_t elements = problem.qkv_elements();
  if (int64_t(X0.size()) != elements || int64_t(dO.size()) != elements)
    throw UsageError("X0 and dO must each hold B·H·N·d values");
  check_cuda(cudaSetDevice(0), "cudaSetDevice");
  cudaStream_t stream = nullptr;
  check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  cublasHandle_t blas = nullptr;
  if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) throw RuntimeFailure("cublasCreate failed");
  cublasSetStream(blas, stream);
  StackResult result;
  {
    MemoryLedger ledger;
    DeviceAllocator allocator(ledger, 0, stream);
    Context context{allocator, blas, stream};
    const int64_t bytes = elements * element_bytes(problem.dtype);
    DeviceBuffer X0_device(allocator, Tag::input, bytes), dO_device(allocator, Tag::input, bytes);
    upload(X0, problem.dtype, X0_device.data(), stream);
    upload(dO, problem.dtype, dO_device.data(), stream);
    StackState state;
    stack_forward(variant, problem, context, X0_device.data(), state);
    result.output = download(state.outputs.back().data(), problem.dtype, elements, stream);
    DeviceBuffer dX0 = stack_backward(variant, problem, context, X0_device.data(), dO_device.data(), state);
    result.input_grad = download(dX0.data(), problem.dtype, elements, stream);
    check_cuda(cudaGetLastError(), "the layer stack");
  }
  cublasDestroy(blas);
  cudaStreamDestroy(stream);
  return result;
}

}  // namespace cuda

std::unique_ptr<Backend> make_cuda_backend() {
  const int count = cuda::device_count();
  if (count == 0) throw UsageError("no CUDA device found");
  auto backend = std::make_unique<cuda::CudaBackend>(0);
  cudaDeviceProp properties{};
  cuda::check_cuda(cudaGetDeviceProperties(&properties, 0), "cudaGetDeviceProperties");
  cuda::install_gpu_meta(properties);
  return backend;
}

}  // namespace flashbench
