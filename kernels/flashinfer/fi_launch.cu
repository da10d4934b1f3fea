// The FLASHINFER selector and the dispatch from runtime configuration to instantiation. The
// instantiations live in fi_decode_hd<N>.cu and fi_prefill_hd<N>.cu; this file only declares them.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

#include "core/error.hpp"
#include "kernels/flashinfer/fi_launch.hpp"

namespace attn {
namespace fi {
template <int kHeadDim, class Element, bool kKvFp8, int kGroup>
void run_fi_decode(const FiAttentionParams& p, int grid_work, cudaStream_t stream);
template <int kHeadDim, class Element, bool kKvFp8, int kGroup>
int fi_decode_occupancy();
template <int kHeadDim, class Element, bool kKvFp8, int kTileQ>
void run_fi_prefill(const FiAttentionParams& p, int grid_work, cudaStream_t stream);
}  // namespace fi

namespace {

bool head_dim_compiled(int d) {
#if defined(ATTN_QUICK_BUILD)
  return d == 128;
#else
  return d == 64 || d == 128 || d == 256;
#endif
}

// Runtime configuration -> instantiation: Op<D, Element, Fp8>::run(args...).
template <template <int, class, bool> class Op, class... Args>
auto dispatch(const FiKernelConfig& c, Args&&... args) {
  const bool fp8 = is_fp8(c.kv_dtype);
  const bool f16 = c.dtype == DType::f16;
#define ATTN_FI_BY_DTYPE(D)                                                                  \
  return f16 ? (fp8 ? Op<D, __half, true>::run(args...) : Op<D, __half, false>::run(args...)) \
             : (fp8 ? Op<D, __nv_bfloat16, true>::run(args...) : Op<D, __nv_bfloat16, false>::run(args...))
  switch (c.head_dim) {
#if !defined(ATTN_QUICK_BUILD)
    case 64: ATTN_FI_BY_DTYPE(64);
    case 256: ATTN_FI_BY_DTYPE(256);
#endif
    default: ATTN_FI_BY_DTYPE(128);
  }
#undef ATTN_FI_BY_DTYPE
}

template <int D, class E, bool F>
struct DecodeOccupancy {
  static int run(int group) {
    switch (group) {
      case 1: return fi::fi_decode_occupancy<D, E, F, 1>();
      case 2: return fi::fi_decode_occupancy<D, E, F, 2>();
      case 3: return fi::fi_decode_occupancy<D, E, F, 3>();
      default: return fi::fi_decode_occupancy<D, E, F, 4>();
    }
  }
};

template <int D, class E, bool F>
struct DecodeLaunch {
  static int run(const FiAttentionParams& p, int group, int grid_work, cudaStream_t s) {
    switch (group) {
      case 1: fi::run_fi_decode<D, E, F, 1>(p, grid_work, s); break;
      case 2: fi::run_fi_decode<D, E, F, 2>(p, grid_work, s); break;
      case 3: fi::run_fi_decode<D, E, F, 3>(p, grid_work, s); break;
      default: fi::run_fi_decode<D, E, F, 4>(p, grid_work, s); break;
    }
    return 0;
  }
};

template <int D, class E, bool F>
struct PrefillLaunch {
  static int run(const FiAttentionParams& p, int grid_work, cudaStream_t s) {
    if (p.cta_tile_q == 16) {
      fi::run_fi_prefill<D, E, F, 16>(p, grid_work, s);
    } else if (p.cta_tile_q == 64) {
      fi::run_fi_prefill<D, E, F, 64>(p, grid_work, s);
    } else if constexpr (D != 256) {
      fi::run_fi_prefill<D, E, F, 128>(p, grid_work, s);
    }
    return 0;
  }
};

void check_launch(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw RuntimeError(std::string(what) + " launch failed: " + cudaGetErrorString(err));
}

void require_supported(const FiKernelConfig& c) {
  const std::string why = fi_unsupported_reason(c);
  if (!why.empty()) throw RuntimeError("FLASHINFER cannot run this configuration: " + why);
}

}  // namespace

std::string fi_unsupported_reason(const FiKernelConfig& c) {
  if (c.dtype != DType::f16 && c.dtype != DType::bf16)
    return "model dtype " + std::string(to_string(c.dtype)) + " not supported (fp16 or bf16 only)";
  if (c.kv_dtype != c.dtype && !is_fp8(c.kv_dtype))
    return "kv cache dtype " + std::string(to_string(c.kv_dtype)) + " must equal the model dtype or be fp8";
  if (c.head_dim != 64 && c.head_dim != 128 && c.head_dim != 256)
    return "head size " + std::to_string(c.head_dim) + " is not supported by FlashInfer (64, 128, 256)";
  if (!head_dim_compiled(c.head_dim))
    return "head size " + std::to_string(c.head_dim) + " not compiled in this build (ATTN_QUICK_BUILD keeps 128)";
  if (c.group < 1) return "num_qo_heads is not a multiple of num_kv_heads";
  return {};
}

bool fi_decode_uses_tensor_cores(int group) { return group > 4; }

int fi_decode_blocks_per_sm(const FiKernelConfig& c) {
  require_supported(c);
  if (fi_decode_uses_tensor_cores(c.group)) return 1;
  return dispatch<DecodeOccupancy>(c, c.group);
}

void launch_fi_decode(const FiAttentionParams& p, const FiKernelConfig& c, int grid_work, cudaStream_t stream) {
  require_supported(c);
  if (fi_decode_uses_tensor_cores(c.group))
    throw RuntimeError("launch_fi_decode: group " + std::to_string(c.group) + " runs on tensor cores (launch_fi_prefill)");
  if (grid_work <= 0) return;
  dispatch<DecodeLaunch>(c, p, c.group, grid_work, stream);
  check_launch("FLASHINFER decode");
}

void launch_fi_prefill(const FiAttentionParams& p, const FiKernelConfig& c, int grid_work, cudaStream_t stream) {
  require_supported(c);
  if (p.cta_tile_q != 16 && p.cta_tile_q != 64 && p.cta_tile_q != 128)
    throw RuntimeError("launch_fi_prefill: cta_tile_q must be 16, 64 or 128 (got " + std::to_string(p.cta_tile_q) + ")");
  if (c.head_dim == 256 && p.cta_tile_q == 128)
    throw RuntimeError("launch_fi_prefill: head size 256 takes q tiles of 16 or 64");
  if (grid_work <= 0) return;
  dispatch<PrefillLaunch>(c, p, grid_work, stream);
  check_launch("FLASHINFER prefill");
}

}  // namespace attn
