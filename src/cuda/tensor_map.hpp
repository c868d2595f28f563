#pragma once
// Tensor maps for the copy engine (cp.async.bulk.tensor, hopper.cuh): how a kernel names a tile of a
// tensor in device memory by its coordinates instead of copying it 16 bytes per thread.
#include <cuda.h>

#include <cstdint>

#include "flashbench/problem.hpp"

namespace flashbench::cuda {

// The map of a [heads][rows][width] tensor of 16-bit elements (bf16 or fp16) at `base`, read in boxes
// of [box_rows][64 columns] into 128-byte-swizzled shared memory (hopper::SwizzledTile's panels);
// reads past the tensor's rows or width return zeros. Throws RuntimeFailure when the driver refuses
// (base not 16-byte aligned, a dimension out of range) or has no tensor maps.
CUtensorMap swizzled_tile_map(const void* base, Dtype dtype, int64_t width, int64_t rows, int64_t heads,
                              int box_rows);

}  // namespace flashbench::cuda
