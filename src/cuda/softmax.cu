// Row kernels of the materialising variants (standard, v1, checkpoint) over an [BH, N, N_k] matrix.
// Rows whose length is a multiple of 16 bytes are read and written in 16-byte chunks. softmax's
// forward holds such rows in registers (a warp a row up to 2K elements in 16 bits, a block a row up
// to 16K, a 1024-thread block up to 32K; half those in fp32), so each element is read once and its
// exponential taken once; longer or unaligned rows take one block a row and are read twice
// (statistics, then the elementwise pass; the second read mostly from L2). softmax's backward keeps
// rows up to 16K (16 bits) in shared memory.
#include <cfloat>

#include "element.cuh"
#include "flashbench/cuda/kernels.hpp"

namespace flashbench::cuda {

namespace {

constexpr int kRowThreads = 256;

// Online softmax statistics (running max m, sum l of exp(x − m)), mergeable in any order.
struct RowStats {
  float max = -INFINITY;
  float sum = 0.0f;
};

__device__ __forceinline__ RowStats merge(RowStats a, RowStats b) {
  const float max = fmaxf(a.max, b.max);
  if (max == -INFINITY) return {max, 0.0f};
  return {max, a.sum * __expf(a.max - max) + b.sum * __expf(b.max - max)};
}

__device__ RowStats block_merge(RowStats stats) {
  __shared__ RowStats partial[kRowThreads / 32];
  for (int offset = 16; offset > 0; offset /= 2) {
    RowStats other{__shfl_xor_sync(0xffffffffu, stats.max, offset), __shfl_xor_sync(0xffffffffu, stats.sum, offset)};
    stats = merge(stats, other);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) partial[warp] = stats;
  __syncthreads();
  RowStats total;
  for (int w = 0; w < kRowThreads / 32; ++w) total = merge(total, partial[w]);
  return total;
}

__device__ float block_sum(float value) {
  __shared__ float partial[kRowThreads / 32];
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) partial[warp] = value;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < kRowThreads / 32; ++w) total += partial[w];
  return total;
}

// The columns row `row` of [BH·N, N_k] sees: j < valid_length; causal rows (bottom-right) see the
// keys j ≤ i + N_k − N of query i = row mod N, none at all where that is negative.
struct RowExtent {
  int64_t seq, seq_k;
  bool causal;
  __device__ __forceinline__ int64_t valid_length(int64_t row) const {
    if (!causal) return seq_k;
    const int64_t last = row % seq + seq_k - seq;
    return last < 0 ? 0 : (last + 1 < seq_k ? last + 1 : seq_k);
  }
};

// kWidth consecutive elements of a row as floats: one 16-byte access when kWidth > 1 (rows whose
// length is a multiple of kWidth, so every chunk is aligned and inside its row), else one element.
template <class T, int kWidth>
struct Chunk {
  float value[kWidth];
  __device__ __forceinline__ void load(const T* source) {
    if constexpr (kWidth == 1) {
      value[0] = to_float(source[0]);
    } else {
      static_assert(kWidth * sizeof(T) == 16, "a chunk is one 16-byte access");
      const uint4 bits = *reinterpret_cast<const uint4*>(source);
      const T* elements = reinterpret_cast<const T*>(&bits);
#pragma unroll
      for (int e = 0; e < kWidth; ++e) value[e] = to_float(elements[e]);
    }
  }
  __device__ __forceinline__ void store(T* target) const {
    if constexpr (kWidth == 1) {
      target[0] = from_float<T>(value[0]);
    } else {
      uint4 bits;
      T* elements = reinterpret_cast<T*>(&bits);
#pragma unroll
      for (int e = 0; e < kWidth; ++e) elements[e] = from_float<T>(value[e]);
      *reinterpret_cast<uint4*>(target) = bits;
    }
  }
};

