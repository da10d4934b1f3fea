// Dispatch of the FLASHMLA decode kernels from the runtime dtype, shape and kernel choice to
// their instantiations (FlashMlaKernel in flashmla_params.hpp says which runs where).
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

#include "core/env.hpp"
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
template <class Element, int kN>
void run_flashmla_decode_sm90_narrow(const FlashMlaDecodeParams& p, const CUtensorMap& tm_kv, const CUtensorMap& tm_q,
                                     cudaStream_t stream);
template <class Element>
bool flashmla_sm90_compiled();
}  // namespace sm90
}  // namespace mla

namespace {

enum class Chosen { mma_sync, wgmma, narrow };

Chosen choose(const FlashMlaDecodeParams& p, DType dtype, FlashMlaKernel kernel) {
  switch (kernel) {
    case FlashMlaKernel::mma_sync: return Chosen::mma_sync;
    case FlashMlaKernel::wgmma: return Chosen::wgmma;  // launch checks that they can run
    case FlashMlaKernel::wgmma_narrow: return Chosen::narrow;
    case FlashMlaKernel::automatic: break;
  }
  // Automatic: the sm_90a kernels wherever they run. Up to 32 packed rows the narrow one (keys as
  // the MMA rows: the seesaw kernel pads such a request to 64 rows and computes 4 x its products);
  // ATTN_FLASHMLA_NARROW=0 keeps the seesaw kernel there, ATTN_FLASHMLA_SM90=0 mma.sync everywhere.
  static const bool never = !ab_switch_on("ATTN_FLASHMLA_SM90");
  static const bool no_narrow = !ab_switch_on("ATTN_FLASHMLA_NARROW");
  if (never || !flashmla_sm90_available(p, dtype)) return Chosen::mma_sync;
  return p.q_len * p.num_heads <= kFlashMlaNarrowMaxRows && !no_narrow ? Chosen::narrow : Chosen::wgmma;
}

template <class Element>
void run(const FlashMlaDecodeParams& p, bool fp16, Chosen chosen, cudaStream_t stream) {
  if (chosen == Chosen::mma_sync) return mla::run_flashmla_decode<Element>(p, stream);
  // The latent cache as [num_blocks][64 slots][576]; the query as [batch * q_len * heads][576],
  // in boxes of 64 rows (the seesaw kernel's tile) or of the narrow kernel's N (16 or 32).
  const int rows = p.q_len * p.num_heads;
  const int narrow_n = rows <= 16 ? 16 : 32;
  const uint64_t kv_dims[3] = {kFlashMlaHeadDimK, kFlashMlaBlockN, static_cast<uint64_t>(p.num_cache_blocks)};
  const uint64_t kv_strides[2] = {kFlashMlaHeadDimK * 2, static_cast<uint64_t>(p.kv_block_stride) * 2};
  const uint32_t kv_box[3] = {64, kFlashMlaBlockN, 1};
  const uint64_t q_dims[2] = {kFlashMlaHeadDimK, static_cast<uint64_t>(p.batch) * rows};
  const uint64_t q_strides[1] = {kFlashMlaHeadDimK * 2};
  const uint32_t q_box[2] = {64, static_cast<uint32_t>(chosen == Chosen::narrow ? narrow_n : kFlashMlaBlockM)};
  // 128-byte L2 promotion: a block's 9 boxes are its rows' 128-byte columns, and 256 bytes fetched
  // each row with the next box's column (16 heads: 128 x 8k 297.9 -> 279.7 us, 64 x 4k 85.9 ->
  // 80.6 on an H200; docs/PERF_NOTES.md, FLASHMLA, fifty-fourth session). ATTN_FLASHMLA_PROMOTION_128=0
  // restores 256 bytes, for A/B.
  static const TmaL2Promotion promotion =
      ab_switch_on("ATTN_FLASHMLA_PROMOTION_128") ? TmaL2Promotion::bytes128 : TmaL2Promotion::bytes256;
  const CUtensorMap tm_kv = make_tensor_map_16bit(p.kv_cache, 3, kv_dims, kv_strides, kv_box, fp16, promotion);
  const CUtensorMap tm_q = make_tensor_map_16bit(p.q, 2, q_dims, q_strides, q_box, fp16, promotion);
  if (chosen == Chosen::wgmma) {
    mla::sm90::run_flashmla_decode_sm90<Element>(p, tm_kv, tm_q, stream);
  } else if (narrow_n == 16) {
    mla::sm90::run_flashmla_decode_sm90_narrow<Element, 16>(p, tm_kv, tm_q, stream);
  } else {
    mla::sm90::run_flashmla_decode_sm90_narrow<Element, 32>(p, tm_kv, tm_q, stream);
  }
}

}  // namespace

bool flashmla_sm90_available(const FlashMlaDecodeParams& p, DType dtype) {
  if (p.num_cache_blocks <= 0) return false;
  return dtype == DType::f16 ? mla::sm90::flashmla_sm90_compiled<__half>()
                             : mla::sm90::flashmla_sm90_compiled<__nv_bfloat16>();
}

const char* flashmla_decode_kernel_name(const FlashMlaDecodeParams& p, DType dtype, FlashMlaKernel kernel) {
  switch (choose(p, dtype, kernel)) {
    case Chosen::mma_sync: return "mma.sync";
    case Chosen::wgmma: return "wgmma";
    case Chosen::narrow: return "wgmma.narrow";
  }
  return "?";
}

bool launch_flashmla_decode(const FlashMlaDecodeParams& p, DType dtype, FlashMlaKernel kernel, cudaStream_t stream) {
  if (p.q_len < 1 || p.q_len > 2) throw RuntimeError("launch_flashmla_decode: q_len must be 1 or 2");
  if ((kernel == FlashMlaKernel::wgmma || kernel == FlashMlaKernel::wgmma_narrow) && !flashmla_sm90_available(p, dtype))
    throw RuntimeError("launch_flashmla_decode: the wgmma kernels need an sm_90 device, sm_90a in the build and the "
                       "cache's block count");
  if (kernel == FlashMlaKernel::wgmma_narrow && p.q_len * p.num_heads > kFlashMlaNarrowMaxRows)
    throw RuntimeError("launch_flashmla_decode: the narrow wgmma kernel serves at most " +
                       std::to_string(kFlashMlaNarrowMaxRows) + " query rows per request (q_len x heads), got " +
                       std::to_string(p.q_len * p.num_heads));
  if (p.num_parts == 0 || p.batch == 0) return false;
  const Chosen chosen = choose(p, dtype, kernel);
  if (dtype == DType::bf16) {
    run<__nv_bfloat16>(p, false, chosen, stream);
  } else if (dtype == DType::f16) {
    run<__half>(p, true, chosen, stream);
  } else {
    throw RuntimeError("launch_flashmla_decode: dtype must be fp16 or bf16, got " + std::string(to_string(dtype)));
  }
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    throw RuntimeError(std::string("flashmla decode kernel launch failed: ") + cudaGetErrorString(err));
  return chosen == Chosen::wgmma && p.merge_counters != nullptr;
}

}  // namespace attn
