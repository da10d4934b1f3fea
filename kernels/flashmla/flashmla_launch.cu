// Dispatch of the FLASHMLA decode kernel from the runtime dtype to its instantiation.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

#include "core/error.hpp"
#include "kernels/flashmla/flashmla_launch.hpp"

namespace attn {
namespace mla {
template <class Element>
void run_flashmla_decode(const FlashMlaDecodeParams& p, cudaStream_t stream);
}  // namespace mla

void launch_flashmla_decode(const FlashMlaDecodeParams& p, DType dtype, cudaStream_t stream) {
  if (p.q_len < 1 || p.q_len > 2) throw RuntimeError("launch_flashmla_decode: q_len must be 1 or 2");
  if (p.num_parts == 0 || p.batch == 0) return;
  if (dtype == DType::bf16) {
    mla::run_flashmla_decode<__nv_bfloat16>(p, stream);
  } else if (dtype == DType::f16) {
    mla::run_flashmla_decode<__half>(p, stream);
  } else {
    throw RuntimeError("launch_flashmla_decode: dtype must be fp16 or bf16, got " + std::string(to_string(dtype)));
  }
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    throw RuntimeError(std::string("flashmla_decode_kernel launch failed: ") + cudaGetErrorString(err));
}

}  // namespace attn
