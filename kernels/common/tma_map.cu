// The tensor-map encoder of tma_map.hpp.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <string>

#include "core/error.hpp"
#include "kernels/common/tma_map.hpp"

namespace attn {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      f = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// The encoder's call for both element sizes; `what` names the caller in errors.
CUtensorMap encode_tiled(const char* what, CUtensorMapDataType type, const void* base, int rank, const uint64_t* dims,
                         const uint64_t* strides, const uint32_t* box,
                         TmaL2Promotion promotion = TmaL2Promotion::bytes256) {
  const auto encode = encoder();
  if (encode == nullptr) throw RuntimeError(std::string(what) + ": the driver has no cuTensorMapEncodeTiled");
  CUtensorMap map{};
  if (rank < 2 || rank > 4) throw RuntimeError(std::string(what) + ": rank " + std::to_string(rank) + " (2 to 4)");
  cuuint64_t d[4] = {}, s[3] = {};
  cuuint32_t b[4] = {}, e[4] = {1, 1, 1, 1};
  for (int i = 0; i < rank; ++i) {
    d[i] = dims[i];
    b[i] = box[i];
    if (i + 1 < rank) s[i] = strides[i];
  }
  const CUresult r = encode(&map, type, static_cast<cuuint32_t>(rank), const_cast<void*>(base), d, s, b, e,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            promotion == TmaL2Promotion::bytes128 ? CU_TENSOR_MAP_L2_PROMOTION_L2_128B
                                                                  : CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::string shape;
    for (int i = 0; i < rank; ++i) shape += (i ? " x " : "") + std::to_string(dims[i]);
    throw RuntimeError(std::string(what) + ": cuTensorMapEncodeTiled failed (" + std::to_string(static_cast<int>(r)) +
                       ") for a tensor of " + shape + " elements");
  }
  return map;
}

}  // namespace

CUtensorMap make_tensor_map_16bit(const void* base, int rank, const uint64_t* dims, const uint64_t* strides,
                                  const uint32_t* box, bool fp16, TmaL2Promotion promotion) {
  return encode_tiled("make_tensor_map_16bit", fp16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                      base, rank, dims, strides, box, promotion);
}

CUtensorMap make_tensor_map_8bit(const void* base, int rank, const uint64_t* dims, const uint64_t* strides,
                                 const uint32_t* box) {
  return encode_tiled("make_tensor_map_8bit", CU_TENSOR_MAP_DATA_TYPE_UINT8, base, rank, dims, strides, box);
}

}  // namespace attn
