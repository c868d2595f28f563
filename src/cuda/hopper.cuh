#pragma once
// Hopper (sm_90a) primitives for the v2 kernels of flash_wgmma.cu, in inline PTX: warpgroup matrix
// products (wgmma), their shared-memory descriptors and the 128-byte-swizzled tile layout they read,
// the copy engine (TMA) filling that layout on mbarriers and reducing tiles into global memory.
//
// A warpgroup is 4 consecutive warps (128 threads) starting at a warp index divisible by 4.
// wgmma.m64nNk16 computes D[64×N] (+)= A[64×16]·B[16×N] with fp32 accumulators in registers:
//   D: warp w of the group holds rows 16w + g and 16w + g + 8 (g = lane/4, t = lane%4); its
//      register 4j + e holds row 16w + g + 8·(e/2), column 8j + 2t + (e%2), for j < N/8.
//   A from registers: the m16k16 fragment of mma.sync per warp (rows 16w..16w+15). Two adjacent
//      accumulator column blocks (j = 2kk, 2kk+1) are exactly the A fragment of k-step kk, which
//      is how P and dS pass from one product into the next without leaving registers.
//   A or B from shared memory: a 64-bit descriptor (below). "K-major" means the reduction axis is
//      contiguous in memory, "MN-major" (the instruction's transpose flag) the other axis.
// Products are asynchronous: issue after wgmma_fence(), group with wgmma_commit(), and read the
// accumulators only after wgmma_wait<0>() and pin() (which stops the compiler from moving their
// reads above the wait).
#include <cuda.h>  // CUtensorMap
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace flashbench::cuda::hopper {

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---- the swizzled tile ---------------------------------------------------------------------------

// A [kRows][kCols] tile in the layout wgmma (16-bit elements) and the copy engine read with 128-byte
// swizzling: panels of [kRows][128 bytes of columns] (64 16-bit or 32 fp32 columns; one 128-byte
// line per row), panel p at p·kRows·128 bytes; within a panel the 16-byte chunk c of row r sits at
// chunk c ^ (r % 8), so that 8 consecutive rows fall into 8 different bank groups. The tile must
// start on a 1024-byte boundary (the swizzle pattern repeats every 8 rows of 128 bytes). For fp32
// (SwizzledFloatTile) a warp's 8-byte stores of a wgmma accumulator fragment (8 rows, 4 column
// pairs) then hit every bank pair twice at most, where a row-major tile puts the 8 rows on the same
// banks.
template <int kRows, int kCols, int kElementBytes = 2>
struct SwizzledTile {
  static constexpr int kPanelColumns = 128 / kElementBytes;
  static constexpr int kChunkColumns = 16 / kElementBytes;
  static_assert(kCols % kPanelColumns == 0 && kRows % 8 == 0, "whole panels of whole 8-row groups");
  static constexpr int kPanelBytes = kRows * 128;
  static constexpr int kBytes = kPanelBytes * (kCols / kPanelColumns);
  // Byte offset of element (row, col); col may be any column.
  __device__ __forceinline__ static uint32_t offset(int row, int col) {
    return (col / kPanelColumns) * kPanelBytes + row * 128 +
           ((((col % kPanelColumns) / kChunkColumns) ^ (row % 8)) << 4) + (col % kChunkColumns) * kElementBytes;
  }
};
template <int kRows, int kCols>
using SwizzledFloatTile = SwizzledTile<kRows, kCols, 4>;

// ---- descriptors ---------------------------------------------------------------------------------

// The matrix descriptor: start address, leading- and stride-dimension byte offsets (each >> 4, 14
// bits), swizzle mode 1 = 128 bytes in bits 62–63; base offset 0 (every tile is 1024-byte aligned).
__device__ __forceinline__ uint64_t descriptor(uint32_t start, uint32_t leading_bytes, uint32_t stride_bytes) {
  return uint64_t((start & 0x3FFFF) >> 4) | uint64_t((leading_bytes & 0x3FFFF) >> 4) << 16 |
         uint64_t((stride_bytes & 0x3FFFF) >> 4) << 32 | uint64_t(1) << 62;
}

// Operand of a product whose reduction axis is the tile's column axis (K-major): rows row0.. of
// the tile are the M (or N) axis, k-step `kk` covers columns 16kk..16kk+15. Within a 128-byte line
// the step is a 32-byte move of the start address; 8-row groups are 1024 bytes apart (the stride
// offset); the leading offset is unused with swizzling. k_major_base is the descriptor of step 0,
// k_major_step the byte offset of step kk (a constant in unrolled loops).
template <class Tile>
__device__ __forceinline__ uint64_t k_major_base(uint32_t tile, int row0) {
  return descriptor(tile + row0 * 128, 16, 1024);
}
template <class Tile>
__host__ __device__ constexpr uint32_t k_major_step(int kk) {
  return (16 * kk / 64) * Tile::kPanelBytes + (16 * kk % 64) * 2;
}

// Operand whose reduction axis is the tile's row axis (MN-major, transpose flag 1): k-step `kk`
// covers rows 16kk..16kk+15, the M (or N) axis runs along the columns from col0 (a multiple of
// 64), 64-column panels kPanelBytes apart (the leading offset), 8-row groups 1024 bytes apart.
template <class Tile>
__device__ __forceinline__ uint64_t mn_major_base(uint32_t tile, int col0) {
  return descriptor(tile + (col0 / 64) * Tile::kPanelBytes, Tile::kPanelBytes, 1024);
}
template <class Tile>
__host__ __device__ constexpr uint32_t mn_major_step(int kk) {
  return 16 * kk * 128;
}

// The descriptor `bytes` further on (a multiple of 16 that keeps the start address in its field).
__device__ __forceinline__ uint64_t advance(uint64_t descriptor, uint32_t bytes) { return descriptor + (bytes >> 4); }

// x, hidden from the compiler's loop-invariant motion: a descriptor derived from it inside a loop is
// computed there (one add) instead of being hoisted out and held in a register for the whole loop.
__device__ __forceinline__ uint64_t opaque(uint64_t x) {
  asm volatile("" : "+l"(x));
  return x;
}
__device__ __forceinline__ uint32_t opaque(uint32_t x) {
  asm volatile("" : "+r"(x));
  return x;
}

// ---- wgmma ---------------------------------------------------------------------------------------

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// Ties each register to this point of the program: reads after it stay after it.
template <int kCount>
__device__ __forceinline__ void pin(float (&d)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
template <int kCount>
__device__ __forceinline__ void pin(uint32_t (&r)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

// Four 8×8 blocks of 16-bit elements into shared memory, each transposed: register j of a lane holds
// its two elements of block j as an mma fragment does (row lane/4, columns 2·(lane%4), +1), and lane
// 8j + i gives the shared address of the block's stored row i (16 bytes: the fragment's column i).
__device__ __forceinline__ void stmatrix_x4_trans(uint32_t address, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(address), "r"(r[0]),
               "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

// Generic-proxy writes to shared memory (ordinary stores, cp.async) made visible to the async
// proxy (wgmma operands, bulk copies): each writing thread, before the barrier.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// D[64×N] (+)= A·B in storage type T (bf16 or fp16), fp32 accumulators; `accumulate` 0 starts D at
// A·B. ss: A and B from descriptors (kTransA/kTransB: 1 = MN-major); rs: A from registers.
template <class T, int N>
struct Wgmma;

// The specialisations spell out every accumulator register, as inline PTX must. The bf16 and fp16
// ones differ only in the PTX type, so one macro writes each shape for both.
#define FLASHBENCH_WGMMA_D32                                                                              \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),   \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),      \
      "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),     \
      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define FLASHBENCH_WGMMA_D40                                                                              \
  FLASHBENCH_WGMMA_D32, "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), \
      "+f"(d[39])
#define FLASHBENCH_WGMMA_D56                                                                              \
  FLASHBENCH_WGMMA_D40, "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), \
      "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]),          \
      "+f"(d[54]), "+f"(d[55])
#define FLASHBENCH_WGMMA_D64                                                                              \
  FLASHBENCH_WGMMA_D56, "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), \
      "+f"(d[63])
#define FLASHBENCH_WGMMA_REGS32                                                                            \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, "         \
  "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31 "
#define FLASHBENCH_WGMMA_REGS40                                                                           \
  FLASHBENCH_WGMMA_REGS32 ", %32, %33, %34, %35, %36, %37, %38, %39 "
#define FLASHBENCH_WGMMA_REGS56                                                                           \
  FLASHBENCH_WGMMA_REGS40 ", %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55 "
#define FLASHBENCH_WGMMA_REGS64                                                                           \
  FLASHBENCH_WGMMA_REGS56 ", %56, %57, %58, %59, %60, %61, %62, %63 "

// Wgmma<T, 64> (32 accumulators) and Wgmma<T, 128> (64) for storage type T, PTX type PTX ("bf16",
// "f16"). The operand numbers after the accumulators: ss takes a, b, accumulate, kTransA, kTransB;
// rs takes a[0..3], b, accumulate, kTransB.
#define FLASHBENCH_DEFINE_WGMMA(T, PTX)                                                                   \
  template <>                                                                                             \
  struct Wgmma<T, 64> {                                                                                   \
    static constexpr int kAccumulators = 32;                                                              \
    template <int kTransA, int kTransB>                                                                   \
    __device__ __forceinline__ static void ss(float (&d)[32], uint64_t a, uint64_t b, int accumulate) {  \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                           \
                   "wgmma.mma_async.sync.aligned.m64n64k16.f32." PTX "." PTX " {" FLASHBENCH_WGMMA_REGS32  \
                   "}, %32, %33, p, 1, 1, %35, %36;\n}\n"                                                  \
                   : FLASHBENCH_WGMMA_D32                                                                 \
                   : "l"(a), "l"(b), "r"(accumulate), "n"(kTransA), "n"(kTransB));                       \
    }                                                                                                     \
    template <int kTransB>                                                                                \
    __device__ __forceinline__ static void rs(float (&d)[32], const uint32_t (&a)[4], uint64_t b,         \
                                              int accumulate) {                                           \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                           \
                   "wgmma.mma_async.sync.aligned.m64n64k16.f32." PTX "." PTX " {" FLASHBENCH_WGMMA_REGS32  \
                   "}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"                                      \
                   : FLASHBENCH_WGMMA_D32                                                                 \
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate), "n"(kTransB));  \
    }                                                                                                     \
  };                                                                                                      \
  template <>                                                                                             \
  struct Wgmma<T, 128> {                                                                                  \
    static constexpr int kAccumulators = 64;                                                              \
    template <int kTransA, int kTransB>                                                                   \
    __device__ __forceinline__ static void ss(float (&d)[64], uint64_t a, uint64_t b, int accumulate) {  \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                           \
                   "wgmma.mma_async.sync.aligned.m64n128k16.f32." PTX "." PTX " {" FLASHBENCH_WGMMA_REGS64 \
                   "}, %64, %65, p, 1, 1, %67, %68;\n}\n"                                                  \
                   : FLASHBENCH_WGMMA_D64                                                                 \
                   : "l"(a), "l"(b), "r"(accumulate), "n"(kTransA), "n"(kTransB));                       \
    }                                                                                                     \
    template <int kTransB>                                                                                \
    __device__ __forceinline__ static void rs(float (&d)[64], const uint32_t (&a)[4], uint64_t b,         \
                                              int accumulate) {                                           \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                           \
                   "wgmma.mma_async.sync.aligned.m64n128k16.f32." PTX "." PTX " {" FLASHBENCH_WGMMA_REGS64 \
                   "}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"                                      \
                   : FLASHBENCH_WGMMA_D64                                                                 \
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate), "n"(kTransB));  \
    }                                                                                                     \
  };

