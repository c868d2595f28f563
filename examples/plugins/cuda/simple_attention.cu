// flashbench plugin: a simple CUDA attention, "simple.cuda", of variant v2's statement (the layer
// stack keeps O and LSE [B,H,N] between forward and backward). One thread per query row, fp32
// storage; every kernel queued on the stream flashbench gives. A correct starting point for your
// own kernel, not a fast one.
//   Q, O, dO, dQ [B,H,N,d]; K, V, dK, dV [B,G,N_k,d]; query head h reads K/V head h / (H/G).
#include <flashbench/plugin.h>

#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

namespace {

struct Shape {
  int64_t heads_total, heads, kv_heads, N, Nk, d;
  int causal;
  float scale;
};

Shape shape_of(const flashbench_problem* p) {
  return {p->batch * p->heads, p->heads, p->kv_heads, p->seq_q, p->seq_kv, p->head_dim, p->causal, p->scale};
}

// Keys row i sees: all N_k, or under the bottom-right causal mask j <= i + N_k - N.
__device__ int64_t visible_keys(const Shape& s, int64_t i) {
  if (!s.causal) return s.Nk;
  const int64_t visible = i + s.Nk - s.N + 1;
  return visible < 0 ? 0 : (visible > s.Nk ? s.Nk : visible);
}

// The flattened K/V head [b, h / r] that flattened query head bh reads.
__device__ int64_t kv_head_of(const Shape& s, int64_t bh) {
  return bh / s.heads * s.kv_heads + bh % s.heads / (s.heads / s.kv_heads);
}

__device__ float dot(const float* x, const float* y, int64_t d) {
  float sum = 0.0f;
  for (int64_t c = 0; c < d; ++c) sum += x[c] * y[c];
  return sum;
}

// One query row per thread: the online softmax, O accumulated in place.
__global__ void forward_rows(Shape s, const float* Q, const float* K, const float* V, float* O, float* LSE) {
  const int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= s.heads_total * s.N) return;
  const int64_t bh = row / s.N, i = row % s.N, kv = kv_head_of(s, bh);
  const float* q = Q + row * s.d;
  const float* k = K + kv * s.Nk * s.d;
  const float* v = V + kv * s.Nk * s.d;
  float* o = O + row * s.d;
  for (int64_t c = 0; c < s.d; ++c) o[c] = 0.0f;
  float max = -INFINITY, sum = 0.0f;
  const int64_t visible = visible_keys(s, i);
  for (int64_t j = 0; j < visible; ++j) {
    const float score = s.scale * dot(q, k + j * s.d, s.d);
    const float new_max = fmaxf(max, score);
    const float rescale = expf(max - new_max), weight = expf(score - new_max);  // expf(-inf) = 0 at first
    sum = sum * rescale + weight;
    for (int64_t c = 0; c < s.d; ++c) o[c] = o[c] * rescale + weight * v[j * s.d + c];
    max = new_max;
  }
  for (int64_t c = 0; c < s.d && visible > 0; ++c) o[c] /= sum;
  LSE[row] = visible > 0 ? max + logf(sum) : INFINITY;  // a row that sees nothing: O = 0, P = 0
}

// One query row per thread: dQ of its row; dK and dV summed over rows (and a group's heads) with
// atomics into buffers zeroed before.
//   forward: o = sum_j P_j v_j, P = softmax(s), s_j = scale q.k_j; so now:
//   dv_j += P_j do; dP_j = do.v_j; dS_j = P_j (dP_j - D), D = do.o; dq = scale sum_j dS_j k_j;
//   dk_j += scale dS_j q.
__global__ void backward_rows(Shape s, const float* Q, const float* K, const float* V, const float* O,
                              const float* dO, const float* LSE, float* dQ, float* dK, float* dV) {
  const int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= s.heads_total * s.N) return;
  const int64_t bh = row / s.N, i = row % s.N, kv = kv_head_of(s, bh);
  const float* q = Q + row * s.d;
  const float* do_ = dO + row * s.d;
  const float* k = K + kv * s.Nk * s.d;
  const float* v = V + kv * s.Nk * s.d;
  float* dq = dQ + row * s.d;
  float* dk = dK + kv * s.Nk * s.d;
  float* dv = dV + kv * s.Nk * s.d;
  const float D = dot(do_, O + row * s.d, s.d);
  for (int64_t j = 0; j < visible_keys(s, i); ++j) {
    const float P = expf(s.scale * dot(q, k + j * s.d, s.d) - LSE[row]);
    const float dS = P * (dot(do_, v + j * s.d, s.d) - D);
    for (int64_t c = 0; c < s.d; ++c) {
      dq[c] += s.scale * dS * k[j * s.d + c];
      atomicAdd(dk + j * s.d + c, s.scale * dS * q[c]);
      atomicAdd(dv + j * s.d + c, P * do_[c]);
    }
  }
}

