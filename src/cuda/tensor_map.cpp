// Tensor maps for the copy engine (tensor_map.hpp). cuTensorMapEncodeTiled is a driver function: it
// is found through the runtime's entry-point query, so nothing links against the driver library.
#include "tensor_map.hpp"

#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <fmt/format.h>

#include "flashbench/core/errors.hpp"

namespace flashbench::cuda {

namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_function() {
  static const PFN_cuTensorMapEncodeTiled_v12000 function = [] {
    void* entry = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &entry, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      entry = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(entry);
  }();
  return function;
}

}  // namespace

CUtensorMap swizzled_tile_map(const void* base, Dtype element, int64_t width, int64_t rows, int64_t heads,
                              int box_rows) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = encode_function();
  if (encode == nullptr) throw RuntimeFailure("the CUDA driver has no cuTensorMapEncodeTiled (tensor maps need CUDA 12)");
  const cuuint64_t element_bytes = element == Dtype::fp32 ? 4 : 2;
  const cuuint64_t dims[3] = {cuuint64_t(width), cuuint64_t(rows), cuuint64_t(heads)};
  // Byte strides of dimensions 1 and 2 (dimension 0 is contiguous).
  const cuuint64_t strides[2] = {cuuint64_t(width) * element_bytes, cuuint64_t(width * rows) * element_bytes};
  const cuuint32_t box[3] = {cuuint32_t(128 / element_bytes), cuuint32_t(box_rows), 1};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  CUtensorMap map;
  const CUresult result =
      encode(&map,
             element == Dtype::fp32   ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
             : element == Dtype::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                      : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
             3,
             const_cast<void*>(base), dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
             CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS)
    throw RuntimeFailure(fmt::format("cuTensorMapEncodeTiled refused a [{}][{}][{}] tensor at {} (CUresult {})", heads,
                                     rows, width, base, int(result)));
  return map;
}

}  // namespace flashbench::cuda