FLASHBENCH_DEFINE_WGMMA(__nv_bfloat16, "bf16")
FLASHBENCH_DEFINE_WGMMA(__half, "f16")
#define FLASHBENCH_WGMMA_D96                                                                              \
  FLASHBENCH_WGMMA_D64, "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), \
      "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), \
      "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), \
      "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), \
      "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
#define FLASHBENCH_WGMMA_REGS96                                                                            \
  FLASHBENCH_WGMMA_REGS64 ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, "   \
  "%79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95 "
// Shapes for S = Q·Kᵀ of K/V tiles other than 64 or 128 keys (and the backward's 80-query products
// at d = 128), shared-memory operands only:
// Wgmma<T, N> with ACCUMULATORS = N/2 accumulators (D: their asm operands, REGS: their numbers).
// The operands after them are numbered on from ACCUMULATORS as in the ss above: PREDICATE is
// `accumulate`'s number, OPERANDS the instruction's a, b, predicate and transposes.
#define FLASHBENCH_DEFINE_WGMMA_SS(T, PTX, N, ACCUMULATORS, D, REGS, PREDICATE, OPERANDS)               \
  template <>                                                                                             \
  struct Wgmma<T, N> {                                                                                    \
    static constexpr int kAccumulators = ACCUMULATORS;                                                    \
    static_assert(kAccumulators == N / 2, "m64nNk16: N/2 fp32 accumulators a thread");                   \
    template <int kTransA, int kTransB>                                                                   \
    __device__ __forceinline__ static void ss(float (&d)[ACCUMULATORS], uint64_t a, uint64_t b,           \
                                              int accumulate) {                                           \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " PREDICATE ", 0;\n"                                 \
                   "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." PTX "." PTX " {" REGS "}, " OPERANDS ";\n}\n" \
                   : D                                                                                    \
                   : "l"(a), "l"(b), "r"(accumulate), "n"(kTransA), "n"(kTransB));                       \
    }                                                                                                     \
  };
// 80 keys (d = 256; the backward's 80 queries at d = 128), 112 (d = 192), 192 (d = 96 and 128).
#define FLASHBENCH_DEFINE_WGMMA_SS_SHAPES(T, PTX)                                                        \
  FLASHBENCH_DEFINE_WGMMA_SS(T, PTX, 80, 40, FLASHBENCH_WGMMA_D40, FLASHBENCH_WGMMA_REGS40, "%42",        \
                             "%40, %41, p, 1, 1, %43, %44")                                               \
  FLASHBENCH_DEFINE_WGMMA_SS(T, PTX, 112, 56, FLASHBENCH_WGMMA_D56, FLASHBENCH_WGMMA_REGS56, "%58",       \
                             "%56, %57, p, 1, 1, %59, %60")                                               \
  FLASHBENCH_DEFINE_WGMMA_SS(T, PTX, 192, 96, FLASHBENCH_WGMMA_D96, FLASHBENCH_WGMMA_REGS96, "%98",       \
                             "%96, %97, p, 1, 1, %99, %100")
FLASHBENCH_DEFINE_WGMMA_SS_SHAPES(__nv_bfloat16, "bf16")
FLASHBENCH_DEFINE_WGMMA_SS_SHAPES(__half, "f16")
#undef FLASHBENCH_DEFINE_WGMMA_SS_SHAPES
#undef FLASHBENCH_DEFINE_WGMMA_SS
#undef FLASHBENCH_WGMMA_REGS96
#undef FLASHBENCH_WGMMA_D96

#undef FLASHBENCH_DEFINE_WGMMA
#undef FLASHBENCH_WGMMA_REGS64
#undef FLASHBENCH_WGMMA_REGS56
#undef FLASHBENCH_WGMMA_REGS40
#undef FLASHBENCH_WGMMA_REGS32
#undef FLASHBENCH_WGMMA_D64
#undef FLASHBENCH_WGMMA_D56
#undef FLASHBENCH_WGMMA_D40
#undef FLASHBENCH_WGMMA_D32

// ---- mbarriers and the tensor copy engine ----------------------------------------------------------
//
// A tile fetched by the copy engine (cp.async.bulk.tensor, "TMA") lands in shared memory without a
// thread issuing a copy per 16 bytes: one thread names the tile by its coordinates in a tensor map
// (made on the host, passed as a __grid_constant__ kernel parameter) and the bytes complete on an
// mbarrier, on which the readers wait; a reduction goes the other way, from a tile into the tensor.
// The tensor maps of these kernels (tensor_map.hpp) are [heads][rows][width] of 16-bit or fp32
// elements with 128-byte swizzling and boxes of [box rows][128 bytes of columns]: one box is one
// panel of a SwizzledTile, laid out exactly as SwizzledTile::offset says (the swizzle is a function
// of the address bits, and panels start on 1024-byte boundaries). Rows past the tensor, and columns
// past a head dim narrower than the tile, arrive as zeros (and are not written by a reduction).

__device__ __forceinline__ void mbarrier_init(uint32_t barrier, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(barrier), "r"(arrivals) : "memory");
}
// After the initialisations, before the barrier that publishes them (to the copy engine too).
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// One arrival that also expects `bytes` from the copy engine in the current phase.
__device__ __forceinline__ void mbarrier_arrive_expect_bytes(uint32_t barrier, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(barrier), "r"(bytes) : "memory");
}
// One arrival once every cp.async this thread has issued so far has landed (counted in the
// barrier's arrivals at init: .noinc).
__device__ __forceinline__ void cp_async_arrive(uint32_t barrier) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(barrier) : "memory");
}
// Wait until the phase of parity `parity` has completed (its arrivals and bytes all in).
__device__ __forceinline__ void mbarrier_wait(uint32_t barrier, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(barrier), "r"(parity)
        : "memory");
  } while (!done);
}