constexpr int kThreads = 128;

unsigned blocks_for(const Shape& s) { return unsigned((s.heads_total * s.N + kThreads - 1) / kThreads); }

float* kept_lse(const flashbench_call* call) {
  for (int32_t i = 0; i < call->kept_count; ++i)
    if (strcmp(call->kept[i].name, "LSE") == 0) return static_cast<float*>(call->kept[i].data);
  return nullptr;
}

// The launch's error, if any, as the call's answer (a failed row with CUDA's reason).
int launched(char* error, size_t size) {
  const cudaError_t status = cudaGetLastError();
  if (status == cudaSuccess) return 0;
  snprintf(error, size, "CUDA: %s", cudaGetErrorString(status));
  return 1;
}

const char* simple_supports(const flashbench_problem* p) {
  return p->dtype == FLASHBENCH_DTYPE_FP32 ? nullptr : "simple.cuda computes in fp32 storage only";
}

int simple_forward(const flashbench_problem* p, const flashbench_call* call, char* error, size_t size) {
  float* lse = kept_lse(call);
  if (!lse) return snprintf(error, size, "no LSE among the kept tensors"), 1;
  const Shape s = shape_of(p);
  const cudaStream_t stream = static_cast<cudaStream_t>(call->stream);
  forward_rows<<<blocks_for(s), kThreads, 0, stream>>>(s, static_cast<const float*>(call->q),
                                                        static_cast<const float*>(call->k),
                                                        static_cast<const float*>(call->v),
                                                        static_cast<float*>(call->o), lse);
  return launched(error, size);
}

int simple_backward(const flashbench_problem* p, const flashbench_call* call, char* error, size_t size) {
  const float* lse = kept_lse(call);
  if (!lse) return snprintf(error, size, "no LSE among the kept tensors"), 1;
  const Shape s = shape_of(p);
  const cudaStream_t stream = static_cast<cudaStream_t>(call->stream);
  // The gradients come uninitialised: zeroed here, then accumulated.
  const size_t q_bytes = size_t(s.heads_total * s.N * s.d) * sizeof(float);
  const size_t kv_bytes = size_t(s.heads_total / s.heads * s.kv_heads * s.Nk * s.d) * sizeof(float);
  if (cudaMemsetAsync(call->dq, 0, q_bytes, stream) != cudaSuccess ||
      cudaMemsetAsync(call->dk, 0, kv_bytes, stream) != cudaSuccess ||
      cudaMemsetAsync(call->dv, 0, kv_bytes, stream) != cudaSuccess)
    return launched(error, size);
  backward_rows<<<blocks_for(s), kThreads, 0, stream>>>(
      s, static_cast<const float*>(call->q), static_cast<const float*>(call->k), static_cast<const float*>(call->v),
      static_cast<const float*>(call->o), static_cast<const float*>(call->d_o), lse, static_cast<float*>(call->dq),
      static_cast<float*>(call->dk), static_cast<float*>(call->dv));
  return launched(error, size);
}

const flashbench_implementation implementations[] = {
    {"simple.cuda", "one thread per query row in fp32, v2's kept O and LSE", FLASHBENCH_DEVICE_CUDA,
     FLASHBENCH_VARIANT_V2, simple_supports, nullptr, simple_forward, simple_backward},
};

}  // namespace

extern "C" const flashbench_plugin_info* flashbench_plugin(void) {
  static const flashbench_plugin_info info = {FLASHBENCH_PLUGIN_ABI_VERSION, "simple-cuda", 1, implementations};
  return &info;
}
