#pragma once
// mma.sync m16n8k16 operands read straight from raw fp8 (e4m3, e5m2) K/V tiles in shared memory,
// for the tensor-core kernels (FLASH_ATTN, FLASHINFER). The cache bytes are never widened back
// into shared memory: ldmatrix reads them as if they were 16-bit and the codes widen in registers
// right before the MMA that consumes them.
//
// The MMAs of the fp8 path run in fp16 whatever the model dtype: every e4m3/e5m2 code widens to
// fp16 in one conversion per pair (bf16 would take three more instructions per pair through fp32),
// fp16 holds P in [0, 1] more finely than bf16, and a bf16 Q is stored once as fp16 times 2^-8
// (kFp8QScale, given back in the score scale): exact for |q| in [2^-6, 2^23], an absolute error
// under 2^-17 below, no overflow for any |q| under 1.6e7.
//
// Operand layouts. ldmatrix moves 16-bit elements, so on fp8 rows each thread receives 4
// consecutive bytes where a 16-bit tile would give it 2 elements (t = lane % 4, g = lane / 4):
// - Q·K^T: the reduction runs over head dims in any order, so k-slots {2t, 2t+1, 2t+8, 2t+9} of
//   a 16-wide k-step take head dims 4t..4t+3. A K row's 4 bytes (one 16-byte chunk of a row is one
//   k-step) are then exactly the thread's (b0, b1) pair, and Q's A fragment is read with the same
//   order (Q stored in fragment order, one 16-byte load per fragment: fp8_q_slot).
// - P·V: ldmatrix.trans on 16 fp8 bytes per key row hands a thread keys (2t, 2t+1) of head dims
//   2g and 2g+1; a byte permute splits them into the B fragments of two output column blocks,
//   "even dims" and "odd dims". O column block 2b (2b+1) then holds the even (odd) dims of the
//   16-dim group b, i.e. thread dims 16b + 4t + {0, 2} ({1, 3}); the epilogue undoes this when it
//   stores O (fp8_o_dims).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/common/fp8_widen.cuh"
#include "kernels/common/ptx.cuh"

namespace attn::kern {

constexpr float kFp8QScale = 1.f / 256.f;

// Two bf16 values of Q (one packed pair) -> fp16 times kFp8QScale.
__device__ __forceinline__ uint32_t fp8_q_pair_to_half(uint32_t w) {
  const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w));
  return pack2<__half>(f.x * kFp8QScale, f.y * kFp8QScale);
}
// One 16-byte chunk of a bf16 Q row in shared memory, in place.
__device__ __forceinline__ void fp8_q_to_half(void* chunk) {
  uint4* c = reinterpret_cast<uint4*>(chunk);
  uint4 v = *c;
  v.x = fp8_q_pair_to_half(v.x);
  v.y = fp8_q_pair_to_half(v.y);
  v.z = fp8_q_pair_to_half(v.z);
  v.w = fp8_q_pair_to_half(v.w);
  *c = v;
}

