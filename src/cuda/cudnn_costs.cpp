// What `--impl cudnn` allocates per layer call (cudnn_attention.hpp), in every build: the model and
// the pre-flight read it, with or without a GPU.
#include "cudnn_attention.hpp"

namespace flashbench::cuda {

// With r the bytes of one [B,H,N] fp32 vector and a
// of one [B,H,N,d] fp32 tensor, what cudnn_attention.cpp allocates inside one layer call:
//   forward   w_f                 cuDNN's workspace of the forward plan
//   backward  r + a + w_b         the row dot D and the dQ accumulator the graph writes, and cuDNN's
//                                 workspace of the backward plan (dQ, dK, dV are the stack's)
// w_f and w_b are cuDNN's to say, for this problem on this GPU, once it has built the plans: a run
// builds them in its pre-flight (unsupported), before this is asked, so its model holds them; where
// they are not built (`model`, `fit`, a machine without a GPU or without cuDNN) they count as 0
// and the model is short by exactly them.
LayerCosts CudnnAttention::costs(const Problem& problem, const ModelParams&) const {
  const int64_t r = problem.row_elements() * int64_t{4};
  const int64_t a = problem.q_elements() * int64_t{4};
  const PlanWorkspace w = plan_workspace(problem).value_or(PlanWorkspace{});
  return {.forward_workspace_bytes = w.forward_bytes,
          .backward_workspace_bytes = r + a + w.backward_bytes};
}

std::string_view CudnnAttention::summary() const {
  return "cudnn: cuDNN 9's fused flash attention (graph API, loaded at run time), O and LSE kept as v2";
}

}  // namespace flashbench::cuda
