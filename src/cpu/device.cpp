// The CPU device (OpenMP on the host) and its implementations of every variant.
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include <fmt/format.h>

#include "flashbench/core/errors.hpp"
#include "flashbench/core/os_memory.hpp"
#include "flashbench/cpu/attention.hpp"
#include "flashbench/cpu/isa.hpp"
#include "flashbench/cpu/kept.hpp"
#include "flashbench/cpu/peak.hpp"
#include "flashbench/cpu/storage16.hpp"
#include "flashbench/cpu/threads.hpp"
#include "flashbench/harness/registry.hpp"

namespace flashbench {
namespace cpu {
namespace {

// meta.cpu_isa: the ISA the kernels run on, its vector width, those this CPU supports and those the
// binary holds (isa.hpp).
void describe_isa(nlohmann::ordered_json& meta) {
  nlohmann::ordered_json supported = nlohmann::ordered_json::array(), compiled = nlohmann::ordered_json::array();
  for (Isa isa : kAllIsas) {
    compiled.push_back(isa_name(isa));
    if (cpu_supports(isa)) supported.push_back(isa_name(isa));
  }
  meta["cpu_isa"] = {{"active", isa_name(active_isa())}, {"lanes", isa_lanes(active_isa())},
                     {"supported", supported}, {"compiled", compiled}};
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Box-Muller on two 32-bit uniforms of one 64-bit hash of (seed, i): element i depends on nothing
// else, so any thread can write any element.
float counter_normal(uint64_t seed, int64_t i) {
  const uint64_t bits = splitmix64(seed ^ splitmix64(uint64_t(i)));
  const float u1 = (float(uint32_t(bits >> 32)) + 1.0f) * 2.3283064365386963e-10f;  // (0, 1]
  const float u2 = float(uint32_t(bits)) * 2.3283064365386963e-10f;                  // [0, 1)
  return std::sqrt(-2.0f * std::log(u1)) * std::cos(2.0f * std::numbers::pi_v<float> * u2);
}

// Bytes the --cold flush writes: twice the last-level cache, at least 64 MiB.
int64_t flush_bytes() {
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return std::max<int64_t>(int64_t{64} << 20, 2 * int64_t(std::max(l3, 0L)));
}

class CpuDevice final : public Device {
 public:
  explicit CpuDevice(const DeviceOptions& options) {
    omp_set_num_threads(bounded_thread_count(options.threads, "--threads"));
    // Large blocks get pages of their own, so each implementation's VmHWM rises with what it
    // touches instead of reusing resident heap pages that an earlier one freed.
    use_fresh_pages_for_large_blocks();
  }

  std::string_view name() const override { return "cpu"; }
  std::unique_ptr<MemorySpace> open_space(MemoryLedger& ledger) override { return std::make_unique<HostSpace>(ledger); }
  std::optional<int64_t> available_bytes() const override { return available_memory_bytes(); }
  bool shares_host_memory() const override { return true; }
  ModelParams model_params(const Problem&) const override { return params(omp_get_max_threads()); }
  static ModelParams params(int threads) { return ModelParams{.threads = threads, .gradient_element_bytes = 4}; }

  std::unique_ptr<PhaseTimer> timer() override { return std::make_unique<SteadyClockTimer>(); }
  void synchronize() override {}
  void flush_caches() override {
    if (flush_.empty()) flush_.assign(size_t(cache_flush_bytes()), 0);
    const size_t n = flush_.size();
    unsigned char* data = flush_.data();
    ++flush_round_;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i += 64) data[i] = static_cast<unsigned char>(flush_round_ + i);
  }
  int64_t cache_flush_bytes() const override { return flush_bytes(); }

  void fill_normal(Dtype dtype, void* dst, int64_t count, uint64_t seed) override {
    if (dtype == Dtype::fp32) {
      float* out = static_cast<float*>(dst);
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < count; ++i) out[i] = counter_normal(seed, i);
      return;
    }
    Half* out = static_cast<Half*>(dst);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < count; ++i) out[i] = round_to_half(dtype, counter_normal(seed, i));
  }
  void upload(std::span<const float> host, Dtype dtype, void* dst) override {
    if (dtype == Dtype::fp32) std::copy(host.begin(), host.end(), static_cast<float*>(dst));
    else round_to_storage(dtype, host.data(), static_cast<Half*>(dst), int64_t(host.size()));
  }
  std::vector<float> download(const void* src, Dtype dtype, int64_t offset, int64_t count) override {
    std::vector<float> out(count);
    if (dtype == Dtype::fp32) std::copy_n(static_cast<const float*>(src) + offset, count, out.data());
    else widen_from_storage(dtype, static_cast<const Half*>(src) + offset, out.data(), count);
    return out;
  }
  Dtype gradient_dtype(const Problem&) const override { return Dtype::fp32; }

