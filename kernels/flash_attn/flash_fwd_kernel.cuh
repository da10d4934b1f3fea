#pragma once
// Paged varlen attention forward (FlashAttention-2 structure) on mma.sync m16n8k16 tensor-core
// instructions and cp.async copies, which compile for sm_80 and sm_90a alike.
//
// One CTA of 4 warps owns kBlockM packed query rows of one (sequence, kv head) and walks the
// sequence's keys in tiles of kBlockN through the block table, double-buffered in shared memory.
// Softmax runs online in fp32 in log2 units. Warps split the rows (prefill variant) or the keys
// of each tile (decode variant, whose few rows would leave 3 of 4 warps idle); either way the
// epilogue combines per-warp (max, sum, O) states in shared memory and writes O and LSE, or a
// normalized partial state per split for merge_attn_states.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/flash_attn/flash_fwd_traits.cuh"

namespace attn::fa {

// ---- PTX wrappers ------------------------------------------------------------------------------

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global -> shared copy; src_bytes = 0 zero-fills the destination without reading.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}

// D = A(16x16, row) * B(16x8, col) + D, fp32 accumulators.
template <class Element>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
template <>
__device__ __forceinline__ void mma_16816<__half>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma_16816<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <class Element>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

template <class Element>
__device__ __forceinline__ Element from_float(float x);
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// 2^x on the special-function unit (flushes subnormal results to zero, which P never needs).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// ---- fp8 -> 16-bit, exact ------------------------------------------------------------------------
// Every e4m3/e5m2 value is representable in fp16 and bf16, so the cache is widened without
// rounding and the descales are applied in fp32 to the scores (K) and the output (V).

// Two fp8 codes (bytes 0 and 1 of w) -> packed 16-bit pair.
template <class Element>
__device__ __forceinline__ uint32_t fp8x2_to_16(uint32_t w, bool e5m2) {
  uint32_t h2;  // fp16 pair
  if (e5m2) {
    h2 = __byte_perm(w, 0, 0x1404);  // e5m2 is the high byte of the same fp16
  } else {
    // e4m3 bits shifted into fp16 position give value * 2^-8 for normals and subnormals alike.
    const uint32_t x = __byte_perm(w, 0, 0x4140);
    const uint32_t bits = ((x & 0x00800080u) << 8) | ((x & 0x007f007fu) << 7);
    const __half2 scaled = __hmul2(*reinterpret_cast<const __half2*>(&bits), __floats2half2_rn(256.f, 256.f));
    h2 = *reinterpret_cast<const uint32_t*>(&scaled);
  }
  if constexpr (std::is_same_v<Element, __half>) {
    return h2;
  } else {
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h2));
    return pack2<__nv_bfloat16>(f.x, f.y);
  }
}

// ---- the kernel ----------------------------------------------------------------------------------

