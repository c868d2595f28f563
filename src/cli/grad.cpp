// flashbench grad: one attention layer's forward and backward on arrays from .npy files, so anyone
// can check the kernels against NumPy or PyTorch.
#include <omp.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/commands.hpp"
#include "flashbench/cpu/kept.hpp"
#include "flashbench/harness/stack.hpp"
#include "flashbench/errors.hpp"
#include "flashbench/npy.hpp"
#include "flashbench/report.hpp"

namespace flashbench::cli {

namespace {

struct GradOptions {
  std::string variant = "v2";
  bool causal = false;
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
  NpyArray array = read_npy(path);
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
  const NpyArray Q = read_operand(options.q, "--q"), K = read_operand(options.k, "--k"),
                 V = read_operand(options.v, "--v"), dO = read_operand(options.dO, "--do");
  for (const auto& [array, flag] : {std::pair{&K, "--k"}, std::pair{&V, "--v"}, std::pair{&dO, "--do"}})
    if (array->shape != Q.shape)
      throw UsageError(fmt::format("{} has shape [{}] but --q has [{}]", flag, fmt::join(array->shape, ", "),
                                   fmt::join(Q.shape, ", ")));
  Problem problem;
  problem.batch = Q.shape[0];
  problem.heads = Q.shape[1];
  problem.seq = Q.shape[2];
  problem.head_dim = Q.shape[3];
  problem.causal = options.causal;
  validate(problem);
  if (options.threads > 0) omp_set_num_threads(options.threads);

  // Separate Q, K and V: the CPU kernels themselves, not the self-attention layer stack.
  MemoryLedger ledger;
  HostSpace space(ledger);
  const cpu::LayerShape shape = cpu::LayerShape::of(problem);
  const size_t count = Q.data.size();
  std::vector<float> O(count), dQ(count), dK(count), dV(count);
  const KeptTensors kept = allocate_kept(variant, problem, space);
  const cpu::KeptView view = cpu::kept_view(variant, problem, kept);
  cpu::forward(variant, shape, cpu::Tiling{}, Q.data.data(), K.data.data(), V.data.data(), O.data(), view, space);
  cpu::backward(variant, shape, cpu::Tiling{}, Q.data.data(), K.data.data(), V.data.data(), O.data(),
                dO.data.data(), view, dQ.data(), dK.data(), dV.data(), space);

  std::error_code error;
  std::filesystem::create_directories(options.out, error);
  if (error) throw RuntimeFailure(fmt::format("cannot create '{}': {}", options.out, error.message()));
  for (const auto& [name, data] : {std::pair{"o.npy", &O}, std::pair{"dq.npy", &dQ}, std::pair{"dk.npy", &dK},
                                   std::pair{"dv.npy", &dV}})
    write_file_atomically((std::filesystem::path(options.out) / name).string(), encode_npy(Q.shape, *data));
  return 0;
}

}  // namespace

void register_grad(CLI::App& app) {
  auto options = std::make_shared<GradOptions>();
  CLI::App* sub = app.add_subcommand(
      "grad", "One layer's O, dQ, dK, dV from Q, K, V, dO in .npy files ([B,H,N,d], float32 or float64)");
  sub->add_option("--variant", options->variant, "standard, v1, v2 or checkpoint")->capture_default_str();
  sub->add_flag("--causal", options->causal, "Apply the causal mask");
  sub->add_option("--q", options->q, "Q.npy [B,H,N,d]")->required();
  sub->add_option("--k", options->k, "K.npy [B,H,N,d]")->required();
  sub->add_option("--v", options->v, "V.npy [B,H,N,d]")->required();
  sub->add_option("--do", options->dO, "dO.npy [B,H,N,d], the gradient of the loss with respect to O")->required();
  sub->add_option("--out", options->out, "Directory for o.npy, dq.npy, dk.npy, dv.npy (float32)")->required();
  sub->add_option("--threads", options->threads, "OpenMP threads (default: all cores)");
  set_action(sub, [options](const std::vector<std::string>&) { return run_grad(*options); });
}

}  // namespace flashbench::cli