  // The host block of the metadata says the rest.
  void describe(nlohmann::ordered_json& meta) const override { describe_isa(meta); }
  void annotate(Row& row) const override { row.threads = omp_get_max_threads(); }

 private:
  std::vector<unsigned char> flush_;
  unsigned flush_round_ = 0;
};

// Every variant through the kernels of attention.cpp (fp32) and storage16.cpp (bf16, fp16 storage);
// versions differ in their tiling and v2's backward path.
class CpuAttention final : public Implementation {
 public:
  CpuAttention(std::string name, Variant variant, Tiling tiling, std::string summary)
      : name_(std::move(name)), variant_(variant), tiling_(tiling), summary_(std::move(summary)) {}

  std::string_view name() const override { return name_; }
  Variant variant() const override { return variant_; }
  std::string_view summary() const override { return summary_; }

  std::optional<std::string> unsupported(const Problem& problem) const override {
    if (problem.dtype != Dtype::fp32 && (!problem.square() || problem.dropout > 0))
      return std::string("16-bit storage on the CPU runs G = H, N_k = N without dropout (use fp32 for G < H, "
                         "N_k != N or dropout)");
    return std::nullopt;
  }

  LayerCosts costs(const Problem& problem, const ModelParams& params) const override {
    const LayerShape shape = LayerShape::of(problem);
    // 16-bit storage adds fp32 staging and runs standard and v1 one head at a time (storage16.hpp).
    const auto workspace = problem.dtype == Dtype::fp32 ? workspace_elements : workspace16_elements;
    constexpr int64_t kFloat = 4;
    // checkpoint keeps nothing, so naive GQA repeats K and V again in each pass (workspace).
    const int64_t repeated = repeats_in_workspace(problem) ? 2 * problem.expanded_kv_elements() * kFloat : 0;
    // Naive GQA: the kernels write dK and dV of the H repeated heads, summed into the G heads after.
    const int64_t repeated_grads = problem.repeats_kv() ? 2 * problem.expanded_kv_elements() * kFloat : 0;
    return {.forward_workspace_bytes = workspace(variant_, Pass::forward, shape, tiling_, params.threads) * kFloat + repeated,
            .backward_workspace_bytes = workspace(variant_, Pass::backward, shape, tiling_, params.threads) * kFloat + repeated,
            .backward_extra_grad_bytes = repeated_grads};
  }

  void annotate(Row& row) const override {
    row.isa = isa_name(active_isa());
    row.row_block = tiling_.row_block;
    row.col_block = tiling_.col_block;
    if (variant_ == Variant::v2) row.diagonal_block = tiling_.diagonal_block;  // only v2 cuts the diagonal
  }

