// Builds without CUDA have no ceilings to measure; CUDA builds define
// measure_device_ceilings() in ceilings_cuda.cpp.
#include "timing/ceilings.hpp"

#if !defined(ATTN_WITH_CUDA)
#include "core/error.hpp"

namespace attn {

DeviceCeilings measure_device_ceilings() { throw RuntimeError("device ceilings: built without CUDA"); }

}  // namespace attn
#endif