// One tile: rows m_block * kBlockM .. of sequence `seq`, kv head blockIdx.y, split blockIdx.z.
template <class Tr>
__device__ __forceinline__ void attend_tile(const FlashAttnParams& p, uint8_t* smem, int seq, int m_block) {
  using Element = typename Tr::Element;
  constexpr int D = Tr::kHeadDim;
  constexpr int kBlockM = Tr::kBlockM;
  constexpr int kBlockN = Tr::kBlockN;
  constexpr int kRS = Tr::kRowStride;
  constexpr int kElemBytes = Tr::kKvFp8 ? 1 : 2;

  Element* sQ = reinterpret_cast<Element*>(smem);
  Element* sKV = sQ + Tr::kQElems;  // stage s: K at sKV + 2s*kKvElems, V right after
  uint8_t* sRaw = reinterpret_cast<uint8_t*>(sKV + 2 * Tr::kKvElems * Tr::kKvStagesUsed);

  const int tid = threadIdx.x;
  const int lane = tid % 32;
  const int warp = tid / 32;
  const int warp_m = warp % Tr::kWarpsM;
  const int warp_n = warp / Tr::kWarpsM;

  const int kvh = blockIdx.y;
  const int split = blockIdx.z;
  const int G = p.num_q_heads / p.num_kv_heads;

  const int q_start = p.query_start_loc[seq];
  const int q_len = p.query_start_loc[seq + 1] - q_start;
  const int seq_len = p.seq_lens[seq];
  const int pos_base = seq_len - q_len;  // absolute position of query token 0
  const int row0 = m_block * kBlockM;    // first packed row of the tile
  const int tok_first = row0 / G;
  const int tok_last = min(q_len - 1, (row0 + kBlockM - 1) / G);
  const int pos_first = pos_base + tok_first;
  const int pos_last = pos_base + tok_last;

  // ---- key range of the tile (union over its rows), then this split's share ----
  int kv_lo = p.kv_begin;
  int kv_hi = seq_len;
  if (p.causal) kv_hi = min(kv_hi, pos_last + 1);
  if (p.window > 0) kv_lo = max(kv_lo, pos_first - p.window + 1);
  if (p.local_chunk > 0) kv_lo = max(kv_lo, (pos_first / p.local_chunk) * p.local_chunk);
  const int n_lo = max(kv_lo, 0) / kBlockN;
  const int n_hi = kv_hi > kv_lo ? (kv_hi + kBlockN - 1) / kBlockN : n_lo;
  const int per_split = (n_hi - n_lo + p.num_splits - 1) / p.num_splits;
  const int n_begin = min(n_hi, n_lo + split * per_split);
  const int n_end = min(n_hi, n_begin + per_split);

  const Element* q = static_cast<const Element*>(p.q);
  const uint8_t* k_cache = static_cast<const uint8_t*>(p.k_cache);
  const uint8_t* v_cache = static_cast<const uint8_t*>(p.v_cache);
  const int32_t* block_row = p.block_table + static_cast<int64_t>(seq) * p.block_table_stride;

  // ---- Q tile: packed row r = (token (row0 + r) / G, head kvh * G + (row0 + r) % G) ----
  {
    constexpr int kChunks = D / 8;  // 16-byte chunks per row
    for (int c = tid; c < kBlockM * kChunks; c += Tr::kThreads) {
      const int r = c / kChunks, col = (c % kChunks) * 8;
      const int prow = row0 + r;
      const int t = prow / G;
      const bool valid = t < q_len;
      const int64_t tok = q_start + (valid ? t : 0);
      const Element* src = q + (tok * p.num_q_heads + kvh * G + prow % G) * D + col;
      cp_async_16(sQ + r * kRS + col, src, valid);
    }
  }

  // ---- K/V tile loader: zero-fills keys at or past seq_len (their slots are never read) ----
  auto load_kv = [&](int n_tile, int stage) {
    constexpr int kChunkElems = 16 / kElemBytes;
    constexpr int kChunks = D / kChunkElems;
    const int key0 = n_tile * kBlockN;
    for (int c = tid; c < kBlockN * kChunks; c += Tr::kThreads) {
      const int r = c / kChunks, col = (c % kChunks) * kChunkElems;
      const int key = key0 + r;
      const bool valid = key < seq_len;
      const int kk = valid ? key : 0;
      const int64_t block = block_row[kk / p.block_size];
      const int64_t off =
          (block * p.kv_block_stride + (kk % p.block_size) * p.kv_token_stride + kvh * p.kv_head_stride + col) *
          kElemBytes;
      if constexpr (Tr::kKvFp8) {
        uint8_t* dk = sRaw + (2 * stage) * Tr::kRawBytes + r * D + col;
        cp_async_16(dk, k_cache + off, valid);
        cp_async_16(dk + Tr::kRawBytes, v_cache + off, valid);
      } else {
        Element* dk = sKV + (2 * stage) * Tr::kKvElems + r * kRS + col;
        cp_async_16(dk, k_cache + off, valid);
        cp_async_16(dk + Tr::kKvElems, v_cache + off, valid);
      }
    }
  };

  // ---- per-thread row facts: rows (g, g + 8) of each 16-row fragment ----
  const int g = lane / 4, tq = lane % 4;
  const float k_descale = p.k_descale ? p.k_descale[seq * p.num_kv_heads + kvh] : 1.f;
  const float v_descale = p.v_descale ? p.v_descale[seq * p.num_kv_heads + kvh] : 1.f;
  const bool softcap = p.softcap > 0.f;
  // Scores in log2 units: without a soft cap s2 = qk * scale * k_descale * log2e.
  const float qk_scale = p.softmax_scale * k_descale * (softcap ? 1.f / p.softcap : kLog2e);
  const float cap_log2 = p.softcap * kLog2e;
  int row_pos[Tr::kMFrags][2];
  float row_slope[Tr::kMFrags][2];  // ALiBi slope * log2e
#pragma unroll
  for (int mi = 0; mi < Tr::kMFrags; ++mi) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int prow = row0 + warp_m * Tr::kWarpRows + mi * 16 + g + 8 * h;
      row_pos[mi][h] = pos_base + prow / G;
      row_slope[mi][h] = p.alibi_slopes ? p.alibi_slopes[kvh * G + prow % G] * kLog2e : 0.f;
    }
  }

  float acc_o[Tr::kMFrags][Tr::kDFrags][4];
  float row_max[Tr::kMFrags][2];
  float row_sum[Tr::kMFrags][2];  // this thread's partial sum; quad-reduced in the epilogue