// scores/probs: [BH·N rows, N]; row_max/row_sum: [BH·N]. probs may alias scores.
template <class T, int kWidth>
__global__ void __launch_bounds__(kRowThreads) softmax_rows_kernel(const T* scores, T* probs, float* row_max,
                                                                   float* row_sum, RowExtent extent) {
  const int64_t row = blockIdx.x, seq = extent.seq_k;
  const int64_t length = extent.valid_length(row);
  const T* s = scores + row * seq;
  RowStats stats;
  for (int64_t j = int64_t(threadIdx.x) * kWidth; j < length; j += kRowThreads * kWidth) {
    Chunk<T, kWidth> chunk;
    chunk.load(s + j);
#pragma unroll
    for (int e = 0; e < kWidth; ++e)
      if (j + e < length) stats = merge(stats, {chunk.value[e], 1.0f});
  }
  stats = block_merge(stats);
  if (threadIdx.x == 0) {
    if (row_max) row_max[row] = stats.max;
    if (row_sum) row_sum[row] = stats.sum;
  }
  if (!probs) return;
  T* p = probs + row * seq;
  const float inverse_sum = stats.sum > 0.0f ? 1.0f / stats.sum : 0.0f;  // a row that sees nothing is 0
  for (int64_t j = int64_t(threadIdx.x) * kWidth; j < seq; j += kRowThreads * kWidth) {
    Chunk<T, kWidth> chunk;
    if (j < length) chunk.load(s + j);  // a chunk past the visible columns is all zeros: nothing to read
#pragma unroll
    for (int e = 0; e < kWidth; ++e)
      chunk.value[e] = j + e < length ? __expf(chunk.value[e] - stats.max) * inverse_sum : 0.0f;
    chunk.store(p + j);
  }
}

// Threads of a block whose rows take kThreadsPerRow threads each: warps' rows share blocks of
// kRowThreads; a longer row is a block of its own.
template <int kThreadsPerRow>
__host__ __device__ constexpr int block_threads() {
  return kThreadsPerRow < kRowThreads ? kRowThreads : kThreadsPerRow;
}

// The maximum (kMax) or the sum of `value` over the kThreads threads of a row: a warp's by shuffles;
// a block's (kThreads = the whole block, up to 1024) through shared memory as well. Every thread of
// the row gets it. Each instance has its own shared array, written once a launch: a kernel may call
// the two instances one after the other, but not one of them twice (a second call would overwrite it
// while a slower warp still reads the first call's values).
template <int kThreads, bool kMax>
__device__ __forceinline__ float row_reduce(float value) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(0xffffffffu, value, offset);
    value = kMax ? fmaxf(value, other) : value + other;
  }
  if constexpr (kThreads == 32) {
    return value;
  } else {
    static_assert(kThreads % 32 == 0 && kThreads <= 1024, "a warp or a whole block a row");
    __shared__ float partial[kThreads / 32];
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = value;
    __syncthreads();
    float total = partial[0];
    for (int w = 1; w < kThreads / 32; ++w) total = kMax ? fmaxf(total, partial[w]) : total + partial[w];
    return total;
  }
}

// softmax_rows_kernel for rows of at most kThreadsPerRow · kChunks · kWidth elements (kWidth > 1),
// held in registers from the read to the write: kThreadsPerRow = 32 (kRowThreads / 32 rows a block)
// or a block of kRowThreads or more a row. Thread `lane` of a row holds its chunks lane, lane + kThreadsPerRow,
// ... (consecutive lanes, consecutive 16 bytes). probs may alias scores: a row is read whole before
// any of it is written, by the threads that write it.
template <class T, int kWidth, int kThreadsPerRow, int kChunks>
__global__ void __launch_bounds__(block_threads<kThreadsPerRow>()) softmax_rows_in_registers_kernel(
    const T* scores, T* probs, float* row_max, float* row_sum, RowExtent extent, int64_t rows) {
  static_assert(kWidth > 1, "whole 16-byte chunks");
  constexpr int kRowsPerBlock = block_threads<kThreadsPerRow>() / kThreadsPerRow;
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kThreadsPerRow;
  if (kThreadsPerRow == 32 && row >= rows) return;  // a warp's own row: no barrier to miss
  const int lane = threadIdx.x % kThreadsPerRow;
  const int64_t seq = extent.seq_k, length = extent.valid_length(row);
  const T* s = scores + row * seq;
  float x[kChunks][kWidth];
  float max = -INFINITY;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int64_t j = (int64_t(c) * kThreadsPerRow + lane) * kWidth;
    Chunk<T, kWidth> chunk;
    if (j < length) chunk.load(s + j);  // a chunk past the visible columns is all masked: nothing to read
#pragma unroll
    for (int e = 0; e < kWidth; ++e) {
      x[c][e] = j + e < length ? chunk.value[e] : -INFINITY;
      max = fmaxf(max, x[c][e]);
    }
  }
  max = row_reduce<kThreadsPerRow, true>(max);
  const float shift = max == -INFINITY ? 0.0f : max;  // a row that sees nothing: every weight exp(−∞) = 0
  float sum = 0.0f;
#pragma unroll
  for (int c = 0; c < kChunks; ++c)