  void forward(LayerCall& call, const LayerInputs& in, void* O, KeptTensors& kept) override {
    const Problem& p = call.problem;
    const LayerShape shape = layer_shape(call);
    if (p.dtype != Dtype::fp32) {
      forward16(variant_, p.dtype, shape, tiling_, static_cast<const Half*>(in.Q), static_cast<const Half*>(in.K),
                static_cast<const Half*>(in.V), static_cast<Half*>(O), kept_view16(variant_, p, kept), call.space);
      return;
    }
    const float* Q = static_cast<const float*>(in.Q);
    const float* K = static_cast<const float*>(in.K);
    const float* V = static_cast<const float*>(in.V);
    const KeptView view = kept_view(variant_, p, kept);
    if (!p.repeats_kv()) {
      cpu::forward(variant_, shape, tiling_, Q, K, V, static_cast<float*>(O), view, call.space);
      return;
    }
    // Naive GQA: K and V repeated to H heads (kept for backward, or workspace for checkpoint).
    Buffer<float> repeated;
    float* Kx = nullptr;
    float* Vx = nullptr;
    if (repeats_in_workspace(p)) {
      repeated = Buffer<float>(call.space, Tag::workspace, 2 * p.expanded_kv_elements());
      Kx = repeated.data();
      Vx = Kx + p.expanded_kv_elements();
    } else {
      Kx = kept.get<float>("Kx");
      Vx = kept.get<float>("Vx");
    }
    repeat_heads(p, K, Kx);
    repeat_heads(p, V, Vx);
    cpu::forward(variant_, shape, tiling_, Q, Kx, Vx, static_cast<float*>(O), view, call.space);
  }

  void backward(LayerCall& call, const LayerInputs& in, const void* O, const void* dO, KeptTensors& kept,
                const LayerGradients& gradients) override {
    const Problem& p = call.problem;
    const LayerShape shape = layer_shape(call);
    float* dQ = static_cast<float*>(gradients.dQ);
    float* dK = static_cast<float*>(gradients.dK);
    float* dV = static_cast<float*>(gradients.dV);
    if (p.dtype != Dtype::fp32) {
      backward16(variant_, p.dtype, shape, tiling_, static_cast<const Half*>(in.Q), static_cast<const Half*>(in.K),
                 static_cast<const Half*>(in.V), static_cast<const Half*>(O), static_cast<const Half*>(dO),
                 kept_view16(variant_, p, kept), dQ, dK, dV, call.space);
      return;
    }
    const float* Q = static_cast<const float*>(in.Q);
    const float* K = static_cast<const float*>(in.K);
    const float* V = static_cast<const float*>(in.V);
    const KeptView view = kept_view(variant_, p, kept);
    if (!p.repeats_kv()) {
      cpu::backward(variant_, shape, tiling_, Q, K, V, static_cast<const float*>(O), static_cast<const float*>(dO),
                    view, dQ, dK, dV, call.space);
      return;
    }
    // Naive GQA: the kernels see H K/V heads and write their gradients at H heads, summed per group
    // into dK and dV afterwards (what repeat_interleave's backward does).
    Buffer<float> repeated;
    const float* Kx = nullptr;
    const float* Vx = nullptr;
    if (repeats_in_workspace(p)) {
      repeated = Buffer<float>(call.space, Tag::workspace, 2 * p.expanded_kv_elements());
      repeat_heads(p, K, repeated.data());
      repeat_heads(p, V, repeated.data() + p.expanded_kv_elements());
      Kx = repeated.data();
      Vx = Kx + p.expanded_kv_elements();
    } else {
      Kx = kept.get<float>("Kx");
      Vx = kept.get<float>("Vx");
    }
    Buffer<float> dKx(call.space, Tag::grad, p.expanded_kv_elements());
    Buffer<float> dVx(call.space, Tag::grad, p.expanded_kv_elements());
    cpu::backward(variant_, shape, tiling_, Q, Kx, Vx, static_cast<const float*>(O), static_cast<const float*>(dO),
                  view, dQ, dKx.data(), dVx.data(), call.space);
    sum_groups(p, dKx.data(), dK);
    sum_groups(p, dVx.data(), dV);
  }

 private:
  // The kernels' shape of this layer, its dropout mask keyed by the stack's seed and the layer.
  static LayerShape layer_shape(const LayerCall& call) {
    LayerShape shape = LayerShape::of(call.problem);
    shape.dropout = philox::make_dropout_mask(call.problem.dropout, call.dropout_seed, uint64_t(call.layer));
    return shape;
  }

