// flashbench grad: one attention layer's forward and backward on arrays from .npy files, so anyone
// can check the kernels against NumPy or PyTorch: the device's implementation runs one layer of the
// stack the benchmark measures, on the given Q, K, V and dO, in the storage dtype asked for, through
// the harness's untimed pass, and writes O, dQ, dK and dV.
#include <cmath>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commands.hpp"
#include "flashbench/core/errors.hpp"
#include "flashbench/core/npy.hpp"
#include "flashbench/core/variant.hpp"
#include "flashbench/harness/registry.hpp"
#include "flashbench/harness/runner.hpp"
#include "flashbench/harness/stack.hpp"
#include "flashbench/report/files.hpp"

namespace flashbench::cli {

namespace {

struct GradOptions {
  std::string backend = "cpu";
  std::string dtype = "fp32";
  std::string impl;  // an implementation by name (cudnn, a kernel revision); empty: the variant's default
  std::string variant = "v2";
  bool variant_given = false;  // --variant on the command line (else --impl's own variant counts)
  bool causal = false;
  double dropout = 0;
  uint64_t seed = 0;
  std::string q, k, v, dO, out;
  int threads = 0;
};

// The index of flat element `flat` in an array of `shape`, row-major.
std::vector<int64_t> unravel(const std::vector<int64_t>& shape, int64_t flat) {
  std::vector<int64_t> index(shape.size());
  for (size_t axis = shape.size(); axis-- > 0;) {
    index[axis] = flat % shape[axis];
    flat /= shape[axis];
  }
  return index;
}

NpyArray read_operand(const std::string& path, const std::string& flag) {
  NpyArray array = read_npy(path, flag);
  if (array.shape.size() != 4)
    throw UsageError(fmt::format("{} '{}' has {} axes; expected 4: [B, H, N, d]", flag, path, array.shape.size()));
  for (int64_t extent : array.shape)
    if (extent < 1) throw UsageError(fmt::format("{} '{}' has an empty axis", flag, path));
  // A NaN or Inf would flow through every gradient silently: name the first one instead.
  for (size_t i = 0; i < array.data.size(); ++i)
    if (!std::isfinite(array.data[i]))
      throw RuntimeFailure(fmt::format("{} '{}' holds {} at [{}]", flag, path, array.data[i],
                                       fmt::join(unravel(array.shape, int64_t(i)), ", ")));
  return array;
}

int run_grad(const GradOptions& options) {
  const Variant variant = parse_variant(options.variant);
  const Dtype dtype = parse_dtype(options.dtype);
  const DeviceEntry& entry = registry().device(options.backend);
  const std::string name = options.impl.empty() ? std::string(to_string(variant)) : options.impl;
  std::unique_ptr<Implementation> implementation = std::move(select_implementations(entry, {name}).front());
  if (options.variant_given && implementation->variant() != variant)
    throw UsageError(fmt::format("--impl {} is variant {}, not --variant {}", options.impl,
                                 to_string(implementation->variant()), options.variant));
  const NpyArray Q = read_operand(options.q, "--q"), K = read_operand(options.k, "--k"),
                 V = read_operand(options.v, "--v"), dO = read_operand(options.dO, "--do");
  // Q and dO [B,H,N,d]; K and V [B,G,N_k,d] with G dividing H (GQA, MQA) and any N_k.
  if (dO.shape != Q.shape)
    throw UsageError(fmt::format("--do has shape [{}] but --q has [{}]", fmt::join(dO.shape, ", "), fmt::join(Q.shape, ", ")));
  if (V.shape != K.shape)
    throw UsageError(fmt::format("--v has shape [{}] but --k has [{}]", fmt::join(V.shape, ", "), fmt::join(K.shape, ", ")));
  if (K.shape[0] != Q.shape[0] || K.shape[3] != Q.shape[3])
    throw UsageError(fmt::format("--k has shape [{}]: its batch and head dim must be --q's [{}]",
                                 fmt::join(K.shape, ", "), fmt::join(Q.shape, ", ")));
  if (Q.shape[1] % K.shape[1] != 0)
    throw UsageError(fmt::format("--k has {} heads, which does not divide --q's {} (each K/V head serves H/G query heads)",
                                 K.shape[1], Q.shape[1]));
  Problem problem;
  problem.batch = Q.shape[0];
  problem.heads = Q.shape[1];
  problem.kv_heads = K.shape[1];
  problem.seq = Q.shape[2];
  problem.seq_kv = K.shape[2];
  problem.head_dim = Q.shape[3];
  problem.layers = 1;
  problem.causal = options.causal;
  problem.dropout = options.dropout;
  problem.dtype = dtype;
  validate(problem);
  std::unique_ptr<Device> device = entry.open(DeviceOptions{.threads = options.threads});
  // The stack's dropout mask is keyed by the run's seed and the layer (0 here): --seed is that seed.
  RunOptions run;
  run.seed = options.seed;
  const Runner::Pass pass =
      Runner(*device, run).run_once(problem, *implementation, {Q.data, K.data, V.data, dO.data});

  std::error_code error;
  std::filesystem::create_directories(options.out, error);
  if (error) throw RuntimeFailure(fmt::format("cannot create '{}': {}", options.out, error.message()));
  for (const auto& [file, data, shape] : {std::tuple{"o.npy", &pass.O, &Q.shape}, std::tuple{"dq.npy", &pass.dQ, &Q.shape},
                                          std::tuple{"dk.npy", &pass.dK, &K.shape}, std::tuple{"dv.npy", &pass.dV, &K.shape}})
    write_file_atomically((std::filesystem::path(options.out) / file).string(), encode_npy(*shape, *data));
  return 0;
}

}  // namespace

void register_grad(CLI::App& app) {
  auto options = std::make_shared<GradOptions>();
  CLI::App* sub = app.add_subcommand(
      "grad", "One layer's O and gradients from Q, K, V, dO in .npy files (Q, dO [B,H,N,d]; K, V [B,G,N_k,d] with G "
              "dividing H; float32 or float64): o.npy, dq.npy, dk.npy, dv.npy");
  sub->add_option("--backend", options->backend, registry().device_names() + ": whose implementation runs the layer")
      ->capture_default_str();
  sub->add_option("--dtype", options->dtype, "Storage dtype: fp32, bf16 or fp16 (inputs are rounded to it)")
      ->capture_default_str();
  sub->add_option("--impl", options->impl, "An implementation by name (v2.split, cudnn; `flashbench info` lists them)");
  sub->add_option("--variant", options->variant, variant_names(" or "))->capture_default_str();
  sub->add_flag("--causal", options->causal,
                "Apply the causal mask, bottom-right aligned: row i sees keys j <= i + N_k - N (a row that sees none gives 0)");
  sub->add_option("--dropout", options->dropout, "Dropout probability p on the attention weights (Philox 4x32-10 mask)")
      ->capture_default_str();
  add_seed_option(sub, options->seed, "Seed of the dropout mask (element (h*N + i)*N_k + j of the [B*H, N, N_k] "
                                      "weights, offset 0)");
  sub->add_option("--q", options->q, "Q.npy [B,H,N,d]")->required();
  sub->add_option("--k", options->k, "K.npy [B,G,N_k,d]")->required();
  sub->add_option("--v", options->v, "V.npy [B,G,N_k,d], K's shape")->required();
  sub->add_option("--do", options->dO, "dO.npy [B,H,N,d], the gradient of the loss with respect to O")->required();
  sub->add_option("--out", options->out,
                  "Directory for o.npy, dq.npy (Q's shape), dk.npy, dv.npy (K's shape); float32")
      ->required();
  sub->add_option("--threads", options->threads, "OpenMP threads (default: all cores; a count past the hardware threads is held to them, with a warning)");
  add_isa_option(sub);
  set_action(sub, [options, sub](const std::vector<std::string>&) {
    options->variant_given = sub->count("--variant") > 0;
    return run_grad(*options);
  });
}

}  // namespace flashbench::cli