#pragma unroll
    for (int e = 0; e < kWidth; ++e) {
      x[c][e] = __expf(x[c][e] - shift);
      sum += x[c][e];
    }
  sum = row_reduce<kThreadsPerRow, false>(sum);
  if (lane == 0) {
    if (row_max) row_max[row] = max;
    if (row_sum) row_sum[row] = sum;
  }
  if (!probs) return;
  T* p = probs + row * seq;
  const float inverse_sum = sum > 0.0f ? 1.0f / sum : 0.0f;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int64_t j = (int64_t(c) * kThreadsPerRow + lane) * kWidth;
    if (j >= seq) break;
    Chunk<T, kWidth> chunk;
#pragma unroll
    for (int e = 0; e < kWidth; ++e) chunk.value[e] = x[c][e] * inverse_sum;
    chunk.store(p + j);
  }
}

template <class T, int kWidth>
__global__ void __launch_bounds__(kRowThreads) probs_from_scores_kernel(const T* scores, const float* row_max,
                                                                        const float* row_sum, T* probs,
                                                                        RowExtent extent) {
  const int64_t row = blockIdx.x, seq = extent.seq_k;
  const int64_t length = extent.valid_length(row);
  const float max = row_max[row], inverse_sum = row_sum[row] > 0.0f ? 1.0f / row_sum[row] : 0.0f;
  const T* s = scores + row * seq;
  T* p = probs + row * seq;
  for (int64_t j = int64_t(threadIdx.x) * kWidth; j < seq; j += kRowThreads * kWidth) {
    Chunk<T, kWidth> chunk;
    if (j < length) chunk.load(s + j);  // a chunk past the visible columns is all zeros: nothing to read
#pragma unroll
    for (int e = 0; e < kWidth; ++e)
      chunk.value[e] = j + e < length ? __expf(chunk.value[e] - max) * inverse_sum : 0.0f;
    chunk.store(p + j);
  }
}

// In the forward pass O_i = Σ_j P_ij V_j with P = softmax(S), so
// dS_ij = P_ij (dP_ij − Σ_k P_ik dP_ik), the sum running over the whole row (not one tile).
// kCached: the row's P and dP stay in shared memory between the sum and the write (dynamic shared
// memory of 2 × N_k elements, rounded up to whole chunks), so each is read from memory once.
template <class T, int kWidth, bool kCached>
__global__ void __launch_bounds__(kRowThreads) softmax_backward_kernel(const T* probs, T* dprobs, RowExtent extent) {
  extern __shared__ uint4 row_cache[];
  const int64_t row = blockIdx.x, seq = extent.seq_k;
  const int64_t length = extent.valid_length(row);
  const T* p = probs + row * seq;
  T* dp = dprobs + row * seq;
  T* p_cache = reinterpret_cast<T*>(row_cache);
  T* dp_cache = p_cache + (seq + kWidth - 1) / kWidth * kWidth;
  float partial = 0.0f;
  for (int64_t j = int64_t(threadIdx.x) * kWidth; j < length; j += kRowThreads * kWidth) {
    Chunk<T, kWidth> pc, dpc;
    pc.load(p + j);
    dpc.load(dp + j);
    if constexpr (kCached) {
      pc.store(p_cache + j);
      dpc.store(dp_cache + j);
    }
#pragma unroll
    for (int e = 0; e < kWidth; ++e)
      if (j + e < length) partial += pc.value[e] * dpc.value[e];
  }
  const float row_dot = block_sum(partial);  // its barrier also orders the cache's writes before the reads
  for (int64_t j = int64_t(threadIdx.x) * kWidth; j < seq; j += kRowThreads * kWidth) {
    Chunk<T, kWidth> pc, dpc;
    if (j < length) {  // a chunk past the visible columns is all zeros: nothing to read
      pc.load(kCached ? p_cache + j : p + j);
      dpc.load(kCached ? dp_cache + j : dp + j);
    }
#pragma unroll
    for (int e = 0; e < kWidth; ++e)
      dpc.value[e] = j + e < length ? pc.value[e] * (dpc.value[e] - row_dot) : 0.0f;
    dpc.store(dp + j);
  }
}

// Dropout over [BH·N, N_k] as a flat array, element e = (h·N + i)·N_k + j, one Philox block per four
// consecutive elements (each thread takes whole blocks): dropped = probs ∘ Z/(1 − p), mask = Z.
template <class T>
__global__ void dropout_forward_kernel(const T* probs, T* dropped, unsigned char* mask, int64_t count,
                                       philox::DropoutMask dropout) {
  for (int64_t block = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; block * 4 < count;
       block += int64_t(gridDim.x) * blockDim.x) {
    const philox::Block words = dropout.block(uint64_t(block) * 4);
    for (int lane = 0; lane < 4 && block * 4 + lane < count; ++lane) {
      const int64_t e = block * 4 + lane;
      const bool kept = words.word[lane] >= dropout.threshold;
      dropped[e] = from_float<T>(kept ? to_float(probs[e]) * dropout.scale : 0.0f);
      if (mask) mask[e] = kept ? 1 : 0;
    }
  }
}

