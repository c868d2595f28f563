#pragma once
// A device: what differs between the machines the harness measures on (the host CPU, a CUDA GPU).
// The runner (runner.hpp) owns the measuring job; a device only answers these questions. A new
// device is one folder with a Device, its Implementations and one registration (registry.hpp).
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "flashbench/core/memory.hpp"
#include "flashbench/core/problem.hpp"
#include "flashbench/core/result.hpp"
#include "flashbench/model/model.hpp"

namespace flashbench {

// Times between marks in the device's order of work: CPU steady clock, CUDA events on the stream.
class PhaseTimer {
 public:
  virtual ~PhaseTimer() = default;
  virtual void mark() = 0;
  // Waits for the work marked so far; the milliseconds between consecutive marks, then forgets them.
  virtual std::vector<double> intervals_ms() = 0;
};

// A PhaseTimer on the host's steady clock, for devices whose work is done when the call returns.
class SteadyClockTimer final : public PhaseTimer {
 public:
  void mark() override;
  std::vector<double> intervals_ms() override;

 private:
  std::vector<std::chrono::steady_clock::time_point> marks_;
};

// Settings a device is opened with.
struct DeviceOptions {
  int threads = 0;  // CPU worker threads; 0 = all cores (OpenMP's default)
  int index = 0;    // which GPU
};

class Device {
 public:
  virtual ~Device() = default;

  virtual std::string_view name() const = 0;  // the registry's name: "cpu", "cuda"

  // A fresh memory space on this device behind `ledger`, holding the device's own persistent buffers
  // (the cuBLAS workspace) for as long as it lives.
  virtual std::unique_ptr<MemorySpace> open_space(MemoryLedger& ledger) = 0;
  // Bytes a run may use on this device now (MemAvailable, the GPU's free memory).
  virtual std::optional<int64_t> available_bytes() const = 0;
  // True when the device's memory is the host's: then the harness's own host buffers compete with
  // the implementations' and the pre-flight adds them up.
  virtual bool shares_host_memory() const = 0;
  // Sizes the model needs that only the device knows (threads, input sets, persistent workspace).
  virtual ModelParams model_params(const Problem& problem) const = 0;

  virtual std::unique_ptr<PhaseTimer> timer() = 0;
  // Keeps the device busy for about `milliseconds` from now, so that the host's dispatch of the work
  // queued after it is hidden under it and a timed region measures the device's work alone, the
  // same for every implementation and peer (nvbench's blocking kernel; the torch peers'
  // torch.cuda._sleep). CUDA queues a spin kernel; a device that runs work as the host issues it
  // (the CPU) has no queue to fill and does nothing.
  virtual void occupy(double milliseconds);
  // The queue a plugin's work goes on (plugin.h's flashbench_call.stream): the cudaStream_t that
  // every call of the CUDA device is ordered on; nothing on a device that runs work as it is issued.
  virtual void* native_stream() const { return nullptr; }
  virtual void synchronize() = 0;  // waits for all work; throws RuntimeFailure on an asynchronous error
  // Evicts the caches between samples (--cold). Its buffer is the device's own, outside the ledger:
  // cache_flush_bytes() says how large, for the pre-flight.
  virtual void flush_caches() = 0;
  virtual int64_t cache_flush_bytes() const = 0;

  // `count` standard-normal numbers into dst (storage `dtype`), element i a function of (seed, i).
  virtual void fill_normal(Dtype dtype, void* dst, int64_t count, uint64_t seed) = 0;
  // Host floats into a tensor of `dtype` on the device (rounded to nearest).
  virtual void upload(std::span<const float> host, Dtype dtype, void* dst) = 0;
  // Elements [offset, offset + count) of a tensor stored in `dtype` on the device, as float.
  virtual std::vector<float> download(const void* src, Dtype dtype, int64_t offset, int64_t count) = 0;
  // The dtype of a layer's gradients dQ, dK, dV: fp32 on the CPU, the storage dtype on CUDA.
  virtual Dtype gradient_dtype(const Problem& problem) const = 0;

  // Its block of the run's metadata (e.g. "gpu"), and what every row of it records (threads, GPU).
  virtual void describe(nlohmann::ordered_json& meta) const = 0;
  virtual void annotate(Row& row) const = 0;
  // The GPU's clocks, power and throttling now (NVML), recorded before and after a row's samples;
  // nothing on devices without one or where NVML does not answer.
  virtual std::optional<GpuState> gpu_state() const { return std::nullopt; }

  // Opens and closes a named range of the device's work for a profiler (NVTX on CUDA, shown by
  // Nsight Systems and Nsight Compute); ranges nest. Nothing on a device without such a tool.
  virtual void push_range(const std::string& name);
  virtual void pop_range();
};

// A device range for the lifetime of a scope (`run --profile`); an empty name opens none, so that a
// run that names no ranges pays nothing.
class DeviceRange {
 public:
  DeviceRange(Device& device, std::string name);
  ~DeviceRange();
  DeviceRange(const DeviceRange&) = delete;
  DeviceRange& operator=(const DeviceRange&) = delete;

 private:
  Device& device_;
  bool open_;
};

}  // namespace flashbench
