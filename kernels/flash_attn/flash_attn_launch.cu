// The FLASH_ATTN selector and the dispatch from runtime configuration to instantiation.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "core/env.hpp"
#include "core/error.hpp"
#include "kernels/common/pdl_launch.hpp"
#include "kernels/flash_attn/flash_attn_launch.hpp"
#include "kernels/flash_attn/flash_fwd_sm90.hpp"
#include "kernels/flash_attn/flash_fwd_traits.cuh"

namespace attn {
namespace {

bool head_size_compiled(int d) {
#if defined(ATTN_QUICK_BUILD)
  return d == 128 || d == 192;  // 192: FLASHMLA's prefill
#else
  return d == 64 || d == 96 || d == 128 || d == 192 || d == 256;
#endif
}

template <int D, class Element>
void dispatch_kv(const FlashAttnParams& p, bool fp8, bool decode, bool spec, cudaStream_t s) {
  if constexpr (D == 64 || D == 128) {
    if (spec) return fa::run_flash_fwd<D, Element, false, true, true>(p, s);
  }
  if (fp8) {
    decode ? fa::run_flash_fwd<D, Element, true, true>(p, s) : fa::run_flash_fwd<D, Element, true, false>(p, s);
  } else {
    decode ? fa::run_flash_fwd<D, Element, false, true>(p, s) : fa::run_flash_fwd<D, Element, false, false>(p, s);
  }
}

template <int D>
void dispatch_dtype(const FlashAttnParams& p, DType dtype, bool fp8, bool decode, bool spec, cudaStream_t s) {
  if (dtype == DType::f16) {
    dispatch_kv<D, __half>(p, fp8, decode, spec, s);
  } else {
    dispatch_kv<D, __nv_bfloat16>(p, fp8, decode, spec, s);
  }
}

template <int D, class Element>
int ctas_per_sm_kv(bool fp8, bool decode, bool spec) {
  if constexpr (D == 64 || D == 128) {
    if (spec) return fa::flash_fwd_ctas_per_sm<D, Element, false, true, true>();
  }
  if (fp8) return decode ? fa::flash_fwd_ctas_per_sm<D, Element, true, true>() : fa::flash_fwd_ctas_per_sm<D, Element, true, false>();
  return decode ? fa::flash_fwd_ctas_per_sm<D, Element, false, true>() : fa::flash_fwd_ctas_per_sm<D, Element, false, false>();
}

template <int D>
int ctas_per_sm_dtype(DType dtype, bool fp8, bool decode, bool spec) {
  return dtype == DType::f16 ? ctas_per_sm_kv<D, __half>(fp8, decode, spec)
                             : ctas_per_sm_kv<D, __nv_bfloat16>(fp8, decode, spec);
}

// FwdTraits::kMaxClusterSplits of the decode tiling (its sizes do not depend on the 16-bit dtype).
template <int D>
int max_cluster_splits(bool fp8) {
  return fp8 ? fa::FwdTraits<D, __half, true, true>::kMaxClusterSplits
             : fa::FwdTraits<D, __half, false, true>::kMaxClusterSplits;
}

// The sm_90a kernel exists for head sizes 64, 96, 128, 192 and 256 (the quick build keeps 128 and 192).
bool sm90_compiled_for(int d) {
  switch (d) {
#if !defined(ATTN_QUICK_BUILD)
    case 64: return fa::sm90_prefill_compiled<64>();
    case 96: return fa::sm90_prefill_compiled<96>();
    case 256: return fa::sm90_prefill_compiled<256>();
#endif
    case 128: return fa::sm90_prefill_compiled<128>();
    case 192: return fa::sm90_prefill_compiled<192>();
    default: return false;
  }
}

template <int D>
FlashAttnTiling tiling_of(int max_packed_rows) {
  using Decode = fa::FwdTraits<D, __half, false, true>;
  using Prefill = fa::FwdTraits<D, __half, false, false>;
  if (max_packed_rows <= Decode::kBlockM) return {true, Decode::kBlockM, Decode::kBlockN, Decode::kBlockM};
  return {false, Prefill::kBlockM, Prefill::kBlockN, Decode::kBlockM};
}

// The MLA prefill's attention: Q K^T over 192 dims, V and O of 128 (sm_90a kernel only).
bool qk192_v128(const FlashAttnConfig& c) { return c.head_size_qk == 192 && c.head_size_v == 128; }

}  // namespace

std::string flash_attn_unsupported_reason(const FlashAttnConfig& c) {
  if (c.use_mla) return "MLA layers are served by FLASHMLA, not FLASH_ATTN";
  if (c.dtype != DType::f16 && c.dtype != DType::bf16)
    return "model dtype " + std::string(to_string(c.dtype)) + " not supported (fp16 or bf16 only)";
  if (c.kv_dtype != c.dtype && !is_fp8(c.kv_dtype))
    return "kv cache dtype " + std::string(to_string(c.kv_dtype)) + " must equal the model dtype or be fp8";
  if (c.head_size_qk != c.head_size_v && !(qk192_v128(c) && flash_attn_sm90_available(c)))
    return "head_size_qk " + std::to_string(c.head_size_qk) + " != head_size_v " + std::to_string(c.head_size_v) +
           (qk192_v128(c) ? " runs on the sm_90a kernel only (a 16-bit cache, a compute capability 9.0 device)" : "");
  const int d = c.head_size_qk;
  if (d != 64 && d != 96 && d != 128 && d != 192 && d != 256)
    return "head size " + std::to_string(d) + " not supported (64, 96, 128, 192, 256)";
  if (!head_size_compiled(d))
    return "head size " + std::to_string(d) + " not compiled in this build (ATTN_QUICK_BUILD keeps 128 and 192)";
  if (c.block_size <= 0 || c.block_size % 16 != 0)
    return "block size " + std::to_string(c.block_size) + " not supported (a multiple of 16)";
  if (c.layout != KvLayout::NHD) return "kv layout HND not supported (the FA cache is NHD)";
  if (c.num_kv_heads <= 0 || c.num_q_heads % c.num_kv_heads != 0)
    return "num_q_heads " + std::to_string(c.num_q_heads) + " is not a multiple of num_kv_heads " +
           std::to_string(c.num_kv_heads);
  return {};
}

FlashAttnTiling flash_attn_tiling(int head_size, int max_packed_rows) {
  switch (head_size) {
    case 64: return tiling_of<64>(max_packed_rows);
    case 96: return tiling_of<96>(max_packed_rows);
    case 128: return tiling_of<128>(max_packed_rows);
    case 192: return tiling_of<192>(max_packed_rows);
    case 256: return tiling_of<256>(max_packed_rows);
    default: throw RuntimeError("flash_attn_tiling: head size " + std::to_string(head_size) + " not supported");
  }
}

bool flash_attn_sm90_available(const FlashAttnConfig& c) {
  // ATTN_FA_SM90=0 keeps the mma.sync kernel (A/B timing in one binary).
  static const bool enabled = ab_switch_on("ATTN_FA_SM90");
  // A cache of the model dtype, or an fp8 one (the producer widens it to fp16).
  const bool cache_ok = c.kv_dtype == c.dtype || is_fp8(c.kv_dtype);
  // qk 192 / v 128 (the MLA prefill): a 16-bit cache; ATTN_FA_SM90_V128=0 turns it off, so the
  // MLA prefill pads V to 192 instead (A/B timing).
  static const bool v128 = ab_switch_on("ATTN_FA_SM90_V128");
  const bool heads_ok = c.head_size_qk == c.head_size_v || (qk192_v128(c) && v128 && c.kv_dtype == c.dtype);
  return enabled && heads_ok && !c.use_mla && cache_ok &&
         (c.dtype == DType::bf16 || c.dtype == DType::f16) && sm90_compiled_for(c.head_size_qk);
}

Sm90Passes flash_attn_sm90_passes(const FlashAttnConfig& c) {
  static const Sm90Passes with_decodes = [] {
    const char* v = std::getenv("ATTN_FA_SM90_DECODE");
    if (v != nullptr && std::strcmp(v, "all") == 0) return Sm90Passes::all;
    return ab_switch_on("ATTN_FA_SM90_DECODE") ? Sm90Passes::mixed : Sm90Passes::prefills;
  }();
  if (!flash_attn_sm90_available(c)) return Sm90Passes::none;
  return is_fp8(c.kv_dtype) ? Sm90Passes::prefills : with_decodes;
}

bool flash_attn_spec_tiles(const FlashAttnConfig& c) {
  static const bool enabled = ab_switch_on("ATTN_FA_SPEC_TILES");
  const int d = c.head_size_qk;
  return enabled && flash_attn_unsupported_reason(c).empty() && c.kv_dtype == c.dtype && !c.use_mla &&
         c.head_size_v == d && (d == 64 || d == 128);
}

bool flash_attn_uses_sm90(const FlashAttnConfig& c, const FlashAttnTiling& t) {
  // The planner's sm_90a tiles (flash_attn_pass_tiling), of the rows this kernel's instantiation
  // for the launch takes.
  return !t.decode && t.sm90_tiles && t.block_m == sm90_block_m(c.head_size_qk, t.small_seqs) &&
         flash_attn_sm90_available(c);
}

bool flash_attn_uses_fp8_mma(const FlashAttnConfig& c, const FlashAttnTiling& t) {
  static const bool enabled = ab_switch_on("ATTN_FA_FP8_MMA");
  return enabled && c.q_fp8 && c.kv_dtype == DType::fp8_e4m3 && c.head_size_qk == 128 && flash_attn_uses_sm90(c, t);
}

int flash_attn_ctas_per_sm(const FlashAttnConfig& c, const FlashAttnTiling& t) {
  if (!flash_attn_unsupported_reason(c).empty()) return 0;
  // The persistent sm_90a kernel runs one CTA per SM. Passes with decode-sized sequences count
  // that (16 x 32k decodes unsplit instead of in 2: 744.5 -> 720.7 us; 16 x 2 tokens at 4k 109.2 ->
  // 105.4 us); prefill passes keep 2, the rule they were measured with.
  if (flash_attn_uses_sm90(c, t)) return t.small_seqs ? 1 : 2;
  const bool fp8 = is_fp8(c.kv_dtype);
  switch (c.head_size_qk) {
#if !defined(ATTN_QUICK_BUILD)
    case 64: return ctas_per_sm_dtype<64>(c.dtype, fp8, t.decode, t.spec);
    case 96: return ctas_per_sm_dtype<96>(c.dtype, fp8, t.decode, t.spec);
    case 256: return ctas_per_sm_dtype<256>(c.dtype, fp8, t.decode, t.spec);
#endif
    case 128: return ctas_per_sm_dtype<128>(c.dtype, fp8, t.decode, t.spec);
    case 192: return ctas_per_sm_dtype<192>(c.dtype, fp8, t.decode, t.spec);
    default: return 0;
  }
}

bool flash_attn_cluster_merge(const FlashAttnConfig& c, const FlashAttnTiling& t, int num_splits) {
  static const bool enabled = ab_switch_on("ATTN_FA_CLUSTER_MERGE");
  // Two splits only: with four (decode 8 x 16k, 64 tiles) the clustered launch ran 244 us against
  // 189 with partials and the merge kernel (docs/PERF_NOTES.md Version 30); with two it gains.
  if (!enabled || !t.decode || t.spec || num_splits != 2 || !flash_attn_unsupported_reason(c).empty() ||
      flash_attn_uses_sm90(c, t) || !kern::pdl_supported() ||  // clusters: compute capability 9.0 on, as PDL
      !sm90_compiled_for(c.head_size_qk))  // split 1's hand-off waits on an mbarrier: the sm_90a device pass
    return false;
  const bool fp8 = is_fp8(c.kv_dtype);
  switch (c.head_size_qk) {
#if !defined(ATTN_QUICK_BUILD)
    case 64: return num_splits <= max_cluster_splits<64>(fp8);
    case 96: return num_splits <= max_cluster_splits<96>(fp8);
    case 256: return num_splits <= max_cluster_splits<256>(fp8);
#endif
    case 128: return num_splits <= max_cluster_splits<128>(fp8);
    case 192: return num_splits <= max_cluster_splits<192>(fp8);
    default: return false;
  }
}

bool flash_attn_sm90_fused_write(const FlashAttnConfig& c, const FlashAttnTiling& t) {
  static const bool enabled = ab_switch_on("ATTN_FA_FUSED_PREFILL_WRITE");
  return enabled && flash_attn_uses_sm90(c, t) && !t.small_seqs && c.kv_dtype == c.dtype &&
         (c.head_size_qk == 64 || c.head_size_qk == 128) && c.head_size_v == c.head_size_qk;
}

void launch_flash_attn_fwd(const FlashAttnParams& p, const FlashAttnConfig& c, const FlashAttnTiling& t,
                           cudaStream_t stream) {
  if (const std::string why = flash_attn_unsupported_reason(c); !why.empty())
    throw RuntimeError("launch_flash_attn_fwd: " + why);
  if (p.num_tiles == 0) return;
  if (p.split_cluster != 0 && !flash_attn_cluster_merge(c, t, p.num_splits))
    throw RuntimeError("launch_flash_attn_fwd: split_cluster set for a launch whose " + std::to_string(p.num_splits) +
                       " splits cannot merge in a cluster (flash_attn_cluster_merge)");
  const bool fp8 = is_fp8(c.kv_dtype);
  const bool sm90 = flash_attn_uses_sm90(c, t);
  if (t.spec && !(t.decode && flash_attn_spec_tiles(c)))
    throw RuntimeError("launch_flash_attn_fwd: spec tiles asked for a layer they do not serve (flash_attn_spec_tiles)");
  if (!sm90 && c.head_size_qk != c.head_size_v)
    throw RuntimeError("launch_flash_attn_fwd: head_size_qk != head_size_v needs the sm_90a kernel's tiles (not selected)");
  if (p.fused_cache_write != 0 && !sm90 &&
      (!t.decode || c.kv_dtype != c.dtype || p.after_cache_write != 0 || c.head_size_qk < 128))
    throw RuntimeError("launch_flash_attn_fwd: the fused cache write needs the decode tiling over a cache of the model dtype, "
                       "with no write ahead, or the sm_90a prefill");
  if (p.fused_cache_write != 0 && sm90 && (!flash_attn_sm90_fused_write(c, t) || p.slot_mapping == nullptr))
    throw RuntimeError("launch_flash_attn_fwd: the sm_90a fused cache write needs a prefill launch over a cache of the "
                       "model dtype at head size 64 or 128, and the step's slots (flash_attn_sm90_fused_write)");
  if (!sm90 && (p.block_table_indptr != nullptr || p.lse_base2 != 0))
    throw RuntimeError("launch_flash_attn_fwd: CSR block tables and base-2 LSEs need the sm_90a kernel (not selected)");
  if (sm90) {
    const bool fp16 = c.dtype == DType::f16;
    const bool fp8_mma = flash_attn_uses_fp8_mma(c, t);
    if (fp8_mma && !(p.q_scale > 0.f))
      throw RuntimeError("launch_flash_attn_fwd: fp8 tensor cores need the query scale (q_scale > 0)");
#if !defined(ATTN_QUICK_BUILD)
    if (c.head_size_qk == 64) fa::run_flash_fwd_sm90<64>(p, fp16, fp8, false, t.small_seqs, stream);
    if (c.head_size_qk == 96) fa::run_flash_fwd_sm90<96>(p, fp16, fp8, false, t.small_seqs, stream);
    if (c.head_size_qk == 256) fa::run_flash_fwd_sm90<256>(p, fp16, fp8, false, t.small_seqs, stream);
#endif
    if (c.head_size_qk == 128) fa::run_flash_fwd_sm90<128>(p, fp16, fp8, fp8_mma, t.small_seqs, stream);
    if (c.head_size_qk == 192 && c.head_size_v == 128) fa::run_flash_fwd_sm90<192, 128>(p, fp16, fp8, false, false, stream);
    if (c.head_size_qk == 192 && c.head_size_v == 192) fa::run_flash_fwd_sm90<192>(p, fp16, fp8, false, t.small_seqs, stream);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess)
      throw RuntimeError(std::string("flash_fwd_sm90_kernel launch failed: ") + cudaGetErrorString(err));
    return;
  }
  switch (c.head_size_qk) {
#if !defined(ATTN_QUICK_BUILD)
    case 64: dispatch_dtype<64>(p, c.dtype, fp8, t.decode, t.spec, stream); break;
    case 96: dispatch_dtype<96>(p, c.dtype, fp8, t.decode, t.spec, stream); break;
    case 256: dispatch_dtype<256>(p, c.dtype, fp8, t.decode, t.spec, stream); break;
#endif
    case 128: dispatch_dtype<128>(p, c.dtype, fp8, t.decode, t.spec, stream); break;
    case 192: dispatch_dtype<192>(p, c.dtype, fp8, t.decode, t.spec, stream); break;
    default: throw RuntimeError("launch_flash_attn_fwd: head size not compiled");
  }
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    throw RuntimeError(std::string("flash_fwd_kernel launch failed: ") + cudaGetErrorString(err));
}

}  // namespace attn
