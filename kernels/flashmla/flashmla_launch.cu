// Dispatch of the FLASHMLA decode kernels from the runtime dtype, shape and kernel choice to
// their instantiations (FlashMlaKernel in flashmla_params.hpp says which runs where).
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.hpp"
#include "kernels/common/tma_map.hpp"
#include "kernels/flashmla/flashmla_launch.hpp"

namespace attn {
namespace mla {
template <class Element>
void run_flashmla_decode(const FlashMlaDecodeParams& p, cudaStream_t stream);
namespace sm90 {
template <class Element>
void run_flashmla_decode_sm90(const FlashMlaDecodeParams& p, const CUtensorMap& tm_kv, const CUtensorMap& tm_q,
                              cudaStream_t stream);
template <class Element>
bool flashmla_sm90_compiled();
}  // namespace sm90
}  // namespace mla

namespace {

template <class Element>
void run(const FlashMlaDecodeParams& p, bool fp16, FlashMlaKernel kernel, cudaStream_t stream) {
  if (flashmla_uses_sm90(p, fp16 ? DType::f16 : DType::bf16, kernel)) {
    // The latent cache as [num_blocks][64 slots][576]; the query as [batch * q_len * heads][576].
    const uint64_t kv_dims[3] = {kFlashMlaHeadDimK, kFlashMlaBlockN, static_cast<uint64_t>(p.num_cache_blocks)};
    const uint64_t kv_strides[2] = {kFlashMlaHeadDimK * 2, static_cast<uint64_t>(p.kv_block_stride) * 2};
    const uint32_t kv_box[3] = {64, kFlashMlaBlockN, 1};
    const uint64_t q_dims[2] = {kFlashMlaHeadDimK, static_cast<uint64_t>(p.batch) * p.q_len * p.num_heads};
    const uint64_t q_strides[1] = {kFlashMlaHeadDimK * 2};
    const uint32_t q_box[2] = {64, kFlashMlaBlockM};
    const CUtensorMap tm_kv = make_tensor_map_16bit(p.kv_cache, 3, kv_dims, kv_strides, kv_box, fp16);
    const CUtensorMap tm_q = make_tensor_map_16bit(p.q, 2, q_dims, q_strides, q_box, fp16);
    mla::sm90::run_flashmla_decode_sm90<Element>(p, tm_kv, tm_q, stream);
  } else {
    mla::run_flashmla_decode<Element>(p, stream);
  }
}

}  // namespace

bool flashmla_sm90_available(const FlashMlaDecodeParams& p, DType dtype) {
  if (p.num_cache_blocks <= 0) return false;
  return dtype == DType::f16 ? mla::sm90::flashmla_sm90_compiled<__half>()
                             : mla::sm90::flashmla_sm90_compiled<__nv_bfloat16>();
}

bool flashmla_uses_sm90(const FlashMlaDecodeParams& p, DType dtype, FlashMlaKernel kernel) {
  if (kernel == FlashMlaKernel::mma_sync) return false;
  if (kernel == FlashMlaKernel::wgmma) return true;  // launch checks that it can run
  // Automatic: the sm_90a kernel wherever it runs, 16 rows too (padded to 64: the rows past a
  // request are computed and never stored). Since its warpgroup 1 multiplies P0 first, it
  // streams a 16-head 64 x 4k decode in 116 us against mma.sync's 120 (128 x 8k: 408 either
  // way). ATTN_FLASHMLA_SM90=0 keeps mma.sync for A/B timing.
  static const bool never = [] {
    const char* v = std::getenv("ATTN_FLASHMLA_SM90");
    return v != nullptr && std::strcmp(v, "0") == 0;
  }();
  if (never) return false;
  return flashmla_sm90_available(p, dtype);
}

void launch_flashmla_decode(const FlashMlaDecodeParams& p, DType dtype, FlashMlaKernel kernel, cudaStream_t stream) {
  if (p.q_len < 1 || p.q_len > 2) throw RuntimeError("launch_flashmla_decode: q_len must be 1 or 2");
  if (kernel == FlashMlaKernel::wgmma && !flashmla_sm90_available(p, dtype))
    throw RuntimeError("launch_flashmla_decode: the wgmma kernel needs an sm_90 device, sm_90a in the build and the "
                       "cache's block count");
  if (p.num_parts == 0 || p.batch == 0) return;
  if (dtype == DType::bf16) {
    run<__nv_bfloat16>(p, false, kernel, stream);
  } else if (dtype == DType::f16) {
    run<__half>(p, true, kernel, stream);
  } else {
    throw RuntimeError("launch_flashmla_decode: dtype must be fp16 or bf16, got " + std::string(to_string(dtype)));
  }
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    throw RuntimeError(std::string("flashmla decode kernel launch failed: ") + cudaGetErrorString(err));
}

}  // namespace attn
