/* flashbench plugin: naive_attention.c as one implementation, "naive.c", of variant v2's statement
 * (the layer stack keeps O and LSE [B,H,N] between forward and backward). */
#include <flashbench/plugin.h>

#include <stdio.h>
#include <string.h>

#include "naive_attention.h"

static const char* naive_supports(const flashbench_problem* p) {
  return p->dtype == FLASHBENCH_DTYPE_FP32 ? NULL : "naive.c computes in fp32 storage only";
}

/* One score row in forward; a row of P and one of dP in backward. [bytes] */
static int64_t naive_workspace(const flashbench_problem* p, flashbench_pass pass) {
  return (pass == FLASHBENCH_PASS_FORWARD ? 1 : 2) * p->seq_kv * (int64_t)sizeof(float);
}

/* The LSE the stack allocated for this layer, by its name in v2's statement. */
static float* find_lse(const flashbench_call* call) {
  for (int32_t i = 0; i < call->kept_count; ++i)
    if (strcmp(call->kept[i].name, "LSE") == 0) return (float*)call->kept[i].data;
  return NULL;
}

static int naive_forward_call(const flashbench_problem* p, const flashbench_call* call, char* error, size_t size) {
  float* lse = find_lse(call);
  if (!lse) return snprintf(error, size, "no LSE among the kept tensors"), 1;
  naive_forward(p, call->q, call->k, call->v, call->o, lse, call->workspace);
  return 0;
}

static int naive_backward_call(const flashbench_problem* p, const flashbench_call* call, char* error, size_t size) {
  const float* lse = find_lse(call);
  if (!lse) return snprintf(error, size, "no LSE among the kept tensors"), 1;
  if (call->gradient_dtype != FLASHBENCH_DTYPE_FP32) return snprintf(error, size, "gradients not in fp32"), 1;
  naive_backward(p, call->q, call->k, call->v, call->o, call->d_o, lse, call->dq, call->dk, call->dv, call->workspace);
  return 0;
}

static const flashbench_implementation implementations[] = {
    {"naive.c", "plain fp32 attention in C, one thread, v2's kept O and LSE", FLASHBENCH_DEVICE_CPU,
     FLASHBENCH_VARIANT_V2, naive_supports, naive_workspace, naive_forward_call, naive_backward_call},
};

const flashbench_plugin_info* flashbench_plugin(void) {
  static const flashbench_plugin_info info = {FLASHBENCH_PLUGIN_ABI_VERSION, "naive-cpu", 1, implementations};
  return &info;
}
