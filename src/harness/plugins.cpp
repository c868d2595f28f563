// Plugins: a shared library's implementations behind the Implementation interface. The library
// speaks plugin.h's C ABI; this file turns its answers into what the runner expects (a reason →
// a skipped row, an error return or an exception → RuntimeFailure → a failed row) and hands it
// only buffers of the ledger (its workspace too), so that the model and the measurement cover it.
#include "flashbench/harness/plugins.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <string_view>

#include <fmt/format.h>

#include "flashbench/core/errors.hpp"
#include "flashbench/harness/device.hpp"
#include "flashbench/harness/registry.hpp"
#include "flashbench/plugin.h"

namespace flashbench {

namespace {

std::string_view device_name(flashbench_device device) { return device == FLASHBENCH_DEVICE_CUDA ? "cuda" : "cpu"; }

Variant variant_of(flashbench_variant variant) {
  switch (variant) {
    case FLASHBENCH_VARIANT_STANDARD: return Variant::standard;
    case FLASHBENCH_VARIANT_V1: return Variant::v1;
    case FLASHBENCH_VARIANT_V2: return Variant::v2;
    case FLASHBENCH_VARIANT_CHECKPOINT: return Variant::checkpoint;
  }
  throw RuntimeFailure("internal error: a variant outside plugin.h's");  // load_plugin checked the range
}

flashbench_dtype dtype_of(Dtype dtype) {
  switch (dtype) {
    case Dtype::fp32: return FLASHBENCH_DTYPE_FP32;
    case Dtype::bf16: return FLASHBENCH_DTYPE_BF16;
    case Dtype::fp16: return FLASHBENCH_DTYPE_FP16;
  }
  throw RuntimeFailure("internal error: a dtype without a plugin.h value");
}

flashbench_problem problem_of(const Problem& p) {
  return {.batch = p.batch, .heads = p.heads, .kv_heads = p.key_heads(), .seq_q = p.seq, .seq_kv = p.key_seq(),
          .head_dim = p.head_dim, .causal = p.causal ? 1 : 0, .dtype = dtype_of(p.dtype), .scale = p.scale()};
}

// Calls into the library, whose failures come back as RuntimeFailure naming the implementation and
// the function: a C++ plugin's exception must not cross into the sweep.
template <class Call>
auto guarded(std::string_view implementation, std::string_view function, Call call) {
  try {
    return call();
  } catch (const std::exception& e) {
    throw RuntimeFailure(fmt::format("plugin implementation {}: {} threw: {}", implementation, function, e.what()));
  } catch (...) {
    throw RuntimeFailure(fmt::format("plugin implementation {}: {} threw something that is not a std::exception",
                                     implementation, function));
  }
}

class PluginImplementation final : public Implementation {
 public:
  PluginImplementation(const flashbench_implementation& offer, std::string summary)
      : offer_(offer), variant_(variant_of(offer.variant)), summary_(std::move(summary)) {}

  std::string_view name() const override { return offer_.name; }
  Variant variant() const override { return variant_; }
  std::string_view summary() const override { return summary_; }
  bool foreign() const override { return true; }

  std::optional<std::string> unsupported(const Problem& problem) const override {
    // ABI 1 passes no dropout mask (Philox key, layer offset), so no plugin could drop the same
    // weights as the reference; naive GQA is the built-in kernels' repeat, a plugin reads G heads.
    if (problem.dropout > 0) return std::string("a plugin (ABI 1) is given no dropout mask: dropout runs built-in only");
    if (problem.repeats_kv())
      return std::string("--expand-kv repeats K and V for the built-in kernels; a plugin reads the G heads itself");
    const flashbench_problem p = problem_of(problem);
    try {
      if (offer_.supports)
        if (const char* why = guarded(name(), "supports", [&] { return offer_.supports(&p); }))
          return std::string(why);
      for (const flashbench_pass pass : {FLASHBENCH_PASS_FORWARD, FLASHBENCH_PASS_BACKWARD})
        if (const int64_t bytes = workspace(problem, pass); bytes < 0)
          return fmt::format("its workspace_bytes answered {} for the {}", bytes,
                             pass == FLASHBENCH_PASS_FORWARD ? "forward" : "backward");
    } catch (const RuntimeFailure& e) {
      return std::string(e.what());  // said before anything is allocated, as its own refusal would be
    }
    return std::nullopt;
  }

  LayerCosts costs(const Problem& problem, const ModelParams&) const override {
    return {.forward_workspace_bytes = std::max<int64_t>(0, workspace(problem, FLASHBENCH_PASS_FORWARD)),
            .backward_workspace_bytes = std::max<int64_t>(0, workspace(problem, FLASHBENCH_PASS_BACKWARD))};
  }