// dP = dP̃ ∘ Z/(1 − p), Z from `mask` or, where it is null, redrawn.
template <class T>
__global__ void dropout_backward_kernel(const unsigned char* mask, T* dprobs, int64_t count,
                                        philox::DropoutMask dropout) {
  for (int64_t block = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; block * 4 < count;
       block += int64_t(gridDim.x) * blockDim.x) {
    philox::Block words{};
    if (!mask) words = dropout.block(uint64_t(block) * 4);
    for (int lane = 0; lane < 4 && block * 4 + lane < count; ++lane) {
      const int64_t e = block * 4 + lane;
      const bool kept = mask ? mask[e] != 0 : words.word[lane] >= dropout.threshold;
      dprobs[e] = from_float<T>(kept ? to_float(dprobs[e]) * dropout.scale : 0.0f);
    }
  }
}

unsigned element_blocks(int64_t count) {
  constexpr int64_t kMaxBlocks = 65535 * 4;
  const int64_t blocks = (count / 4 + kRowThreads) / kRowThreads;
  return static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

// Launches kernel<T, width> with 16-byte chunks when every row is a whole number of them.
template <class T, template <class, int> class Launch, class... Args>
void launch_by_width(int64_t seq, Args&&... args) {
  constexpr int kWide = int(16 / sizeof(T));
  if (seq % kWide == 0) Launch<T, kWide>::run(args...);
  else Launch<T, 1>::run(args...);
}

unsigned row_count(const LayerShape& shape) { return static_cast<unsigned>(shape.heads_total * shape.seq); }
RowExtent extent_of(const LayerShape& shape) { return {shape.seq, shape.seq_k, shape.causal}; }

// A thread's most 16-byte chunks of a row in registers (64 floats of a 16-bit row) for the warp and
// kRowThreads rows (the 1024-thread rows take four).
constexpr int kMaxChunks = 8;

template <class T, int kWidth>
struct SoftmaxRows {
  template <int kThreadsPerRow, int kChunks>
  static void in_registers(const LayerShape& shape, const void* scores, void* probs, float* row_max,
                           float* row_sum, cudaStream_t stream) {
    constexpr int kBlockThreads = block_threads<kThreadsPerRow>();
    const int64_t rows = row_count(shape), rows_per_block = kBlockThreads / kThreadsPerRow;
    softmax_rows_in_registers_kernel<T, kWidth, kThreadsPerRow, kChunks>
        <<<static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block), kBlockThreads, 0, stream>>>(
            static_cast<const T*>(scores), static_cast<T*>(probs), row_max, row_sum, extent_of(shape), rows);
  }
  // The fewest chunks a thread (of kThreadsPerRow a row) holding the row takes, as a power of two.
  template <int kThreadsPerRow, int kChunks = 1>
  static void by_chunks(const LayerShape& shape, const void* scores, void* probs, float* row_max,
                        float* row_sum, cudaStream_t stream) {
    if constexpr (kChunks < kMaxChunks) {
      if (shape.seq_k > int64_t(kThreadsPerRow) * kChunks * kWidth)
        return by_chunks<kThreadsPerRow, 2 * kChunks>(shape, scores, probs, row_max, row_sum, stream);
    }
    in_registers<kThreadsPerRow, kChunks>(shape, scores, probs, row_max, row_sum, stream);
  }
  static void run(const LayerShape& shape, const void* scores, void* probs, float* row_max, float* row_sum,
                  cudaStream_t stream) {
    if constexpr (kWidth > 1) {
      if (shape.seq_k <= int64_t(32) * kMaxChunks * kWidth)  // short rows: a warp each, no block barrier
        return by_chunks<32>(shape, scores, probs, row_max, row_sum, stream);
      if (shape.seq_k <= int64_t(kRowThreads) * kMaxChunks * kWidth)
        return by_chunks<kRowThreads>(shape, scores, probs, row_max, row_sum, stream);
      // Up to 32K elements (16-bit; 16K fp32) in a 1024-thread block, four 16-byte chunks a thread:
      // the 64 registers a thread that such a block leaves hold its 32 (or 16) elements as floats.
      if (shape.seq_k <= int64_t(1024) * 4 * kWidth)
        return in_registers<1024, 4>(shape, scores, probs, row_max, row_sum, stream);
    }
    softmax_rows_kernel<T, kWidth><<<row_count(shape), kRowThreads, 0, stream>>>(
        static_cast<const T*>(scores), static_cast<T*>(probs), row_max, row_sum, extent_of(shape));
  }
};