// Q stored in A-fragment order (the mma.sync kernels of FLASH_ATTN and FLASHINFER): the 16 rows x
// 16 head dims of one row block mb and k-step ks are 32 slots of 16 bytes, slot `lane` holding that
// lane's fragment a[0..3] in register order, so one 16-byte load gives it (two 8-byte loads of the
// row-major tile gave (a0, a2) and (a1, a3), and the register moves that reordered them for every
// MMA were a tenth of the fp8 decode's instructions). Word w of slot (g, t) = lane 4g + t: row
// g + 8 (w & 1), head dims 16 ks + 4t + 2 (w >> 1) + {0, 1}. Element offset of a slot:
template <int kKSteps>
__device__ __forceinline__ int fp8_q_slot(int mb, int ks, int lane) {
  return ((mb * kKSteps + ks) * 32 + lane) * 8;
}
// Row (within the tile) and head dim of word w of slot s (s = fp8_q_slot / 8).
template <int kKSteps>
__device__ __forceinline__ int2 fp8_q_slot_word(int s, int w) {
  const int lane = s % 32, ks = s / 32 % kKSteps, mb = s / 32 / kKSteps;
  return make_int2(mb * 16 + lane / 4 + 8 * (w & 1), ks * 16 + 4 * (lane % 4) + 2 * (w >> 1));
}
// Copies slot s of a tile whose first slot is at `tile`: four 4-byte cp.async pairs, from
// row(r, valid), the address of packed row r's head dim 0 (valid false: past the queries, the pair
// is zero-filled). A thread that copies whole slots may convert them in place once they landed.
template <int kKSteps, class RowFn>
__device__ __forceinline__ void fp8_q_slot_copy(void* tile, int s, RowFn&& row) {
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    const int2 rd = fp8_q_slot_word<kKSteps>(s, w);
    bool valid;
    const auto* src = row(rd.x, valid) + rd.y;
    cp_async_4(static_cast<uint8_t*>(tile) + s * 16 + 4 * w, src, valid);
  }
}
__device__ __forceinline__ void fp8_q_slot_fragment(uint32_t (&a)[4], const void* slot) {
  const uint4 v = *reinterpret_cast<const uint4*>(slot);
  a[0] = v.x;
  a[1] = v.y;
  a[2] = v.z;
  a[3] = v.w;
}

// One ldmatrix.x4 on a raw K tile reads 4 matrices of 8 keys x 16 bytes (one k-step): kNPer
// consecutive 8-key blocks of 4 / kNPer consecutive k-steps, register i holding key block
// i % kNPer of k-step i / kNPer. The lane's row address: its key, for load nb of a warp whose
// keys start at key0 (load nb covers key blocks nb * kNPer ..), and its k-step (from the first
// of the 4 / kNPer).
template <int kNPer>
__device__ __forceinline__ int fp8_k_lane_key(int lane, int key0, int nb) {
  return key0 + (nb * kNPer + lane / 8 % kNPer) * 8 + (lane % 8);
}
template <int kNPer>
__device__ __forceinline__ int fp8_k_lane_kstep(int lane) {
  return lane / 8 / kNPer;
}

// The B fragment (b0, b1) of one key block and k-step from its ldmatrix register: the codes of
// head dims 4t..4t+3 of key g, widened to fp16.
template <bool kE5m2>
__device__ __forceinline__ uint2 fp8_k_fragment(uint32_t raw) { return fp8x4_to_16<__half, kE5m2>(raw); }

// P·V: one ldmatrix.x4.trans on a raw V tile, lanes addressing key rows as for a 16-bit tile and
// 16-byte chunk lane / 16, covers 16 keys x 32 dims. Registers (2i, 2i + 1) hold keys 0-7 and
// 8-15 of chunk i; from them come the B fragments of the two O column blocks of that chunk's
// 16-dim group: .x, .y the even-dims block (b0, b1), .z, .w the odd-dims block.
template <bool kE5m2>
__device__ __forceinline__ uint4 fp8_v_fragments(uint32_t keys_lo, uint32_t keys_hi) {
  const uint2 lo = fp8x4_to_16<__half, kE5m2>(__byte_perm(keys_lo, 0, 0x3120));
  const uint2 hi = fp8x4_to_16<__half, kE5m2>(__byte_perm(keys_hi, 0, 0x3120));
  return make_uint4(lo.x, hi.x, lo.y, hi.y);
}

// O dims 16b + 4t + {0, 1, 2, 3} of row g (h = 0) or g + 8 (h = 1) from the accumulators of
// column blocks 2b (even dims) and 2b + 1 (odd dims).
__device__ __forceinline__ float4 fp8_o_dims(const float (&even)[4], const float (&odd)[4], int h) {
  return make_float4(even[2 * h], odd[2 * h], even[2 * h + 1], odd[2 * h + 1]);
}

}  // namespace attn::kern