  void forward(LayerCall& call, const LayerInputs& in, void* O, KeptTensors& kept) override {
    flashbench_call c = base_call(call, in);
    c.o = O;
    invoke(call, FLASHBENCH_PASS_FORWARD, offer_.forward, c, kept);
  }

  void backward(LayerCall& call, const LayerInputs& in, const void* O, const void* dO, KeptTensors& kept,
                const LayerGradients& gradients) override {
    flashbench_call c = base_call(call, in);
    c.o = const_cast<void*>(O);  // plugin.h: backward reads it
    c.d_o = dO;
    c.dq = gradients.dQ;
    c.dk = gradients.dK;
    c.dv = gradients.dV;
    invoke(call, FLASHBENCH_PASS_BACKWARD, offer_.backward, c, kept);
  }

 private:
  int64_t workspace(const Problem& problem, flashbench_pass pass) const {
    if (!offer_.workspace_bytes) return 0;
    const flashbench_problem p = problem_of(problem);
    return guarded(name(), "workspace_bytes", [&] { return offer_.workspace_bytes(&p, pass); });
  }

  static flashbench_call base_call(LayerCall& call, const LayerInputs& in) {
    flashbench_call c{};
    c.q = in.Q;
    c.k = in.K;
    c.v = in.V;
    c.gradient_dtype = dtype_of(call.device.gradient_dtype(call.problem));
    c.stream = call.device.native_stream();
    return c;
  }

  // The call with its kept tensors (the variant's statement, by name; O is the call's own) and a
  // workspace of the ledger; an error return or an exception is a RuntimeFailure naming it.
  void invoke(LayerCall& call, flashbench_pass pass, flashbench_layer_fn function, flashbench_call& c,
              KeptTensors& kept) {
    const Problem& problem = call.problem;
    std::vector<KeptTensor> statement = kept_per_layer(variant_, problem);
    std::erase_if(statement, [](const KeptTensor& tensor) { return tensor.name == "O"; });
    std::vector<std::string> names;  // NUL-terminated for C
    for (const KeptTensor& tensor : statement) names.emplace_back(tensor.name);
    std::vector<flashbench_tensor> tensors;
    for (size_t i = 0; i < statement.size(); ++i)
      tensors.push_back({names[i].c_str(), kept[statement[i].name], statement[i].bytes()});
    c.kept = tensors.data();
    c.kept_count = int32_t(tensors.size());
    const int64_t workspace_bytes = std::max<int64_t>(0, workspace(problem, pass));
    RawBuffer workspace;
    if (workspace_bytes > 0) workspace = RawBuffer(call.space, Tag::workspace, workspace_bytes);
    c.workspace = workspace.data();
    c.workspace_bytes = workspace_bytes;
    const flashbench_problem p = problem_of(problem);
    const std::string_view what = pass == FLASHBENCH_PASS_FORWARD ? "forward" : "backward";
    char error[512] = {};
    const int status = guarded(name(), what, [&] { return function(&p, &c, error, sizeof error); });
    if (status == 0) return;
    error[sizeof error - 1] = '\0';
    std::string reason(error);
    std::replace(reason.begin(), reason.end(), '\n', ' ');  // a row's reason is one line
    throw RuntimeFailure(fmt::format("plugin implementation {}: {} returned {}: {}", name(), what, status,
                                     reason.empty() ? "no reason given" : reason));
  }

  const flashbench_implementation& offer_;  // in the library, which is never closed
  Variant variant_;
  std::string summary_;
};

// A name --impl can take: letters, digits, '.', '_', '-' (a comma would split the list).
bool valid_name(std::string_view name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
  });
}

