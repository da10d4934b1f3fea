#pragma once
// Host side of the bulk tensor copies (kernels/common/tma.cuh): a CUtensorMap for a row-major
// 16-bit or 8-bit tensor, 128-byte swizzle, boxes of 128 bytes (64 or 128 elements) along the
// innermost dimension.
// The driver's encoder is reached through the runtime (cudaGetDriverEntryPointByVersion), so
// nothing links against libcuda.
#include <cuda.h>

#include <cstdint>

namespace attn {

// The L2 promotion of a map's requests: how much L2 fetches for each 128-byte box row. 256 bytes
// is the default; 128 bytes fetches exactly a row. Where a box row's 256-byte neighbour is another
// box's column (FLASHMLA's cache blocks: rows of 1152 bytes cut into 9 columns of 128), 256 bytes
// streamed ~10 % slower on an H200 (docs/PERF_NOTES.md, FLASHMLA, fifty-fourth session).
enum class TmaL2Promotion { bytes128, bytes256 };

// rank 2 to 4. dims[0] is the innermost (contiguous) extent in elements; strides[i] is the byte
// distance between consecutive indices of dimension i + 1 (multiples of 16). box[i] elements per
// dimension (box[0] = 64). fp16 selects the element type (else bf16). Throws RuntimeError when
// the driver refuses the map, naming the shape.
CUtensorMap make_tensor_map_16bit(const void* base, int rank, const uint64_t* dims, const uint64_t* strides,
                                  const uint32_t* box, bool fp16,
                                  TmaL2Promotion promotion = TmaL2Promotion::bytes256);
// The same for 8-bit codes (an fp8 cache, moved as bytes): box[0] = 128.
CUtensorMap make_tensor_map_8bit(const void* base, int rank, const uint64_t* dims, const uint64_t* strides,
                                 const uint32_t* box);

}  // namespace attn
