/* flashbench plugin that goes wrong on purpose, one way per implementation, for flashbench's own
 * tests of how it reports a plugin that fails: each must give a failed row (or a warning) while
 * the sweep goes on, never a crash of the sweep. Built on the CPU example's naive attention.
 *   broken.wrong    dK doubled: the float64 check fails, naming dK
 *   broken.error    forward returns an error with a reason
 *   broken.hidden   correct numbers, but forward takes 256 MiB with malloc, around the ledger
 *   broken.overrun  backward writes one float past the end of dQ (the sanitizer build must catch it) */
#include <flashbench/plugin.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../cpu/naive_attention.h"

static const char* fp32_only(const flashbench_problem* p) {
  return p->dtype == FLASHBENCH_DTYPE_FP32 ? NULL : "fp32 only";
}

static int64_t workspace(const flashbench_problem* p, flashbench_pass pass) {
  return (pass == FLASHBENCH_PASS_FORWARD ? 1 : 2) * p->seq_kv * (int64_t)sizeof(float);
}

static float* kept_lse(const flashbench_call* call) {
  for (int32_t i = 0; i < call->kept_count; ++i)
    if (strcmp(call->kept[i].name, "LSE") == 0) return (float*)call->kept[i].data;
  return NULL;
}

static int64_t q_elements(const flashbench_problem* p) { return p->batch * p->heads * p->seq_q * p->head_dim; }
static int64_t kv_elements(const flashbench_problem* p) { return p->batch * p->kv_heads * p->seq_kv * p->head_dim; }

static int forward(const flashbench_problem* p, const flashbench_call* call, char* error, size_t size) {
  (void)error, (void)size;
  naive_forward(p, call->q, call->k, call->v, call->o, kept_lse(call), call->workspace);
  return 0;
}

static void correct_backward(const flashbench_problem* p, const flashbench_call* call) {
  naive_backward(p, call->q, call->k, call->v, call->o, call->d_o, kept_lse(call), call->dq, call->dk, call->dv,
                 call->workspace);
}

static int wrong_backward(const flashbench_problem* p, const flashbench_call* call, char* error, size_t size) {
  (void)error, (void)size;
  correct_backward(p, call);
  float* dk = call->dk;
  for (int64_t e = 0; e < kv_elements(p); ++e) dk[e] *= 2.0f;
  return 0;
}

static int failing_forward(const flashbench_problem* p, const flashbench_call* call, char* error, size_t size) {
  (void)p, (void)call;
  snprintf(error, size, "broken.error refuses every call (a test of failed rows)");
  return 7;
}

static int plain_backward(const flashbench_problem* p, const flashbench_call* call, char* error, size_t size) {
  (void)error, (void)size;
  correct_backward(p, call);
  return 0;
}

/* 256 MiB the ledger never hears of, touched so that the pages become resident. [bytes] */
#define HIDDEN_BYTES ((size_t)256 << 20)

static int hidden_forward(const flashbench_problem* p, const flashbench_call* call, char* error, size_t size) {
  char* hidden = malloc(HIDDEN_BYTES);
  if (!hidden) return snprintf(error, size, "malloc refused %zu bytes", HIDDEN_BYTES), 1;
  memset(hidden, 1, HIDDEN_BYTES);
  const int status = forward(p, call, error, size);
  ((float*)call->o)[0] += (float)hidden[HIDDEN_BYTES - 1] - 1.0f; /* read, so the buffer is not optimised away */
  free(hidden);
  return status;
}

static int overrun_backward(const flashbench_problem* p, const flashbench_call* call, char* error, size_t size) {
  (void)error, (void)size;
  correct_backward(p, call);
  ((float*)call->dq)[q_elements(p)] = 0.0f; /* one past the end */
  return 0;
}

static const flashbench_implementation implementations[] = {
    {"broken.wrong", "dK doubled", FLASHBENCH_DEVICE_CPU, FLASHBENCH_VARIANT_V2, fp32_only, workspace, forward,
     wrong_backward},
    {"broken.error", "forward returns an error", FLASHBENCH_DEVICE_CPU, FLASHBENCH_VARIANT_V2, fp32_only, workspace,
     failing_forward, plain_backward},
    {"broken.hidden", "256 MiB allocated around the ledger", FLASHBENCH_DEVICE_CPU, FLASHBENCH_VARIANT_V2, fp32_only,
     workspace, hidden_forward, plain_backward},
    {"broken.overrun", "writes one float past dQ", FLASHBENCH_DEVICE_CPU, FLASHBENCH_VARIANT_V2, fp32_only, workspace,
     forward, overrun_backward},
};

const flashbench_plugin_info* flashbench_plugin(void) {
  static const flashbench_plugin_info info = {FLASHBENCH_PLUGIN_ABI_VERSION, "broken", 4, implementations};
  return &info;
}
