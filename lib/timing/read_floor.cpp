// CPU builds: no device, no floor (read_floor_cuda.cpp measures it in CUDA builds).
#include "timing/read_floor.hpp"

#if !defined(ATTN_WITH_CUDA)
namespace attn {

ReadFloor measure_read_floor(double /*bytes*/) { return {-1, "built without CUDA"}; }

}  // namespace attn
#endif
