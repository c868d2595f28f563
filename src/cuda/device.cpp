// The CUDA device (device.hpp) and how the registration opens it.
#include "device.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include <fmt/format.h>

#include "attention.hpp"
#include "flashbench/core/errors.hpp"
#include "flashbench/cuda/device.hpp"
#include "flashbench/cuda/kernels.hpp"

namespace flashbench::cuda {

namespace {

// Times between marks as CUDA events recorded on the stream: the GPU's own clock, so a mark costs
// the host nothing and the intervals are those of the work between the marks. Events are reused
// from one round of marks to the next.
class EventTimer final : public PhaseTimer {
 public:
  explicit EventTimer(cudaStream_t stream) : stream_(stream) {}
  ~EventTimer() override {
    for (cudaEvent_t event : events_) cudaEventDestroy(event);
  }
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;

  void mark() override {
    if (marked_ == events_.size()) {
      cudaEvent_t event = nullptr;
      check_cuda(cudaEventCreate(&event), "cudaEventCreate");
      events_.push_back(event);
    }
    check_cuda(cudaEventRecord(events_[marked_], stream_), "cudaEventRecord");
    ++marked_;
  }

  std::vector<double> intervals_ms() override {
    const size_t marks = marked_;
    marked_ = 0;  // forgotten even when the work failed
    std::vector<double> intervals;
    if (marks == 0) return intervals;
    // Waiting for the last mark reports a failure of any kernel before it.
    check_cuda(cudaEventSynchronize(events_[marks - 1]), "the work between timing marks");
    for (size_t i = 1; i < marks; ++i) {
      float ms = 0;
      check_cuda(cudaEventElapsedTime(&ms, events_[i - 1], events_[i]), "cudaEventElapsedTime");
      intervals.push_back(ms);
    }
    return intervals;
  }

 private:
  cudaStream_t stream_;
  std::vector<cudaEvent_t> events_;
  size_t marked_ = 0;  // events recorded since the last intervals_ms()
};

std::string version_text(int version) { return fmt::format("{}.{}", version / 1000, (version % 1000) / 10); }

// The GPU's UUID as nvidia-smi prints it (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx): the one name of a
// GPU that CUDA_VISIBLE_DEVICES and a scheduler's renumbering do not change.
std::string uuid_text(const cudaUUID_t& uuid) {
  std::string text = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) text += '-';
    text += fmt::format("{:02x}", static_cast<unsigned char>(uuid.bytes[i]));
  }
  return text;
}

}  // namespace

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // no driver, or no GPU: not an error of anything that follows
    return 0;
  }
  return count;
}

std::optional<int> compute_capability(int index) {
  if (index < 0 || index >= device_count()) return std::nullopt;
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, index) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, index) != cudaSuccess) {
    cudaGetLastError();
    return std::nullopt;
  }
  return 10 * major + minor;
}

std::optional<int64_t> l2_bytes_of(int index) {
  if (index < 0 || index >= device_count()) return std::nullopt;
  int bytes = 0;
  if (cudaDeviceGetAttribute(&bytes, cudaDevAttrL2CacheSize, index) != cudaSuccess) {
    cudaGetLastError();
    return std::nullopt;
  }
  return int64_t{bytes};
}

std::unique_ptr<Device> open_device(const DeviceOptions& options) {
  const int count = device_count();
  if (count == 0) throw UsageError("no CUDA device found");
  if (options.index < 0 || options.index >= count)
    throw UsageError(fmt::format("no CUDA device {}: {} found (0 to {})", options.index, count, count - 1));
  return std::make_unique<CudaDevice>(options.index);
}

CudaDevice& cuda_device_of(const LayerCall& call) {
  auto* device = dynamic_cast<CudaDevice*>(&call.device);
  if (!device) throw RuntimeFailure("internal error: a CUDA implementation was called on another device");
  return *device;
}

CudaDevice::CudaDevice(int index) : index_(index) {
  check_cuda(cudaSetDevice(index_), "cudaSetDevice");
  check_cuda(cudaGetDeviceProperties(&properties_, index_), "cudaGetDeviceProperties");
  char bus_id[32] = {};
  if (cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, index_) == cudaSuccess) pci_bus_id_ = bus_id;
  // Non-blocking: the legacy default stream, which other libraries may use, never waits on ours.
  check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  try {
    blas_ = std::make_unique<BlasHandle>(stream_);
  } catch (...) {
    cudaStreamDestroy(stream_);
    throw;
  }
}

CudaDevice::~CudaDevice() {
  cudaStreamSynchronize(stream_);
  if (flush_buffer_) cudaFree(flush_buffer_);
  blas_.reset();
  cudaStreamDestroy(stream_);
}

std::unique_ptr<MemorySpace> CudaDevice::open_space(MemoryLedger& ledger) {
  return std::make_unique<PoolSpace>(ledger, index_, stream_, blas_.get(), kBlasWorkspaceBytes);
}

