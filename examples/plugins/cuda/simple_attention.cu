// flashbench plugin: a simple CUDA attention, "simple.cuda", of variant v2's statement (the layer
// stack keeps O and LSE [B,H,N] between forward and backward). One thread per query row; fp32,
// bf16 or fp16 storage, arithmetic in fp32 throughout; every kernel queued on the stream
// flashbench gives. A correct starting point for your own kernel, not a fast one.
//   Q, O, dO, dQ [B,H,N,d]; K, V, dK, dV [B,G,N_k,d]; query head h reads K/V head h / (H/G).
//
// The fp32 accumulators (O in forward; dQ, dK, dV in backward) live in the workspace the plugin
// declares (simple_workspace_bytes): flashbench allocates it, tags it and counts it in its model,
// so every byte this plugin touches is in the ledger. The results are rounded to the storage dtype
// once, at the end (on CUDA the gradients have the storage dtype).
#include <flashbench/plugin.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
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

// Elements of the query-side tensors [B,H,N,d] and of the key/value side [B,G,N_k,d].
int64_t query_elements(const Shape& s) { return s.heads_total * s.N * s.d; }
int64_t key_elements(const Shape& s) { return s.heads_total / s.heads * s.kv_heads * s.Nk * s.d; }

// The storage types, read and written through fp32.
__device__ float to_float(float x) { return x; }
__device__ float to_float(__half x) { return __half2float(x); }
__device__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ T from_float(float x);
template <> __device__ float from_float<float>(float x) { return x; }
template <> __device__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

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

template <typename X, typename Y> __device__ float dot(const X* x, const Y* y, int64_t d) {
  float sum = 0.0f;
  for (int64_t c = 0; c < d; ++c) sum += to_float(x[c]) * to_float(y[c]);
  return sum;
}

// One query row per thread: the online softmax, O accumulated in fp32 in the workspace row `acc`
// [d], then rounded into O.
template <typename T>
__global__ void forward_rows(Shape s, const T* Q, const T* K, const T* V, T* O, float* LSE, float* workspace) {
  const int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= s.heads_total * s.N) return;
  const int64_t bh = row / s.N, i = row % s.N, kv = kv_head_of(s, bh);
  const T* q = Q + row * s.d;
  const T* k = K + kv * s.Nk * s.d;
  const T* v = V + kv * s.Nk * s.d;
  float* acc = workspace + row * s.d;
  for (int64_t c = 0; c < s.d; ++c) acc[c] = 0.0f;
  float max = -INFINITY, sum = 0.0f;
  const int64_t visible = visible_keys(s, i);
  for (int64_t j = 0; j < visible; ++j) {
    const float score = s.scale * dot(q, k + j * s.d, s.d);
    const float new_max = fmaxf(max, score);
    const float rescale = expf(max - new_max), weight = expf(score - new_max);  // expf(-inf) = 0 at first
    sum = sum * rescale + weight;
    for (int64_t c = 0; c < s.d; ++c) acc[c] = acc[c] * rescale + weight * to_float(v[j * s.d + c]);
    max = new_max;
  }
  T* o = O + row * s.d;
  for (int64_t c = 0; c < s.d; ++c) o[c] = from_float<T>(visible > 0 ? acc[c] / sum : 0.0f);
  LSE[row] = visible > 0 ? max + logf(sum) : INFINITY;  // a row that sees nothing: O = 0, P = 0
}

// One query row per thread: dQ of its row, and dK, dV summed over rows (and a group's heads) with
// atomics, all in the fp32 accumulators dQ_acc, dK_acc, dV_acc (zeroed before).
//   forward: o = sum_j P_j v_j, P = softmax(s), s_j = scale q.k_j; so now:
//   dv_j += P_j do; dP_j = do.v_j; dS_j = P_j (dP_j - D), D = do.o; dq = scale sum_j dS_j k_j;
//   dk_j += scale dS_j q.
template <typename T>
__global__ void backward_rows(Shape s, const T* Q, const T* K, const T* V, const T* O, const T* dO,
                              const float* LSE, float* dQ_acc, float* dK_acc, float* dV_acc) {
  const int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= s.heads_total * s.N) return;
  const int64_t bh = row / s.N, i = row % s.N, kv = kv_head_of(s, bh);
  const T* q = Q + row * s.d;
  const T* do_ = dO + row * s.d;
  const T* k = K + kv * s.Nk * s.d;
  const T* v = V + kv * s.Nk * s.d;
  float* dq = dQ_acc + row * s.d;
  float* dk = dK_acc + kv * s.Nk * s.d;
  float* dv = dV_acc + kv * s.Nk * s.d;
  const float D = dot(do_, O + row * s.d, s.d);
  for (int64_t j = 0; j < visible_keys(s, i); ++j) {
    const float P = expf(s.scale * dot(q, k + j * s.d, s.d) - LSE[row]);
    const float dS = P * (dot(do_, v + j * s.d, s.d) - D);
    for (int64_t c = 0; c < s.d; ++c) {
      dq[c] += s.scale * dS * to_float(k[j * s.d + c]);
      atomicAdd(dk + j * s.d + c, s.scale * dS * to_float(q[c]));
      atomicAdd(dv + j * s.d + c, P * to_float(do_[c]));
    }
  }
}

// An fp32 accumulator rounded into a gradient of the storage dtype: out[e] = acc[e], e < count.
template <typename T> __global__ void round_into(const float* acc, T* out, int64_t count) {
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < count; e += int64_t(gridDim.x) * blockDim.x)
    out[e] = from_float<T>(acc[e]);
}

