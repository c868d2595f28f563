#pragma once
// Tensor maps for the copy engine (cp.async.bulk.tensor, hopper.cuh): how a kernel names a tile of a
// tensor in device memory by its coordinates instead of copying it 16 bytes per thread.
#include <cuda.h>

#include <cstdint>

#include "flashbench/core/problem.hpp"

namespace flashbench::cuda {

// The map of a [heads][rows][width] tensor of `element` (bf16, fp16 or fp32) at `base`, in boxes of
// [box_rows][128 bytes of columns] (64 16-bit or 32 fp32 columns) matching 128-byte-swizzled shared
// memory (hopper::SwizzledTile and SwizzledFloatTile's panels); loads past the tensor's rows or width
// return zeros, reductions there are dropped. Throws RuntimeFailure when the driver refuses (base not
// 16-byte aligned, a dimension out of range) or has no tensor maps.
CUtensorMap swizzled_tile_map(const void* base, Dtype element, int64_t width, int64_t rows, int64_t heads,
                              int box_rows);

}  // namespace flashbench::cuda