template <class T, int kWidth>
struct ProbsFromScores {
  static void run(const LayerShape& shape, const void* scores, const float* row_max, const float* row_sum,
                  void* probs, cudaStream_t stream) {
    probs_from_scores_kernel<T, kWidth><<<row_count(shape), kRowThreads, 0, stream>>>(
        static_cast<const T*>(scores), row_max, row_sum, static_cast<T*>(probs), extent_of(shape));
  }
};

template <class T, int kWidth>
struct SoftmaxBackward {
  static void run(const LayerShape& shape, const void* probs, void* dprobs, cudaStream_t stream) {
    // Rows whose P and dP fit kMaxRowCacheBytes of shared memory are read once (N_k ≤ 16K in 16 bits);
    // longer ones twice, the second read mostly from L2. A 128 KiB limit (32K rows cached, one block
    // per SM) was slower at 32K: 89 against 75 ms (results/h200/row-cache/limit-128k).
    constexpr int kMaxRowCacheBytes = 64 << 10;
    const int64_t cache_bytes = 2 * ((shape.seq_k + kWidth - 1) / kWidth * kWidth) * int64_t(sizeof(T));
    if (cache_bytes <= kMaxRowCacheBytes) {
      static const cudaError_t allowed = cudaFuncSetAttribute(
          softmax_backward_kernel<T, kWidth, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxRowCacheBytes);
      check_cuda(allowed, "cudaFuncSetAttribute(softmax_backward_kernel)");
      softmax_backward_kernel<T, kWidth, true><<<row_count(shape), kRowThreads, cache_bytes, stream>>>(
          static_cast<const T*>(probs), static_cast<T*>(dprobs), extent_of(shape));
    } else {
      softmax_backward_kernel<T, kWidth, false><<<row_count(shape), kRowThreads, 0, stream>>>(
          static_cast<const T*>(probs), static_cast<T*>(dprobs), extent_of(shape));
    }
  }
};

}  // namespace

void softmax_rows(const LayerShape& shape, const void* scores, void* probs, float* row_max, float* row_sum,
                  cudaStream_t stream) {
  dispatch_dtype(shape.dtype, [&](auto tag) {
    launch_by_width<decltype(tag), SoftmaxRows>(shape.seq_k, shape, scores, probs, row_max, row_sum, stream);
  });
  check_launch("softmax_rows");
}

void probs_from_scores(const LayerShape& shape, const void* scores, const float* row_max, const float* row_sum,
                       void* probs, cudaStream_t stream) {
  dispatch_dtype(shape.dtype, [&](auto tag) {
    launch_by_width<decltype(tag), ProbsFromScores>(shape.seq_k, shape, scores, row_max, row_sum, probs, stream);
  });
  check_launch("probs_from_scores");
}

void softmax_backward_rows(const LayerShape& shape, const void* probs, void* dprobs, cudaStream_t stream) {
  dispatch_dtype(shape.dtype, [&](auto tag) {
    launch_by_width<decltype(tag), SoftmaxBackward>(shape.seq_k, shape, probs, dprobs, stream);
  });
  check_launch("softmax_backward_rows");
}

void dropout_forward(const LayerShape& shape, const void* probs, void* dropped, unsigned char* mask,
                     cudaStream_t stream) {
  const int64_t count = shape.heads_total * shape.seq * shape.seq_k;
  dispatch_dtype(shape.dtype, [&](auto tag) {
    using T = decltype(tag);
    dropout_forward_kernel<T><<<element_blocks(count), kRowThreads, 0, stream>>>(
        static_cast<const T*>(probs), static_cast<T*>(dropped), mask, count, shape.dropout);
  });
  check_launch("dropout_forward");
}

void dropout_backward(const LayerShape& shape, const unsigned char* mask, void* dprobs, cudaStream_t stream) {
  const int64_t count = shape.heads_total * shape.seq * shape.seq_k;
  dispatch_dtype(shape.dtype, [&](auto tag) {
    using T = decltype(tag);
    dropout_backward_kernel<T><<<element_blocks(count), kRowThreads, 0, stream>>>(mask, static_cast<T*>(dprobs),
                                                                                   count, shape.dropout);
  });
  check_launch("dropout_backward");
}

}  // namespace flashbench::cuda
