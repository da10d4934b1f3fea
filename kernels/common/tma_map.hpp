#pragma once
// Host side of the bulk tensor copies (kernels/common/tma.cuh): a CUtensorMap for a row-major
// 16-bit or 8-bit tensor, 128-byte swizzle, boxes of 128 bytes (64 or 128 elements) along the
// innermost dimension.
// The driver's encoder is reached through the runtime (cudaGetDriverEntryPointByVersion), so
// nothing links against libcuda.
#include <cuda.h>

#include <cstdint>

namespace attn {

// rank 2 to 4. dims[0] is the innermost (contiguous) extent in elements; strides[i] is the byte
// distance between consecutive indices of dimension i + 1 (multiples of 16). box[i] elements per
// dimension (box[0] = 64). fp16 selects the element type (else bf16). Throws RuntimeError when
// the driver refuses the map, naming the shape.
CUtensorMap make_tensor_map_16bit(const void* base, int rank, const uint64_t* dims, const uint64_t* strides,
                                  const uint32_t* box, bool fp16);
// The same for 8-bit codes (an fp8 cache, moved as bytes): box[0] = 128.
CUtensorMap make_tensor_map_8bit(const void* base, int rank, const uint64_t* dims, const uint64_t* strides,
                                 const uint32_t* box);

}  // namespace attn