std::optional<int64_t> CudaDevice::available_bytes() const {
  size_t free = 0, total = 0;
  check_cuda(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  return static_cast<int64_t>(free);
}

ModelParams CudaDevice::model_params(const Problem& problem) const { return cuda::model_params(problem, l2_bytes()); }

std::unique_ptr<PhaseTimer> CudaDevice::timer() { return std::make_unique<EventTimer>(stream_); }

void CudaDevice::synchronize() {
  // A kernel that failed after its launch returned is reported here, as a RuntimeFailure (a
  // `failed` row) with CUDA's message.
  check_cuda(cudaStreamSynchronize(stream_), "the GPU's work");
  check_cuda(cudaGetLastError(), "the GPU's work");
}

int64_t CudaDevice::cache_flush_bytes() const { return 2 * l2_bytes(); }

// Without it a timed region starts on an idle GPU: its first event fires at once, and every kernel
// then waits for the host to launch it, so the interval counts the host's dispatch (cuBLAS's and
// cuDNN's more than a fused kernel's) as well as the GPU's work. Behind the spin the host queues the
// region's start event and its launches while the GPU is still busy; the event fires when the spin
// ends, and the launches run back to back from there. Every implementation and the torch peers
// (torch.cuda._sleep) are timed behind the same kind of wait.
void CudaDevice::occupy(double milliseconds) { spin(milliseconds, stream()); }

void CudaDevice::flush_caches() {
  const size_t bytes = size_t(cache_flush_bytes());
  if (!flush_buffer_) check_cuda(cudaMalloc(&flush_buffer_, bytes), "cudaMalloc(L2 flush buffer)");
  // A new value every time, so that no write can be skipped as unchanged.
  check_cuda(cudaMemsetAsync(flush_buffer_, int(0x5a + flush_round_++ % 128), bytes, stream_), "cudaMemsetAsync(L2 flush)");
}

void CudaDevice::fill_normal(Dtype dtype, void* dst, int64_t count, uint64_t seed) {
  if (count > 0) cuda::fill_normal(dtype, dst, count, seed, stream_);
}

void CudaDevice::upload(std::span<const float> host, Dtype dtype, void* dst) {
  if (host.empty()) return;
  const size_t bytes = host.size() * size_t(element_bytes(dtype));
  std::vector<uint16_t> rounded;
  const void* source = host.data();
  if (dtype != Dtype::fp32) {
    rounded.resize(host.size());
    for (size_t i = 0; i < host.size(); ++i)
      rounded[i] = dtype == Dtype::bf16 ? __nv_bfloat16_raw(__float2bfloat16_rn(host[i])).x
                                        : __half_raw(__float2half_rn(host[i])).x;
    source = rounded.data();
  }
  check_cuda(cudaMemcpyAsync(dst, source, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync(upload)");
  synchronize();  // `rounded` must outlive the copy
}

std::vector<float> CudaDevice::download(const void* src, Dtype dtype, int64_t offset, int64_t count) {
  std::vector<float> out(static_cast<size_t>(count));
  if (count == 0) return out;
  const size_t element = size_t(element_bytes(dtype));
  const std::byte* first = static_cast<const std::byte*>(src) + size_t(offset) * element;
  const size_t bytes = size_t(count) * element;
  if (dtype == Dtype::fp32) {
    check_cuda(cudaMemcpyAsync(out.data(), first, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync(download)");
    synchronize();
    return out;
  }
  std::vector<uint16_t> raw(static_cast<size_t>(count));
  check_cuda(cudaMemcpyAsync(raw.data(), first, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync(download)");
  synchronize();
  for (size_t i = 0; i < raw.size(); ++i) {
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

void CudaDevice::describe(nlohmann::ordered_json& meta) const {
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  meta["gpu"] = {{"name", std::string(properties_.name)},
                 {"compute_capability", fmt::format("{}.{}", properties_.major, properties_.minor)},
                 {"memory_bytes", int64_t(properties_.totalGlobalMem)},
                 {"multiprocessors", properties_.multiProcessorCount},
                 {"l2_bytes", properties_.l2CacheSize},
                 {"driver_version", version_text(driver)},
                 {"runtime_version", version_text(runtime)},
                 {"uuid", uuid_text(properties_.uuid)},
                 {"index", index_}};
  // The index counts the GPUs this process sees: CUDA_VISIBLE_DEVICES (a scheduler sets it) says which.
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) meta["gpu"]["visible_devices"] = visible;
  meta["gpu"]["pci_bus_id"] = pci_bus_id_;
  // Whether the rows carry gpu_state: "available", or why not.
  const std::optional<GpuState> probe = gpu_state();
  meta["gpu"]["nvml"] = probe ? std::string("available") : nvml_missing_;
}

std::optional<GpuState> CudaDevice::gpu_state() const {
  if (pci_bus_id_.empty()) {
    nvml_missing_ = "CUDA gave no PCI bus id to find the GPU in NVML with";
    return std::nullopt;
  }
  return read_gpu_state(pci_bus_id_, nvml_missing_);
}

void CudaDevice::annotate(Row& row) const {
  row.device = properties_.name;
  row.device_index = index_;
  int driver = 0;
  cudaDriverGetVersion(&driver);
  row.driver = version_text(driver);
}

}  // namespace flashbench::cuda