  // Naive GQA without the repeated K and V kept (checkpoint): they are repeated in each pass.
  bool repeats_in_workspace(const Problem& problem) const {
    if (!problem.repeats_kv()) return false;
    for (const KeptTensor& tensor : kept_per_layer(variant_, problem))
      if (tensor.name == "Kx") return false;
    return true;
  }

  // out [B,H,N_k,d] = x [B,G,N_k,d] with each head repeated r = H/G times (repeat_interleave).
  static void repeat_heads(const Problem& p, const float* x, float* out) {
    const int64_t per_head = p.key_seq() * p.head_dim, r = p.group_size();
#pragma omp parallel for schedule(static)
    for (int64_t h = 0; h < p.heads_total(); ++h) std::copy_n(x + h / r * per_head, per_head, out + h * per_head);
  }

  // out [B,G,N_k,d] = the sums of the r heads of each group of repeated [B,H,N_k,d].
  static void sum_groups(const Problem& p, const float* repeated, float* out) {
    const int64_t per_head = p.key_seq() * p.head_dim, r = p.group_size();
#pragma omp parallel for schedule(static)
    for (int64_t e = 0; e < p.kv_elements(); ++e) {
      const int64_t g = e / per_head, k = e % per_head;
      float sum = 0.0f;
      for (int64_t copy = 0; copy < r; ++copy) sum += repeated[(g * r + copy) * per_head + k];
      out[e] = sum;
    }
  }

 private:
  std::string name_;
  Variant variant_;
  Tiling tiling_;
  std::string summary_;
};

std::vector<std::unique_ptr<Implementation>> implementations() {
  std::vector<std::unique_ptr<Implementation>> all;
  for (Variant variant : kAllVariants)
    all.push_back(std::make_unique<CpuAttention>(std::string(to_string(variant)), variant, Tiling{},
                                                 fmt::format("{}: tiled fp32 kernels, OpenMP", to_string(variant))));
  // v2's two backward paths, each forced, for comparing them on the same inputs.
  all.push_back(std::make_unique<CpuAttention>("v2.whole", Variant::v2, Tiling{.v2_backward = V2BackwardPath::whole_heads},
                                               "v2 with whole heads per thread in backward, whatever the thread count"));
  all.push_back(std::make_unique<CpuAttention>("v2.split", Variant::v2, Tiling{.v2_backward = V2BackwardPath::split_heads},
                                               "v2 with heads split over column then row blocks in backward"));
  return all;
}

}  // namespace
}  // namespace cpu

void register_device_cpu(Registry& registry) {
  registry.add(DeviceEntry{
      .name = "cpu",
      .summary = "the host CPU: OpenMP threads, kernels for AVX-512, AVX2 and scalar, chosen at start-up (--isa)",
      .open = [](const DeviceOptions& options) -> std::unique_ptr<Device> {
        if (options.index != 0)
          throw UsageError(fmt::format("--device-index {}: the cpu backend is one device, index 0", options.index));
        return std::make_unique<cpu::CpuDevice>(options);
      },
      .offline_params = [](const Problem&, const DeviceOptions& options) {
        return cpu::CpuDevice::params(options.threads > 0 ? options.threads : omp_get_max_threads());
      },
      .implementations = cpu::implementations,
      .measure_peak = measure_peak,
      .choose_isa = [](std::string_view name, std::string_view source) { cpu::use_isa(name, source); },
      .isa_help = cpu::isa_help,
      .isa_names = [] {
        std::vector<std::string> names;
        for (cpu::Isa isa : cpu::kAllIsas) names.emplace_back(cpu::isa_name(isa));
        return names;
      }(),
      .nominal_flop_rate = 1e11,  // a 16-core AVX-512 server: 235 GFLOP/s fp32 (docs/cpu-results.md), a laptop less
  });
}

}  // namespace flashbench