// counter += 1 in shared memory with acquire-release order at block scope; returns the old value.
// The last of several warps to count a buffer free sees all the others' reads of it finished.
__device__ __forceinline__ uint32_t count_in(uint32_t counter) {
  uint32_t old;
  asm volatile("atom.acq_rel.cta.shared::cta.add.u32 %0, [%1], 1;\n" : "=r"(old) : "r"(counter) : "memory");
  return old;
}

// Box (column, row, head) of `map` into shared memory at `destination`, completing on `barrier`.
__device__ __forceinline__ void tma_load_3d(uint32_t destination, const CUtensorMap& map, int column, int row,
                                            int head, uint32_t barrier) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];\n" ::"r"(destination),
      "l"(reinterpret_cast<uint64_t>(&map)), "r"(column), "r"(row), "r"(head), "r"(barrier)
      : "memory");
}

// global box (column, row, head) of `map` += the fp32 box at `source` in shared memory, by the copy
// engine, as a bulk operation of this thread (bulk_commit / bulk_wait_read / bulk_wait); rows and
// columns of the box outside the tensor are left alone.
__device__ __forceinline__ void tma_reduce_add_3d(const CUtensorMap& map, uint32_t source, int column, int row,
                                                  int head) {
  asm volatile(
      "cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::"l"(
          reinterpret_cast<uint64_t>(&map)),
      "r"(source), "r"(column), "r"(row), "r"(head)
      : "memory");
}

// Rows row0.. of head `head` into a whole SwizzledTile (Tile::kBytes on `barrier`), a box per panel.
template <class Tile>
__device__ __forceinline__ void tma_load_tile(uint32_t tile, const CUtensorMap& map, int64_t row0, int64_t head,
                                              uint32_t barrier) {
#pragma unroll
  for (int panel = 0; panel < Tile::kBytes / Tile::kPanelBytes; ++panel)
    tma_load_3d(tile + panel * Tile::kPanelBytes, map, 64 * panel, int(row0), int(head), barrier);
}

// ---- copies ----------------------------------------------------------------------------------------

// 4 bytes from global to shared memory, asynchronously; zeros where !inside. Completion is tracked
// by an mbarrier (cp_async_arrive).
__device__ __forceinline__ void cp_async_4(uint32_t destination, const void* source, bool inside) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(destination), "l"(source),
               "r"(inside ? 4 : 0));
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// This thread's bulk operations but the kPending latest groups have finished reading shared memory
// (it may be rewritten).
template <int kPending = 0>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
}
// All of this thread's bulk operations have completed.
__device__ __forceinline__ void bulk_wait() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

}  // namespace flashbench::cuda::hopper
