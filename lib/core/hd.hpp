#pragma once
// ATTN_HD marks functions that both the host compiler and nvcc's device pass compile, so the
// batch generator, dtype conversions and the reference see bit-identical values on either side.
// Headers using it include nothing from the C++ standard library beyond <cstdint>/<cstring>.
#if defined(__CUDACC__)
#define ATTN_HD __host__ __device__ __forceinline__
#else
#define ATTN_HD inline
#endif