// The description's faults, before anything joins the registry: the first one, or nothing.
std::optional<std::string> description_fault(const flashbench_plugin_info& info) {
  if (info.implementation_count <= 0 || !info.implementations)
    return fmt::format("it offers no implementations (implementation_count {})", info.implementation_count);
  for (int32_t i = 0; i < info.implementation_count; ++i) {
    const flashbench_implementation& offer = info.implementations[i];
    const std::string label = offer.name ? fmt::format("implementation '{}'", offer.name) : fmt::format("implementation {}", i);
    if (!offer.name || !valid_name(offer.name))
      return fmt::format("{} has no usable name (letters, digits, '.', '_', '-')", label);
    if (offer.device != FLASHBENCH_DEVICE_CPU && offer.device != FLASHBENCH_DEVICE_CUDA)
      return fmt::format("{} names device {}, not FLASHBENCH_DEVICE_CPU or FLASHBENCH_DEVICE_CUDA", label, int(offer.device));
    if (offer.variant < FLASHBENCH_VARIANT_STANDARD || offer.variant > FLASHBENCH_VARIANT_CHECKPOINT)
      return fmt::format("{} names variant {}, not one of plugin.h's", label, int(offer.variant));
    if (!offer.forward || !offer.backward) return fmt::format("{} has no forward or no backward", label);
    for (int32_t j = 0; j < i; ++j)
      if (info.implementations[j].device == offer.device && std::string_view(info.implementations[j].name) == offer.name)
        return fmt::format("{} is offered twice", label);
    const DeviceEntry& device = registry().device(device_name(offer.device));
    for (Variant variant : kAllVariants)
      if (to_string(variant) == offer.name) return fmt::format("{} is a variant's name", label);
    for (const auto& existing : device.implementations())
      if (existing->name() == offer.name)
        return fmt::format("{}: {} already has an implementation of that name", label, device.name);
  }
  return std::nullopt;
}

// Every library loaded, by the path it was given: opened once, never closed.
std::map<std::string, PluginDescription>& loaded() {
  static std::map<std::string, PluginDescription> plugins;
  return plugins;
}

}  // namespace

PluginDescription load_plugin(const std::string& path) {
  if (auto found = loaded().find(path); found != loaded().end()) return found->second;
  const auto fail = [&path](const std::string& why) { return UsageError(fmt::format("plugin '{}': {}", path, why)); };
  if (path.empty()) throw UsageError("--plugin: an empty path");
  // A name without '/' would be searched on the library path; a plugin is a file the user names.
  const std::string file = path.find('/') == std::string::npos ? "./" + path : path;
  void* library = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    const char* why = dlerror();
    std::string reason = why ? why : "dlopen failed";
    std::replace(reason.begin(), reason.end(), '\n', ' ');
    throw fail(fmt::format("cannot load it: {}", reason));
  }
  // From here on a refused library is closed again: nothing of it has joined the registry.
  struct Closer {
    void* library;
    bool keep = false;
    ~Closer() {
      if (!keep) dlclose(library);
    }
  } closer{library};
  void* symbol = dlsym(library, FLASHBENCH_PLUGIN_ENTRY_POINT);
  if (!symbol)
    throw fail(fmt::format("no entry point {}() (a flashbench plugin defines it: see plugin.h)", FLASHBENCH_PLUGIN_ENTRY_POINT));
  const auto entry = reinterpret_cast<flashbench_plugin_fn>(symbol);
  const flashbench_plugin_info* info = nullptr;
  try {
    info = entry();
  } catch (...) {
    throw fail(fmt::format("{}() threw", FLASHBENCH_PLUGIN_ENTRY_POINT));
  }
  if (!info) throw fail(fmt::format("{}() returned NULL", FLASHBENCH_PLUGIN_ENTRY_POINT));
  if (info->abi_version != FLASHBENCH_PLUGIN_ABI_VERSION)
    throw fail(fmt::format("built against plugin ABI version {}, this flashbench loads version {} (rebuild it "
                           "against this flashbench's plugin.h)",
                           info->abi_version, FLASHBENCH_PLUGIN_ABI_VERSION));
  if (const std::optional<std::string> fault = description_fault(*info)) throw fail(*fault);

  PluginDescription description{path, info->name ? info->name : path, info->abi_version, {}};
  for (int32_t i = 0; i < info->implementation_count; ++i) {
    const flashbench_implementation& offer = info->implementations[i];
    const std::string summary = fmt::format("{} (plugin {}, {})", offer.summary ? offer.summary : "", description.name, path);
    extensible_registry().add_implementation(device_name(offer.device), [&offer, summary] {
      return std::make_unique<PluginImplementation>(offer, summary);
    });
    description.implementations.push_back(
        {offer.name, std::string(device_name(offer.device)), variant_of(offer.variant), offer.summary ? offer.summary : ""});
  }
  closer.keep = true;
  loaded().emplace(path, description);
  return description;
}

std::vector<PluginDescription> load_plugins(const std::vector<std::string>& paths) {
  std::vector<std::string> all;
  if (const char* listed = std::getenv("FLASHBENCH_PLUGINS")) {
    std::string_view rest = listed;
    while (!rest.empty()) {
      const size_t colon = rest.find(':');
      if (std::string_view item = rest.substr(0, colon); !item.empty()) all.emplace_back(item);
      rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
    }
  }
  all.insert(all.end(), paths.begin(), paths.end());
  std::vector<PluginDescription> descriptions;
  for (const std::string& path : all) descriptions.push_back(load_plugin(path));
  return descriptions;
}

}  // namespace flashbench