#pragma unroll
  for (int mi = 0; mi < Tr::kMFrags; ++mi) {
#pragma unroll
    for (int j = 0; j < Tr::kDFrags; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_o[mi][j][e] = 0.f;
    row_max[mi][0] = row_max[mi][1] = -INFINITY;
    row_sum[mi][0] = row_sum[mi][1] = 0.f;
  }

  if (n_begin < n_end) load_kv(n_begin, 0);
  cp_async_commit();

  for (int n_tile = n_begin; n_tile < n_end; ++n_tile) {
    const int stage = (n_tile - n_begin) & 1;
    if (n_tile + 1 < n_end) load_kv(n_tile + 1, stage ^ 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();

    const Element* sK;
    if constexpr (Tr::kKvFp8) {
      // Widen the landed fp8 tile into the 16-bit K/V pair (8 codes per thread and step).
      const uint8_t* raw = sRaw + (2 * stage) * Tr::kRawBytes;
      constexpr int kGroups = 2 * kBlockN * D / 8;
      for (int c = tid; c < kGroups; c += Tr::kThreads) {
        const int which = c / (kBlockN * D / 8);  // 0 = K, 1 = V
        const int rem = c % (kBlockN * D / 8);
        const int r = rem / (D / 8), col = (rem % (D / 8)) * 8;
        const uint2 w = *reinterpret_cast<const uint2*>(raw + which * Tr::kRawBytes + r * D + col);
        uint4 out;
        out.x = fp8x2_to_16<Element>(w.x, p.kv_fp8_e5m2);
        out.y = fp8x2_to_16<Element>(w.x >> 16, p.kv_fp8_e5m2);
        out.z = fp8x2_to_16<Element>(w.y, p.kv_fp8_e5m2);
        out.w = fp8x2_to_16<Element>(w.y >> 16, p.kv_fp8_e5m2);
        *reinterpret_cast<uint4*>(sKV + which * Tr::kKvElems + r * kRS + col) = out;
      }
      __syncthreads();
      sK = sKV;
    } else {
      sK = sKV + (2 * stage) * Tr::kKvElems;
    }
    const Element* sV = sK + Tr::kKvElems;
    const int wkey0 = warp_n * Tr::kWarpKeys;  // this warp's first key within the tile

    // ---- S = Q K^T ----
    float acc_s[Tr::kMFrags][Tr::kNFrags][4];
#pragma unroll
    for (int mi = 0; mi < Tr::kMFrags; ++mi)
#pragma unroll
      for (int j = 0; j < Tr::kNFrags; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc_s[mi][j][e] = 0.f;
#pragma unroll
    for (int ks = 0; ks < Tr::kKSteps; ++ks) {
      uint32_t a[Tr::kMFrags][4];
#pragma unroll
      for (int mi = 0; mi < Tr::kMFrags; ++mi) {
        const int r = warp_m * Tr::kWarpRows + mi * 16 + (lane % 8) + ((lane / 8) % 2) * 8;
        ldmatrix_x4(a[mi], sQ + r * kRS + ks * 16 + (lane / 16) * 8);
      }
#pragma unroll
      for (int nj = 0; nj < Tr::kNFrags / 2; ++nj) {
        uint32_t b[4];
        const int key = wkey0 + nj * 16 + (lane % 8) + (lane / 16) * 8;
        ldmatrix_x4(b, sK + key * kRS + ks * 16 + ((lane / 8) % 2) * 8);
#pragma unroll
        for (int mi = 0; mi < Tr::kMFrags; ++mi) {
          mma_16816<Element>(acc_s[mi][2 * nj], a[mi], b[0], b[1]);
          mma_16816<Element>(acc_s[mi][2 * nj + 1], a[mi], b[2], b[3]);
        }
      }
    }

    // ---- scores in log2 units, masks, online softmax ----
    const int key_tile0 = n_tile * kBlockN + wkey0;
    const bool need_mask = (n_tile + 1) * kBlockN > seq_len || n_tile * kBlockN < kv_lo ||
                           (p.causal && (n_tile + 1) * kBlockN - 1 > pos_first) ||
                           (p.window > 0 && n_tile * kBlockN <= pos_last - p.window) ||
                           (p.local_chunk > 0 && n_tile * kBlockN < (pos_last / p.local_chunk) * p.local_chunk);
    const bool alibi = p.alibi_slopes != nullptr;
    const bool plain = !softcap && !alibi && !need_mask;  // the common inner tile: scale only
#pragma unroll
    for (int mi = 0; mi < Tr::kMFrags; ++mi) {
      if (plain) {
#pragma unroll
        for (int j = 0; j < Tr::kNFrags; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc_s[mi][j][e] *= qk_scale;
      } else {
#pragma unroll
        for (int j = 0; j < Tr::kNFrags; ++j) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            float s = acc_s[mi][j][e] * qk_scale;
            if (softcap) s = cap_log2 * tanhf(s);
            const int key = key_tile0 + j * 8 + 2 * tq + (e & 1);
            const int pos = row_pos[mi][e / 2];
            if (alibi) s -= row_slope[mi][e / 2] * static_cast<float>(abs(pos - key));
            if (need_mask) {
              bool ok = key < seq_len && key >= kv_lo;
              if (p.causal) ok = ok && key <= pos;
              if (p.window > 0) ok = ok && key > pos - p.window;
              if (p.local_chunk > 0) ok = ok && key >= (pos / p.local_chunk) * p.local_chunk;
              if (!ok) s = -INFINITY;
            }
            acc_s[mi][j][e] = s;
          }
        }
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mx = row_max[mi][h];
#pragma unroll
        for (int j = 0; j < Tr::kNFrags; ++j) mx = fmaxf(mx, fmaxf(acc_s[mi][j][2 * h], acc_s[mi][j][2 * h + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_use = mx == -INFINITY ? 0.f : mx;  // no visible key yet: keep P = 0
        const float corr = fast_exp2(row_max[mi][h] - m_use);
        row_max[mi][h] = mx;
        float sum = 0.f;
#pragma unroll
        for (int j = 0; j < Tr::kNFrags; ++j) {
          acc_s[mi][j][2 * h] = fast_exp2(acc_s[mi][j][2 * h] - m_use);
          acc_s[mi][j][2 * h + 1] = fast_exp2(acc_s[mi][j][2 * h + 1] - m_use);
          sum += acc_s[mi][j][2 * h] + acc_s[mi][j][2 * h + 1];
        }
        row_sum[mi][h] = row_sum[mi][h] * corr + sum;
#pragma unroll
        for (int d = 0; d < Tr::kDFrags; ++d) {
          acc_o[mi][d][2 * h] *= corr;
          acc_o[mi][d][2 * h + 1] *= corr;
        }
      }
    }

    // ---- O += P V ----
#pragma unroll
    for (int kk = 0; kk < Tr::kWarpKeys / 16; ++kk) {
      uint32_t a[Tr::kMFrags][4];
#pragma unroll
      for (int mi = 0; mi < Tr::kMFrags; ++mi) {
        a[mi][0] = pack2<Element>(acc_s[mi][2 * kk][0], acc_s[mi][2 * kk][1]);
        a[mi][1] = pack2<Element>(acc_s[mi][2 * kk][2], acc_s[mi][2 * kk][3]);
        a[mi][2] = pack2<Element>(acc_s[mi][2 * kk + 1][0], acc_s[mi][2 * kk + 1][1]);
        a[mi][3] = pack2<Element>(acc_s[mi][2 * kk + 1][2], acc_s[mi][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dj = 0; dj < Tr::kDFrags / 2; ++dj) {
        uint32_t b[4];
        const int key = wkey0 + kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8;
        ldmatrix_x4_trans(b, sV + key * kRS + dj * 16 + (lane / 16) * 8);
#pragma unroll
        for (int mi = 0; mi < Tr::kMFrags; ++mi) {
          mma_16816<Element>(acc_o[mi][2 * dj], a[mi], b[0], b[1]);
          mma_16816<Element>(acc_o[mi][2 * dj + 1], a[mi], b[2], b[3]);
        }
      }
    }
    __syncthreads();  // the next iteration's loads overwrite this stage
  }
  cp_async_wait<0>();
  __syncthreads();

  // ---- epilogue: per-warp states -> shared memory -> combined, normalized output ----
  float* sO = reinterpret_cast<float*>(smem);  // [kWarpsN][kBlockM][kORowStride]
  float* sMax = sO + Tr::kWarpsN * kBlockM * Tr::kORowStride;  // [kWarpsN][kBlockM]
  float* sSum = sMax + Tr::kWarpsN * kBlockM;                    // [kWarpsN][kBlockM]
#pragma unroll
  for (int mi = 0; mi < Tr::kMFrags; ++mi) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float s = row_sum[mi][h];
      s += __shfl_xor_sync(0xffffffffu, s, 1);
      s += __shfl_xor_sync(0xffffffffu, s, 2);
      const int r = warp_m * Tr::kWarpRows + mi * 16 + g + 8 * h;
      if (tq == 0) {
        sMax[warp_n * kBlockM + r] = row_max[mi][h];
        sSum[warp_n * kBlockM + r] = s;
      }
      float* dst = sO + (warp_n * kBlockM + r) * Tr::kORowStride;
#pragma unroll
      for (int d = 0; d < Tr::kDFrags; ++d)
        *reinterpret_cast<float2*>(dst + d * 8 + 2 * tq) = make_float2(acc_o[mi][d][2 * h], acc_o[mi][d][2 * h + 1]);
    }
  }
  __syncthreads();

  // Per row: combine the warp columns (and the sink), then one coefficient per column.
  // Rows are handled by the threads r < kBlockM, the result left in sMax/sSum of column 0:
  // sMax[r] = LSE (natural log), sSum[c * kBlockM + r] = weight of column c.
  const bool use_sink = p.sinks != nullptr && split == 0;
  for (int r = tid; r < kBlockM; r += Tr::kThreads) {
    float m = -INFINITY;
#pragma unroll
    for (int c = 0; c < Tr::kWarpsN; ++c) m = fmaxf(m, sMax[c * kBlockM + r]);
    const int prow = row0 + r;
    const float sink2 = use_sink ? p.sinks[kvh * G + prow % G] * kLog2e : -INFINITY;
    m = fmaxf(m, sink2);
    const float m_use = m == -INFINITY ? 0.f : m;
    float total = use_sink ? exp2f(sink2 - m_use) : 0.f;
    float w[Tr::kWarpsN];
#pragma unroll
    for (int c = 0; c < Tr::kWarpsN; ++c) {
      w[c] = exp2f(sMax[c * kBlockM + r] - m_use);
      total += sSum[c * kBlockM + r] * w[c];
    }
    const float inv = total > 0.f ? 1.f / total : 0.f;
#pragma unroll
    for (int c = 0; c < Tr::kWarpsN; ++c) sSum[c * kBlockM + r] = w[c] * inv;
    sMax[r] = total > 0.f ? (m_use + log2f(total)) * kLn2 : -INFINITY;
  }
  __syncthreads();

  const bool partial = p.o_partial != nullptr;
  const int64_t slot = p.partial_offset + split;
  constexpr int kVec = 8;
  for (int c = tid; c < kBlockM * (D / kVec); c += Tr::kThreads) {
    const int r = c / (D / kVec), col = (c % (D / kVec)) * kVec;
    const int prow = row0 + r;
    const int t = prow / G;
    if (t >= q_len) continue;
    const int64_t tok = q_start + t;
    const int head = kvh * G + prow % G;
    float out[kVec];
#pragma unroll
    for (int i = 0; i < kVec; ++i) out[i] = 0.f;
#pragma unroll
    for (int cc = 0; cc < Tr::kWarpsN; ++cc) {
      const float wgt = sSum[cc * kBlockM + r] * v_descale;
      const float* src = sO + (cc * kBlockM + r) * Tr::kORowStride + col;
#pragma unroll
      for (int i = 0; i < kVec; ++i) out[i] += wgt * src[i];
    }
    const int64_t row_index = tok * p.num_q_heads + head;
    if (partial) {
      float* dst = p.o_partial + (slot * p.num_tokens * p.num_q_heads + row_index) * D + col;
      reinterpret_cast<float4*>(dst)[0] = make_float4(out[0], out[1], out[2], out[3]);
      reinterpret_cast<float4*>(dst)[1] = make_float4(out[4], out[5], out[6], out[7]);
      if (col == 0) p.lse_partial[slot * p.num_tokens * p.num_q_heads + row_index] = sMax[r];
    } else {
      uint4 packed;
      packed.x = pack2<Element>(out[0], out[1]);
      packed.y = pack2<Element>(out[2], out[3]);
      packed.z = pack2<Element>(out[4], out[5]);
      packed.w = pack2<Element>(out[6], out[7]);
      *reinterpret_cast<uint4*>(static_cast<Element*>(p.o) + row_index * D + col) = packed;
      if (col == 0 && p.lse) p.lse[tok * p.lse_token_stride + head * p.lse_head_stride] = sMax[r];
    }
  }
}

// The prefill kernel also serves the decode sequences of a mixed batch: a sequence whose packed
// rows fit one decode tile (the planner gives it a single tile) runs the decode tiling, so one
// launch covers chunked prefills and decodes without 128-row tiles for a single token.
template <class Tr, class TrSmall>
__global__ void __launch_bounds__(Tr::kThreads) flash_fwd_kernel(const __grid_constant__ FlashAttnParams p) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int seq = p.tiles[2 * blockIdx.x];
  const int m_block = p.tiles[2 * blockIdx.x + 1];
  if constexpr (!Tr::kDecode) {
    const int rows = (p.query_start_loc[seq + 1] - p.query_start_loc[seq]) * (p.num_q_heads / p.num_kv_heads);
    if (rows <= TrSmall::kBlockM) {
      attend_tile<TrSmall>(p, smem, seq, m_block);
      return;
    }
  }
  attend_tile<Tr>(p, smem, seq, m_block);
}

// Host side of one instantiation: raises the shared-memory limit once, then launches. Launch
// errors are left for the caller's cudaGetLastError check.
template <int kHeadDim, class Element, bool kKvFp8, bool kDecode>
void run_flash_fwd(const FlashAttnParams& p, cudaStream_t stream) {
  using Tr = FwdTraits<kHeadDim, Element, kKvFp8, kDecode>;
  using TrSmall = FwdTraits<kHeadDim, Element, kKvFp8, true>;
  constexpr int kSmem = Tr::kSmemBytes > TrSmall::kSmemBytes ? Tr::kSmemBytes : TrSmall::kSmemBytes;
  static const cudaError_t configured = cudaFuncSetAttribute(
      flash_fwd_kernel<Tr, TrSmall>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  (void)configured;
  const dim3 grid(p.num_tiles, p.num_kv_heads, p.num_splits);
  flash_fwd_kernel<Tr, TrSmall><<<grid, Tr::kThreads, kSmem, stream>>>(p);
}

// The instantiations of one head size (flash_fwd_hd<N>.cu): both model dtypes, the model-dtype
// and the fp8 cache, prefill and decode tiling.
#define ATTN_FA_INSTANTIATE_HEAD_SIZE(D)                                                  \
  template void run_flash_fwd<D, __half, false, false>(const FlashAttnParams&, cudaStream_t);         \
  template void run_flash_fwd<D, __half, false, true>(const FlashAttnParams&, cudaStream_t);          \
  template void run_flash_fwd<D, __half, true, false>(const FlashAttnParams&, cudaStream_t);          \
  template void run_flash_fwd<D, __half, true, true>(const FlashAttnParams&, cudaStream_t);           \
  template void run_flash_fwd<D, __nv_bfloat16, false, false>(const FlashAttnParams&, cudaStream_t);  \
  template void run_flash_fwd<D, __nv_bfloat16, false, true>(const FlashAttnParams&, cudaStream_t);   \
  template void run_flash_fwd<D, __nv_bfloat16, true, false>(const FlashAttnParams&, cudaStream_t);   \
  template void run_flash_fwd<D, __nv_bfloat16, true, true>(const FlashAttnParams&, cudaStream_t);

}  // namespace attn::fa