constexpr int kThreads = 128;

unsigned blocks_for(int64_t threads) { return unsigned((threads + kThreads - 1) / kThreads); }
unsigned grid_stride_blocks(int64_t count) { return blocks_for(count < 1 << 22 ? count : 1 << 22); }

float* kept_lse(const flashbench_call* call) {
  for (int32_t i = 0; i < call->kept_count; ++i)
    if (strcmp(call->kept[i].name, "LSE") == 0) return static_cast<float*>(call->kept[i].data);
  return nullptr;
}

// The last error on this thread, if any, as the call's answer (a failed row with CUDA's reason).
int launched(char* error, size_t size) {
  const cudaError_t status = cudaGetLastError();
  if (status == cudaSuccess) return 0;
  snprintf(error, size, "CUDA: %s", cudaGetErrorString(status));
  return 1;
}

const char* simple_supports(const flashbench_problem*) { return nullptr; }  // every shape, every dtype

// Forward: an fp32 O [B,H,N,d]; backward: fp32 dQ [B,H,N,d], dK and dV [B,G,N_k,d], one after another.
int64_t simple_workspace_bytes(const flashbench_problem* p, flashbench_pass pass) {
  const Shape s = shape_of(p);
  const int64_t floats = pass == FLASHBENCH_PASS_FORWARD ? query_elements(s) : query_elements(s) + 2 * key_elements(s);
  return floats * int64_t(sizeof(float));
}

template <typename T> void launch_forward(const Shape& s, const flashbench_call* call, float* lse, cudaStream_t stream) {
  forward_rows<T><<<blocks_for(s.heads_total * s.N), kThreads, 0, stream>>>(
      s, static_cast<const T*>(call->q), static_cast<const T*>(call->k), static_cast<const T*>(call->v),
      static_cast<T*>(call->o), lse, static_cast<float*>(call->workspace));
}

template <typename T>
void launch_backward(const Shape& s, const flashbench_call* call, const float* lse, cudaStream_t stream) {
  float* dq_acc = static_cast<float*>(call->workspace);
  float* dk_acc = dq_acc + query_elements(s);
  float* dv_acc = dk_acc + key_elements(s);
  if (cudaMemsetAsync(dq_acc, 0, size_t(call->workspace_bytes), stream) != cudaSuccess) return;
  backward_rows<T><<<blocks_for(s.heads_total * s.N), kThreads, 0, stream>>>(
      s, static_cast<const T*>(call->q), static_cast<const T*>(call->k), static_cast<const T*>(call->v),
      static_cast<const T*>(call->o), static_cast<const T*>(call->d_o), lse, dq_acc, dk_acc, dv_acc);
  round_into<T><<<grid_stride_blocks(query_elements(s)), kThreads, 0, stream>>>(dq_acc, static_cast<T*>(call->dq),
                                                                               query_elements(s));
  round_into<T><<<grid_stride_blocks(key_elements(s)), kThreads, 0, stream>>>(dk_acc, static_cast<T*>(call->dk),
                                                                             key_elements(s));
  round_into<T><<<grid_stride_blocks(key_elements(s)), kThreads, 0, stream>>>(dv_acc, static_cast<T*>(call->dv),
                                                                             key_elements(s));
}

int simple_forward(const flashbench_problem* p, const flashbench_call* call, char* error, size_t size) {
  float* lse = kept_lse(call);
  if (!lse) return snprintf(error, size, "no LSE among the kept tensors"), 1;
  const Shape s = shape_of(p);
  const cudaStream_t stream = static_cast<cudaStream_t>(call->stream);
  switch (p->dtype) {
    case FLASHBENCH_DTYPE_FP32: launch_forward<float>(s, call, lse, stream); break;
    case FLASHBENCH_DTYPE_BF16: launch_forward<__nv_bfloat16>(s, call, lse, stream); break;
    case FLASHBENCH_DTYPE_FP16: launch_forward<__half>(s, call, lse, stream); break;
  }
  return launched(error, size);
}

int simple_backward(const flashbench_problem* p, const flashbench_call* call, char* error, size_t size) {
  const float* lse = kept_lse(call);
  if (!lse) return snprintf(error, size, "no LSE among the kept tensors"), 1;
  if (call->gradient_dtype != p->dtype)  // flashbench's CUDA layers give gradients the storage dtype
    return snprintf(error, size, "gradients of another dtype than the storage's"), 1;
  const Shape s = shape_of(p);
  const cudaStream_t stream = static_cast<cudaStream_t>(call->stream);
  switch (p->dtype) {
    case FLASHBENCH_DTYPE_FP32: launch_backward<float>(s, call, lse, stream); break;
    case FLASHBENCH_DTYPE_BF16: launch_backward<__nv_bfloat16>(s, call, lse, stream); break;
    case FLASHBENCH_DTYPE_FP16: launch_backward<__half>(s, call, lse, stream); break;
  }
  return launched(error, size);
}

const flashbench_implementation implementations[] = {
    {"simple.cuda", "one thread per query row, fp32 arithmetic, any storage dtype; v2's kept O and LSE",
     FLASHBENCH_DEVICE_CUDA, FLASHBENCH_VARIANT_V2, simple_supports, simple_workspace_bytes, simple_forward,
     simple_backward},
};

}  // namespace

extern "C" const flashbench_plugin_info* flashbench_plugin(void) {
  static const flashbench_plugin_info info = {FLASHBENCH_PLUGIN_ABI_VERSION, "simple-cuda", 1, implementations};
  return &info;
}
