#pragma once
// Paged varlen attention forward for Hopper (sm_90a): warpgroup MMAs (wgmma) with fp32
// accumulators in registers, K and V read by the tensor cores straight from shared memory.
//
// Served shapes: head sizes 64, 96, 128, 192 and 256, fp16/bf16 model dtype with a cache of the same
// dtype or an fp8 one (widened to fp16 in shared memory by the producer), 128 packed query rows per
// tile (192 for head size 64 prefills): prefills, and with a 16-bit cache decodes and mixed batches
// too (a decode is one tile of G x q_len rows; flash_attn_sm90_passes). Everything else (fp8
// decodes, sm_80) stays on the mma.sync kernel of flash_fwd_kernel.cuh; the launcher decides.
// Prefill launches of FLASH_ATTN's and FLASHINFER's planner tile each query from its end
// (FlashAttnParams::rows_from_end): where its rows are not a multiple of the tile's, the partial tile
// is its first (its rows below 0 are none), on the fewest keys, instead of its last, on the most.
//
// Head size 96 runs in the tiles of head size 128 (kDimPad): the 128-byte swizzle holds 64 dims per
// column block, and P V's B operand (V, N-major) must span whole blocks, so the second block of Q,
// K and V holds dims 64..95 and 32 unused ones. Q K^T takes only the 6 k-steps of real dims; P V
// runs as m64n128 and its last 32 output columns, whatever V's unused dims hold, are never stored.
// The copies write only real dims (bulk copies: the box's dims past 96 are out of the tensor and
// land as zeros). A third more P V work than the head size needs (FlashAttention-3 takes a 64-byte
// swizzle at this head size instead).
//
// A CTA is three warpgroups (four for head size 64 prefills), specialised. Warpgroup 0 is the
// producer: it fills a ring of K/V tiles of B = 128 keys (64 at head size 192; at 256, 80 for
// prefills over a 16-bit cache and 64 otherwise; five stages at head size 64, three at 96, 128 and
// 192, two at 256; qk 192 / v 128, the MLA prefill's, two of 128 or four of 64 as the launch
// chooses, V's tile 128 dims wide) in the 128-byte-swizzled layout the matrix descriptors name. A tile is whole boxes of
// gcd(block size, B) slots, none crossing a page, so each box below seq_len arrives as bulk tensor
// copies (64 dims x the box's slots per 64 dims, lane b / 4 of producer warp b % 4 issuing those of box b);
// the rows of the box that reaches seq_len are gathered with 16-byte cp.async, zero past seq_len.
// The copies complete the stage's "full" mbarrier themselves; the producer gives most of its
// registers to the consumers (setmaxnreg). The other warpgroups are the consumers (two, or three at
// head size 64 outside decode launches); consumer c owns packed rows 64c .. 64c + 63 of the tile.
// Per key tile a consumer computes S = Q K^T (D / 16 x m64nBk16, Q and K from shared memory), the
// online softmax of its 64 rows in registers, and O += P V (B / 16 x m64nDk16, P from registers as
// the A operand, V read N-major), then frees the stage on its "empty" mbarrier. No CTA-wide barrier
// runs in the loop. Each consumer issues its products as soon as its stage is full, so one consumer's
// softmax runs under the others' MMAs; over fp8 caches and at head size 96 they take turns issuing
// Q K^T instead (kTurns: a named barrier each, round robin). Head size 96, 128 and 256 prefills over a
// 16-bit cache also overlap within a consumer (kOverlap): Q K^T of tile t is issued with P V of tile t - 1 and
// the softmax of t runs under that P V; the producer then puts V of the CTA's tile u - 1 beside K of
// tile u in slot u, so that each tile's products still read one slot and free it whole.
//
// fp8 tensor cores (kFp8Mma, head size 128, an e4m3 cache and a quantized query, as vLLM runs
// FlashAttention-3 when the query arrives in fp8): Q K^T and P V are m64n128k32 e4m3 products at
// twice the 16-bit rate, on the codes themselves. The consumers quantize Q (e4m3(q / q_scale), exact:
// the batch's queries are already on that grid) into a 128 x 128-byte tile; the producer moves K's
// codes into the swizzled tile the descriptors read and V's into a staging tile (whole page boxes by
// the copy engine, the rest by cp.async), then transposes V
// into V^T (8-bit operands must be K-major, i.e. keys contiguous), the keys of each 32-key k-step in
// the order the S accumulators hold them, so that P goes from the accumulators to the A registers of
// P V with no shuffle; P is rounded to e4m3 (scaled by 2^6 under a row max that may lag by 2^2,
// which the row sums cancel) and O is descaled by v_descale in fp32.
//
// Shared-memory layout of an R x D 16-bit tile (Q: R = 128; K, V: R = B): D / 64 column blocks of
// 64 elements (128 bytes per row), each [R rows][128 B]; within a block, the 16-byte chunk c of
// row r sits at chunk c ^ (r % 8). Every block starts on a 1024-byte boundary (the swizzle period).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <string>
#include <type_traits>

#include "core/env.hpp"
#include "core/error.hpp"
#include "kernels/flash_attn/flash_attn_launch.hpp"  // sm90_block_m
#include "kernels/flash_attn/sm90_trace.cuh"
#include "kernels/flash_attn/flash_attn_params.hpp"
#include "kernels/common/fast_div.hpp"
#include "kernels/common/mbarrier.cuh"
#include "kernels/common/pdl_launch.hpp"
#include "kernels/common/sm90_image.cuh"
#include "kernels/common/tma.cuh"
#include "kernels/common/tma_map.hpp"
#include "kernels/common/wgmma.cuh"
#include "kernels/flash_attn/flash_fwd_kernel.cuh"  // attn::kern primitives via attn::fa

namespace attn::fa::sm90 {

// Consumer warpgroups of 64 packed rows each, as many as the planner's tile has rows
// (sm90_block_m in flash_attn_launch.hpp, which says why head size 64 prefills take three).
template <int kHeadDim, bool kDecodes>
constexpr int kConsumers = sm90_block_m(kHeadDim, kDecodes) / 64;
// FlashAttention-3's intra-warpgroup overlap: each consumer issues Q K^T of key tile t together
// with P V of tile t - 1 and runs the softmax of tile t under that P V. Without it a consumer's
// tile is strictly Q K^T, wait, softmax, P V, wait, and only the other consumers' products fill
// the tensor cores while it computes. The ring's slot u carries V of tile u - 1 beside K of tile u,
// so a turn reads one slot and frees it whole (Versions 12 and 19 held two stages per consumer, or
// split each stage's barriers, and lost more than the overlap gave; this form lost too, Versions
// 28-29, while one producer warp issued all of a tile's bulk copies, Version 33). Prefill launches of a 16-bit
// cache at head sizes 96, 128, 192 and 256 and at qk 192 / v 128 (the MLA prefill: S, P and O as at
// 128): the live S, P and O fit their 232 consumer registers (96: 1.063, 256: 1.018 x the plain
// schedule, Version 36; 192: 1.057, Version 60, its 64-key tiles spilling 8 bytes; the MLA prefill
// 1.073 x, docs/PERF_NOTES.md's FLASHMLA section, where the 128-key instantiation spills 4 bytes).
// Not at 64, whose three consumers have 152 registers (it spilled 248 bytes there; with two
// consumers it ran 0.957 x the three plain ones), or in decode launches (the mixed step ran 0.99 x
// with it).
template <int kHeadDim, int kHeadDimV, bool kFp8, bool kDecodes>
constexpr bool kOverlap = !kFp8 && !kDecodes &&
                           ((kHeadDimV == kHeadDim && (kHeadDim == 96 || kHeadDim == 128 || kHeadDim == 192 || kHeadDim == 256)) ||
                            (kHeadDim == 192 && kHeadDimV == 128));
// The step's cache write inside a prefill launch (FlashAttnParams::fused_cache_write; the host sets it
// for passes whose every sequence starts from scratch, over a cache of the model dtype): every key is
// one of the step's new tokens, so producer warp 0 loads the key tiles from the step's K and V
// (a tile is one run of tokens there: a bulk copy per 64 dims), and producer warps 1-3, which the
// page boxes' copies no longer need, copy the rows of the CTA's own items into their cache slots
// meanwhile. Nothing in the launch reads a slot it writes, so the write runs under the products
// instead of ahead of them (8 x 1k: ~17 us of its ~191, docs/PERF_NOTES.md Versions 81-82).
template <int kHeadDim, int kHeadDimV, bool kFp8, bool kDecodes>
constexpr bool kFusedWrite = !kFp8 && !kDecodes && kHeadDimV == kHeadDim;
// Registers per thread after setmaxnreg: the producer keeps what its loop needs and the consumers
// take the rest of what the CTA launched with, 65536 / threads rounded down to 8 (168 for 384
// threads, 128 for 512; setmaxnreg moves registers only within those; asking for more makes
// setmaxnreg.inc wait forever). 16-bit caches: 40 + 232 (two consumers) or 40 + 152 (three). An
// fp8 cache's producer holds block-table entries, copy addresses and codes being widened: 88 at
// head sizes 96, 128 and 192 (72 spilled 56 bytes at 128), 72 at 64 and 256 (256's consumers spill
// below 216). The fp8 tensor-core path (kFp8Mma) 96 + 200: its producer also issues the bulk copies
// and transposes V (at 88 it spilled 12 bytes; the widened path keeps 88 + 208, which ran 1 % faster
// than 96 + 200). The overlapped schedule (kOverlap) keeps 40 + 232: its consumers hold S, P and O.
// Persistent decode launches (kDecodes) 64 + 216: their producer also claims work items, waits
// for their ids (at 40 it spilled 72-88 bytes) and picks each tile's L2 policy (at 56 it spilled
// 24 bytes at head size 128, and head size 96 had spilled 12 before); their consumers are not
// overlapped and spill nothing at 216.
template <int kHeadDim, bool kFp8, bool kDecodes = false, bool kFp8Mma = false>
constexpr int kProducerRegs = !kFp8 ? (kDecodes && kHeadDim != 256 ? 64 : 40)
                              : kFp8Mma ? 96
                              : kHeadDim == 96 || kHeadDim == 128 || kHeadDim == 192 ? 88 : 72;
template <int kHeadDim, bool kFp8, int kNumConsumers, bool kDecodes = false, bool kFp8Mma = false>
constexpr int kConsumerRegs = (65536 / (128 * (kNumConsumers + 1)) / 8 * 8 * (kNumConsumers + 1) -
                               kProducerRegs<kHeadDim, kFp8, kDecodes, kFp8Mma>) / kNumConsumers / 8 * 8;
static_assert(kConsumerRegs<128, false, 2> == 232 && kConsumerRegs<128, true, 2> == 208 &&
                  kConsumerRegs<128, true, 2, false, true> == 200 && kConsumerRegs<256, true, 2> == 216 &&
                  kConsumerRegs<64, false, 3> == 152,
              "the budgets the comment above states");
// Persistent CTAs (a loop over work items) for every head size but 256: with 128 O accumulators
// per thread the loop's state spills there (48 bytes), and one CTA per item ran 10 % faster.
template <int kHeadDim>
constexpr bool kPersistent = kHeadDim != 256;
// Named barriers: 1 + c = consumer c's turn to issue; 4 + c = consumer c's rows of Q are in shared
// memory (its 128 threads: a consumer reads only its own rows of Q, and writes O only there).
constexpr int kBarTurn = 1, kBarQ = 4;

template <int kHeadDim_, bool kFp8, bool kDecodes, int kHeadDimV_ = kHeadDim_, int kKeys = 0, bool kFp8Mma = false>
struct Sm90Traits {
  static constexpr int kHeadDim = kHeadDim_;
  // V's head size: kHeadDim, or 128 under head size 192 (the MLA prefill's qk 192 / v 128).
  static constexpr int kHeadDimV = kHeadDimV_;
  static constexpr int kConsumers = sm90::kConsumers<kHeadDim, kDecodes>;
  static constexpr int kBlockM = 64 * kConsumers;             // packed query rows per tile
  static constexpr int kThreads = 128 * (1 + kConsumers);     // producer warpgroup + the consumers
  static constexpr int kConsumerThreads = 128 * kConsumers;
  // Keys per stage: 128, or fewer at head sizes 192 and 256, whose O takes 96 and 128 accumulators
  // per thread: 64 at 192 (stages of 48 KB), and at 256 80 for prefills over a 16-bit cache (two
  // stages of 80 KB: with two of 64 KB the consumers waited for a full stage 12 % of the time,
  // ncu), 64 over fp8 (its consumers have 216 registers) and for decode launches.
  // kKeys: a launch's choice where the rule has two (qk 192 / v 128: see run_flash_fwd_sm90).
  static constexpr int kBlockN = kKeys > 0 ? kKeys : kHeadDim <= 128 ? 128 : kHeadDim == 256 && !kFp8 && !kDecodes ? 80 : 64;
  static_assert(kHeadDimV == kHeadDim || (kHeadDim == 192 && kHeadDimV == 128 && !kFp8 && !kDecodes),
                "V narrower than Q K^T: qk 192 / v 128 prefills over a 16-bit cache");
  // Dims of a tile in shared memory and of P V's N: whole 64-column blocks (96 -> 128, see above).
  static constexpr int kDimPad = (kHeadDim + 63) / 64 * 64;
  static constexpr int kDimVPad = (kHeadDimV + 63) / 64 * 64;  // V's (P V's N)
  static constexpr int kChunks = kHeadDim / 8;               // 16-byte chunks per row of real dims
  static constexpr int kChunksV = kHeadDimV / 8;             // of V and O
  static constexpr int kQBlockBytes = kBlockM * 128;         // one 64-column block of Q
  static constexpr int kKvBlockBytes = kBlockN * 128;        // one 64-column block of K or V
  static constexpr int kQBytes = kQBlockBytes * kDimPad / 64;
  // kFp8Mma: K's codes (16 KB), then V's staged codes and V^T (16 KB each): stages of 48 KB.
  static constexpr int kKvBytes = kFp8Mma ? kBlockN * 128 : kKvBlockBytes * kDimPad / 64;  // a K tile
  static constexpr int kVBytes = kFp8Mma ? 2 * kBlockN * 128 : kKvBlockBytes * kDimVPad / 64;
  static constexpr int kStageBytes = kKvBytes + kVBytes;           // K, then V at kKvBytes
  // Ring depth: what fits beside Q. Head size 64 computes half as long per tile, so it keeps more
  // tiles in flight (5 stages of 32 KB); qk 192 / v 128 has four stages of 40 KB (64 keys) or two
  // of 80 KB (128 keys) beside its 48 KB Q. The fp8 tensor-core path: four of 48 KB, since with
  // turns its consumers hold two stages (V of the tile before until its P V completed) and the
  // producer lands and transposes into the others (on three stages the turns ran 0.91 x; Version 45).
  static constexpr int kStages = kFp8Mma ? 4 : kHeadDim == 64 ? 5 : kHeadDimV != kHeadDim ? (kBlockN == 128 ? 2 : 4) : kHeadDim <= 192 ? 3 : 2;
  // Claimed work items in flight (the dynamic schedule, see the kernel): a ring of item ids.
  static constexpr int kIdSlots = 8;
  // full[kStages], empty[kStages], id_full[kIdSlots], id_empty[kIdSlots], landed[kStages], then
  // the ids.
  static constexpr int kBarrierBytes = 3 * kStages * 8 + 2 * kIdSlots * 8 + kIdSlots * 4;
  // Persistent prefill launches (fixed rounds: the planner's list or the snake): the CTA's first
  // kItemSlots items, their ids and fields (Sm90ItemRec) worked out by all threads at its start
  // into shared memory, so that no item start waits for the dependent loads of its fields (tiles
  // -> sequence -> its query and key counts and block-table row: two L2 round trips, ~0.5 us of each
  // item's boundary at 8 x 1k, docs/PERF_NOTES.md Version 40). Later rounds load them as they come.
  static constexpr int kItemSlots = kPersistent<kHeadDim> && !kDecodes ? 48 : 0;
  // Q + the K/V ring (hd64 184 KB, hd96 and hd128 224 KB, hd192 192 KB, hd256 224 KB or 192 KB with 64-key
  // stages) + the items + barriers + alignment slack.
  static constexpr int kSmemBytes = kQBytes + kStages * kStageBytes + kItemSlots * 32 + kBarrierBytes + 1024;
  static constexpr int kAccS = kBlockN / 2;   // S accumulators per thread
  static constexpr int kAccO = kDimVPad / 2;  // O accumulators per thread (the unused dims' too)
  static_assert(kHeadDim == 64 || kHeadDim == 96 || kHeadDim == 128 || kHeadDim == 192 || kHeadDim == 256,
                "P V as one m64n{64,128,192,256}k16 per k-step");
  static_assert(kSmemBytes <= 227 * 1024, "one CTA per SM");
};

// The K and V caches as 4-D tensors for the bulk tensor copy engine: the head dim, then the slot
// in its block and the kv head (in increasing stride order: NHD and HND differ), then the block.
// A box is 64 dims x box_rows slots of one head and block, landing in the swizzled tile layout.
struct Sm90PageMaps {
  CUtensorMap k, v;
  int box_rows;    // gcd(block_size, kBlockN); 0 = no maps, every row gathered with cp.async
  int slot_inner;  // 1: coordinates (dim, slot, head, block); 0: (dim, head, slot, block)
  // Decode launches (mixed steps): a decode item's pages come under an L2 evict-first policy. They are
  // read once (by one item per kv head and split), while the prefill items' pages are read again by
  // every query tile of their sequence: streamed at the default policy, the decodes' pages pushed
  // those out of L2 (the mixed step 1.07 x faster; ATTN_FA_DECODE_EVICT_FIRST=0 turns it off).
  int decode_evict_first;
  // Fused write launches (kFusedWrite) with page maps (box_rows > 0): the step's new K and V as 3-D
  // maps of [num_tokens, num_kv_heads, head_size], a box 64 dims x kBlockN tokens of one kv head,
  // landing in the swizzled tile layout as a tile's page boxes do.
  CUtensorMap k_new, v_new;
};

// The fields of one of a CTA's first items (Sm90Traits::kItemSlots), in shared memory. w: the work
// item (num_work or more: none); kvh_split: kv head | split << 16; row: the sequence's first
// block-table entry (p.block_table + row).
struct Sm90ItemRec {
  int w, seq, row0, q_start, q_len, seq_len, kvh_split, row;
};
static_assert(sizeof(Sm90ItemRec) == 32, "two 16-byte words in shared memory");

// The launch's divisors as multiply-highs (kernels/common/fast_div.hpp): the packed-row -> token
// division by the group size G (query load, masks, epilogue) and the work item -> (tile, kv head,
// split) decomposition run at every item, where a division by a runtime value costs ~20
// instructions (ncu: ~4 % of the 8 x 1k prefill's samples sat on them).
struct Sm90Divisors {
  FastDivU32 group;         // G = num_q_heads / num_kv_heads
  FastDivU32 splits;        // num_splits
  FastDivU32 heads_splits;  // num_kv_heads * num_splits
  FastDivU32 tiles;         // num_tiles (head-major items)
  // Work items head-major: w = (kv head * S + split) * num_tiles + tile, so that the CTAs running at
  // once work on a few (sequence, head) pairs whose K/V stay in L2, where tile-major items spread
  // them over every pair (head size 256 2 x 4k 16/16: 128 MB of K/V, read again by each wave).
  // Only on fixed rounds that are not the planner's list (whose ids are tile-major).
  int head_major;
  // The fp8 tensor-core path: the producer prefetches each item's rows of Q into L2 (on by
  // default; ATTN_FA_SM90_Q_PREFETCH=0 turns it off, for A/B timing).
  int q_prefetch;
  // A fused write (kFusedWrite): n >= 1, the copy warps store the new rows of the CTA's own items
  // (copy_item_rows), round r's once producer warp 0's progress (sProgress) reached 2 r + n - 1: it
  // started the item (1), issued its last key tile (2, the default), started the next item (3) or
  // issued that one's last tile (4); 0 = a 1 / gridDim share of all rows at the launch's start
  // (copy_new_rows). ATTN_FA_FUSED_WRITE_ITEMS=n for A/B timing (docs/PERF_NOTES.md Version 82).
  int write_items;
};

// Byte offset of 16-byte chunk `chunk` (along the head dim) of row `row` in a swizzled tile whose
// 64-column blocks are `block_bytes` apart.
__device__ __forceinline__ uint32_t swizzled(int row, int chunk, int block_bytes) {
  return static_cast<uint32_t>((chunk >> 3) * block_bytes + row * 128 + (((chunk & 7) ^ (row & 7)) << 4));
}

// Per-lane copies of a warp's 16 rows of a swizzled tile (its rows of Q in, its staged rows of O
// out), 16-byte chunks: lane l takes chunk c = l % kChunks of rows rl, rl + kRowStep, ... (rl =
// l / kChunks, kRowStep = 32 / kChunks). The warp's first row is a multiple of 8 and rl < kRowStep
// divides kRowStep i, so the swizzle's row & 7 is rl ^ (kRowStep i & 7): pass i's byte offset is
// the lane's base (lane_rows_base) plus a constant (pass_offset), where working out each chunk's
// row, swizzle and address took ~25 instructions. kChunks: a power of two dividing 32.
template <int kChunks>
__device__ __forceinline__ uint32_t lane_rows_base(int lane, int warp_row, int block_bytes, int& x0) {
  const int c = lane % kChunks, rl = lane / kChunks;
  x0 = ((c & 7) ^ rl) << 4;
  return static_cast<uint32_t>((c >> 3) * block_bytes + (warp_row + rl) * 128);
}
template <int kChunks>
__device__ __forceinline__ int pass_offset(int x0, int i) {
  constexpr int kRowStep = 32 / kChunks;
  return kRowStep * i * 128 + (x0 ^ (((kRowStep * i) & 7) << 4));
}

// Chunk c (16 bytes) of token tok's K and V rows of kv head h, from the step's K and V into the
// token's cache slot (none where its slot is negative), by streaming stores: nothing in the launch
// reads the slots (the caches are its output here). Indices and slots in 32 bits (the backend
// checks both fit).
template <int kHeadDim>
__device__ __forceinline__ void copy_row_chunk(const FlashAttnParams& p, int tok, int h, int c) {
  const int64_t in = (static_cast<int64_t>(tok) * p.new_kv_stride + h * kHeadDim) * 2 + c * 16;
  const uint4 k = __ldg(reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(p.k_new) + in));
  const uint4 v = __ldg(reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(p.v_new) + in));
  const int64_t slot = p.slot_mapping[tok];
  if (slot < 0) return;
  const uint32_t blk = static_cast<uint32_t>(slot) / static_cast<uint32_t>(p.block_size);
  const uint32_t in_blk = static_cast<uint32_t>(slot) - blk * static_cast<uint32_t>(p.block_size);
  const int64_t out = (blk * p.kv_block_stride + in_blk * p.kv_token_stride + h * p.kv_head_stride) * 2 + c * 16;
  __stcs(reinterpret_cast<uint4*>(static_cast<uint8_t*>(const_cast<void*>(p.k_cache)) + out), k);
  __stcs(reinterpret_cast<uint4*>(static_cast<uint8_t*>(const_cast<void*>(p.v_cache)) + out), v);
}

// Producer warps 1-3 of a launch that writes the step's cache (kFusedWrite; thread t of 96), with
// ATTN_FA_FUSED_WRITE_ITEMS=0: the CTA's 1 / gridDim share of the write, 16-byte chunks of the
// step's K rows (and the same of V), a token's kv heads one after another, a chunk of each per
// thread in flight (two spilled in the producer's 40 registers).
template <int kChunks, int kHeadDim>
__device__ __forceinline__ void copy_new_rows(const FlashAttnParams& p, int t) {
  // The kernel ahead (a GEMM in a serving step) may still write K and V.
  pdl_wait_for_producer();
  const int per_token = p.num_kv_heads * kChunks;
  const int total = p.num_tokens * per_token;
  const int lo = static_cast<int>(static_cast<int64_t>(total) * blockIdx.x / gridDim.x);
  const int hi = static_cast<int>(static_cast<int64_t>(total) * (blockIdx.x + 1) / gridDim.x);
#pragma unroll 1
  for (int i = lo + t; i < hi; i += 96) {
    const int tok = i / per_token, rest = i - tok * per_token;
    copy_row_chunk<kHeadDim>(p, tok, rest / kChunks, rest % kChunks);
  }
}

// The same for one work item's new rows (the default): kv head kvh, tokens t_lo .. t_hi - 1 of
// the sequence whose first token is q_start; thread t of 96 copies chunks t, t + 96, ...
template <int kChunks, int kHeadDim>
__device__ __forceinline__ void copy_item_rows(const FlashAttnParams& p, int t, int kvh, int q_start, int t_lo, int t_hi) {
  const int n = (t_hi - t_lo) * kChunks;
#pragma unroll 1
  for (int i = t; i < n; i += 96) copy_row_chunk<kHeadDim>(p, q_start + t_lo + i / kChunks, kvh, i % kChunks);
}

// A CTA runs work items (packed rows m_block * kBlockM .. of a sequence, one kv head, one split):
// persistent CTAs, one per SM, loop over the list (kPersistent); at head size 256 one CTA runs one
// item. Semantics and outputs are those of the mma.sync prefill kernel (attend_tile): causal with
// a context offset, window, local chunk, soft cap, ALiBi, sinks, kv_begin, split-KV partials, LSE.
// kFp8: an fp8 (e4m3/e5m2) cache. The producer copies the codes of its rows into the stage with
// cp.async and widens them to fp16 there, in the same swizzled layout, and the MMAs run in fp16
// whatever the model dtype (a bf16 Q stored as fp16 x kFp8QScale, as in the mma.sync kernel); the
// descales go on the scores (K) and on O (V) in fp32.
// kE5m2: that cache's format (e5m2, else e4m3), a template parameter so that the widening runs one
// conversion (kernels/common/fp8_widen.cuh).
// kFp8Mma: the fp8 tensor-core path described at the top (kFp8, e4m3, head size 128, p.q_scale > 0).
// kDecodes: the launch holds decode-sized sequences (one 128-row tile each, G x q_len rows), so a
// consumer whose 64 rows are all past its item's query skips its products. A separate instantiation:
// the prefill kernel with that second consumer loop ran 2 x 4k 7 % slower (the consumers' code and
// registers moved), so prefill launches keep the kernel without it.
// kPlainScores: no soft cap, no ALiBi and a positive scale (sm90_plain_scores), so the scale always
// goes into the exponent and the per-score path of the other two is not compiled, whose registers
// cost the consumers time even where it never runs (head size 256 prefills 1.013-1.018 x faster
// without it; docs/PERF_NOTES.md Version 51): prefill launches as sm90_plain_at chooses, head size
// 128 decode launches as sm90_decode_plain_at does.
template <int kHeadDim, class Element, bool kFp8, bool kE5m2, bool kFp8Mma, bool kDecodes, int kHeadDimV = kHeadDim,
          int kKeys = 0, bool kPlainScores = false, bool kFusedW = false>
__global__ void __launch_bounds__((Sm90Traits<kHeadDim, kFp8, kDecodes, kHeadDimV, kKeys, kFp8Mma>::kThreads), 1)
    flash_fwd_sm90_kernel(const __grid_constant__ FlashAttnParams p, const __grid_constant__ Sm90PageMaps maps,
                          const __grid_constant__ Sm90Divisors divs) {
#if defined(ATTN_SM90A_DEVICE)
  static_assert(!kFp8Mma || (kFp8 && !kE5m2 && kHeadDim == 128), "fp8 tensor cores: an e4m3 cache at head size 128");
  static_assert(kFp8 || !kE5m2, "a format only for an fp8 cache");
  // fp8 decodes run the mma.sync decode tiling (flash_attn_sm90_passes); at head size 192 the
  // second consumer loop spilled 20 bytes (its consumers have no register to spare).
  static_assert(!kDecodes || (!kFp8 && kHeadDim != 192), "decode launches: a 16-bit cache, not head size 192");
  using Tr = Sm90Traits<kHeadDim, kFp8, kDecodes, kHeadDimV, kKeys, kFp8Mma>;
  using MmaT = std::conditional_t<kFp8, __half, Element>;  // operand dtype of the 16-bit MMAs
  constexpr bool kQToHalf = kFp8 && !kFp8Mma && !std::is_same_v<Element, __half>;
  constexpr int kBlockM = Tr::kBlockM, kBlockN = Tr::kBlockN, kStages = Tr::kStages, kChunks = Tr::kChunks;
  constexpr int kConsumers = Tr::kConsumers;
  constexpr int kKvBytes = Tr::kKvBytes, kKvBlockBytes = Tr::kKvBlockBytes, kQBlockBytes = Tr::kQBlockBytes;
  constexpr int kStageBytes = Tr::kStageBytes, kChunksV = Tr::kChunksV;
  constexpr int kVtOffset = 16384;  // kFp8Mma: V^T after the 16 KB V staging tile in a stage's V region
  extern __shared__ __align__(16) uint8_t smem_raw[];
  // Swizzle atoms must start on 1024-byte boundaries.
  const uint32_t raw_addr = smem_u32(smem_raw);
  uint8_t* smem = smem_raw + ((1024 - (raw_addr & 1023)) & 1023);
  uint8_t* sQ = smem;                 // [D / 64 blocks][128 rows][128 B] swizzled
  uint8_t* sKV = smem + Tr::kQBytes;  // stage s: K at sKV + s * kStageBytes, V right after
  const uint32_t sQ_addr = smem_u32(sQ);
  const uint32_t sKV_addr = smem_u32(sKV);
  // After the ring: the CTA's first items (kItemSlots, 16-byte aligned), the barriers, the ids.
  Sm90ItemRec* sItems = reinterpret_cast<Sm90ItemRec*>(sKV + kStages * kStageBytes);
  const uint32_t bar_addr = smem_u32(sKV + kStages * kStageBytes + Tr::kItemSlots * sizeof(Sm90ItemRec));
  auto full_bar = [&](int stage) { return bar_addr + 8 * stage; };
  auto empty_bar = [&](int stage) { return bar_addr + 8 * (kStages + stage); };
  auto id_full_bar = [&](int slot) { return bar_addr + 8 * (2 * kStages + slot); };
  auto id_empty_bar = [&](int slot) { return bar_addr + 8 * (2 * kStages + Tr::kIdSlots + slot); };
  // kFp8Mma with maps: the stage's bulk copies of codes landed (the producer transposes V after).
  auto land_bar = [&](int stage) { return bar_addr + 8 * (2 * kStages + 2 * Tr::kIdSlots + stage); };
  int* sIds = reinterpret_cast<int*>(sKV + kStages * kStageBytes + Tr::kItemSlots * sizeof(Sm90ItemRec) +
                                     8 * (3 * kStages + 2 * Tr::kIdSlots));
  // A fused write (no ids published: prefill launches never claim): 2 r once producer warp 0 started
  // its round r, 2 r + 1 once it issued that item's last key tile.
  // Written and polled by shared-memory atomics: it paces the copy and guards no data, and
  // compute-sanitizer's racecheck does not count atomics as hazards.
  int* sProgress = sIds;

  const int tid = threadIdx.x;
  const int role = tid / 128;          // 0: producer, 1 + c: consumer c
  const int wg = role > 0 ? role - 1 : 0;  // consumer c owns rows 64 c .. 64 c + 63 of the tile
  const int ctid = tid % 128;
  const int warp = ctid / 32;          // warp within the warpgroup: 16 of those rows
  const int lane = tid % 32;
  const int g = lane / 4, tq = lane % 4;

  const int G = p.num_q_heads / p.num_kv_heads;
  // Token of packed row `prow` (prow / G) and its head within the group (prow % G).
  auto token_of = [&](int prow) { return static_cast<int>(divs.group.div(static_cast<uint32_t>(prow))); };
  // Work item w is (tile w / (Hkv * S), kv head w / S % Hkv, split w % S) with the tiles most keys
  // first, or head-major (tile w % num_tiles, kv head and split w / num_tiles: Sm90Divisors).
  // Persistent CTAs: both roles walk the same items and count key tiles across them, so
  // the ring's stages and phases carry on from one item to the next and the producer loads the
  // next item's K/V under this one's last tiles. Which items a CTA takes:
  // - static (p.work_counters null): in round r CTA b takes item p.work_order[b][r], where the
  //   planner balanced the CTAs' items by their cost (prefill passes), else item r * gridDim.x + b,
  //   or + (gridDim.x - 1 - b) in odd rounds (a snake, so that the CTA with the heaviest item of
  //   one round gets one of the lightest of the next);
  // - dynamic: each CTA claims the next unclaimed item when it starts one, so that a CTA whose
  //   items ran short takes more of them (the planner's choice, flash_attn_plan.cpp). The list is
  //   claimed from both ends: CTAs b < F (F = p.claim_front_ctas, or all of them) start with item
  //   b and claim from the front, the others start with item n - 1 - (b - F) and claim from the
  //   back, until the ends meet (one 64-bit counter of both ends' claims, so that no item is
  //   taken twice). A mixed pass lists its prefill tiles first and its decode tiles last, so the
  //   back CTAs stream decode pages while the front ones compute prefill tiles, and each group
  //   takes the other's items once its own ran out. The producer's thread 0 claims the item after
  //   the one it starts and publishes it in a ring of ids (id_full / id_empty mbarriers), so that
  //   the consumers know an item's successor when they start it. (Claimed one item earlier still,
  //   to hide the atomic's latency, the CTAs held an item in reserve and balanced worse: Version 38.)
  const int num_work = p.num_tiles * p.num_kv_heads * p.num_splits;
  // A launch that writes the step's cache itself (kFusedWrite): producer warp 0 alone fills the
  // ring, warps 1-3 copy the step's K and V rows into the cache.
  constexpr bool fused = kFusedW;
  static_assert(!kFusedW || kFusedWrite<kHeadDim, kHeadDimV, kFp8, kDecodes>, "a fused write: a 16-bit prefill launch");
  // Only decode launches (kDecodes, which serve the mixed passes) claim: the prefill kernels keep
  // fixed rounds and their registers (the ring's waits in their loops made ptxas spill 130 bytes).
  const bool dynamic = kDecodes && kPersistent<kHeadDim> && p.work_counters != nullptr;
  // Dynamic: front CTAs (all of them unless the planner splits the grid) and this CTA's end.
  const int front_ctas = p.claim_front_ctas > 0 ? min(p.claim_front_ctas, static_cast<int>(gridDim.x))
                                                : static_cast<int>(gridDim.x);
  const bool front = static_cast<int>(blockIdx.x) < front_ctas;
  // Dynamic: the next unclaimed item at this CTA's end, or num_work when the ends met. Every CTA's
  // first item counts as claimed (front_ctas and gridDim.x - front_ctas of them).
  auto claim = [&]() {
    const unsigned long long old =
        atomicAdd(reinterpret_cast<unsigned long long*>(p.work_counters), front ? 1ull : 1ull << 32);
    const int f = static_cast<int>(old & 0xffffffffu) + front_ctas;
    const int b = static_cast<int>(old >> 32) + static_cast<int>(gridDim.x) - front_ctas;
    return f + b >= num_work ? num_work : front ? f : num_work - 1 - b;
  };
  // Fixed rounds from the planner's list where it was made for this grid, else the snake. Prefill
  // launches only: the planner lists no pass with decodes (in the decode launches' loop the list
  // made ptxas spill 8 bytes).
  const bool listed = kPersistent<kHeadDim> && !kDecodes && p.work_order != nullptr && p.work_counters == nullptr &&
                      p.work_ctas == static_cast<int>(gridDim.x);
  auto work_of = [&](int round) {
    if (listed) {
      if (round >= p.work_rounds) return num_work;
      return p.work_order[static_cast<int64_t>(blockIdx.x) * p.work_rounds + round];
    }
    const int b = round % 2 == 0 ? static_cast<int>(blockIdx.x) : static_cast<int>(gridDim.x - 1 - blockIdx.x);
    return round * static_cast<int>(gridDim.x) + b;
  };
  // The CTA's item of `round` (num_work or more: none left). Dynamic: waits until it is published.
  auto item_id = [&](int round) {
    if (!kPersistent<kHeadDim> && round > 0) return num_work;
    if (Tr::kItemSlots > 0 && round < Tr::kItemSlots) return sItems[round].w;
    if (!dynamic) return work_of(round);
    const int slot = round % Tr::kIdSlots;
    mbar_wait(id_full_bar(slot), (round / Tr::kIdSlots) & 1);
    return *reinterpret_cast<volatile int*>(sIds + slot);
  };
  // Dynamic: this thread read the id of `round` (its slot may be reused for round + kIdSlots).
  auto release_id = [&](int round) {
    if (dynamic) mbar_arrive(id_empty_bar(round % Tr::kIdSlots));
  };
  // Dynamic, producer thread 0: the id of `round` into its slot once every thread read the one
  // kIdSlots rounds before.
  auto publish_id = [&](int round, int w) {
    const int slot = round % Tr::kIdSlots;
    if (round >= Tr::kIdSlots) mbar_wait(id_empty_bar(slot), ((round / Tr::kIdSlots) - 1) & 1);
    *reinterpret_cast<volatile int*>(sIds + slot) = w;
    mbar_arrive(id_full_bar(slot));
  };
  struct Item {
    int seq, kvh, split, q_start, q_len, seq_len, row0;
    int row;  // the sequence's first block-table entry (p.block_table + row)
    TileKeys tk;
  };
  const bool head_major = divs.head_major != 0 && !listed && !dynamic;
  // Item w's fields from global memory (tk aside).
  auto fields_of = [&](int w) {
    Item it;
    uint32_t tile, hs, kvh, split;  // hs = kv head * S + split
    if (head_major)
      divs.tiles.divmod(static_cast<uint32_t>(w), hs, tile);
    else
      divs.heads_splits.divmod(static_cast<uint32_t>(w), tile, hs);
    divs.splits.divmod(hs, kvh, split);
    it.kvh = static_cast<int>(kvh);
    it.split = static_cast<int>(split);
    it.seq = p.tiles[2 * tile];
    it.q_start = p.query_start_loc[it.seq];
    it.q_len = p.query_start_loc[it.seq + 1] - it.q_start;
    it.row0 = p.tiles[2 * tile + 1] * kBlockM;
    // The query's rows tiled from its end (FlashAttnParams::rows_from_end): rows below 0 are none.
    // (A query of one tile skips the modulo; the shift is 0 there.)
    if (!kDecodes && p.rows_from_end) {
      const int rows = it.q_len * G;
      if (rows > kBlockM) it.row0 -= sm90_rows_from_end_shift(rows, kBlockM);
    }
    it.seq_len = p.seq_lens[it.seq];
    it.row = p.block_table_indptr ? p.block_table_indptr[it.seq] : it.seq * p.block_table_stride;
    return it;
  };
  // The fields of the CTA's item of `round`, w (item_id), tile keys aside: from the shared table
  // where it holds the round.
  auto item_fields_at = [&](int round, int w) {
    Item it;
    if (Tr::kItemSlots > 0 && round < Tr::kItemSlots) {
      const int4 a = reinterpret_cast<const int4*>(sItems + round)[0];  // w, seq, row0, q_start
      const int4 b = reinterpret_cast<const int4*>(sItems + round)[1];  // q_len, seq_len, kvh_split, row
      it.seq = a.y;
      it.row0 = a.z;
      it.q_start = a.w;
      it.q_len = b.x;
      it.seq_len = b.y;
      it.kvh = b.z & 0xffff;
      it.split = b.z >> 16;
      it.row = b.w;
    } else {
      it = fields_of(w);
    }
    return it;
  };
  auto item_at = [&](int round, int w) {
    Item it = item_fields_at(round, w);
    it.tk = tile_keys<kBlockM, kBlockN>(
        p, it.q_len, it.seq_len, it.row0, [&](int n) { return static_cast<int>(divs.group.div(static_cast<uint32_t>(n))); },
        [&](int n) { return static_cast<int>(divs.splits.div(static_cast<uint32_t>(n))); }, it.split);
    return it;
  };

  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      // Every producer thread (warp 0's under a fused write) once its cp.async copies landed, plus
      // the thread that issues the bulk copies (arrive + expected bytes) when there are maps.
      // kFp8Mma: every producer thread once it transposed its rows of V (its bulk copies complete
      // "landed" first).
      mbar_init(full_bar(s), (fused ? 32 : 128) + (maps.box_rows > 0 && !kFp8Mma ? 1 : 0));
      mbar_init(empty_bar(s), 4 * kConsumers);  // every consumer warp, once its MMAs read the stage
      mbar_init(land_bar(s), 1);                // kFp8Mma: the thread announcing the stage's bytes
    }
    for (int s = 0; s < Tr::kIdSlots; ++s) {
      mbar_init(id_full_bar(s), 1);                    // the producer thread that publishes the id
      mbar_init(id_empty_bar(s), Tr::kThreads);        // every thread, once it read the id
    }
    if (fused) *sProgress = 0;
    if (dynamic)
      publish_id(0, front ? static_cast<int>(blockIdx.x) : num_work - 1 - (static_cast<int>(blockIdx.x) - front_ctas));
  }

  if constexpr (Tr::kItemSlots > 0) {
    // One thread per round: every item's loads in flight at once.
    for (int i = tid; i < Tr::kItemSlots; i += Tr::kThreads) {
      const int w = work_of(i);
      Sm90ItemRec r{w, 0, 0, 0, 0, 0, 0, 0};
      if (w < num_work) {
        const Item it = fields_of(w);
        r = Sm90ItemRec{w, it.seq, it.row0, it.q_start, it.q_len, it.seq_len, it.kvh | (it.split << 16), it.row};
      }
      sItems[i] = r;
    }
  }
  __syncthreads();  // the barriers are initialised (and the first items' fields written)
  if (tid == 0) ATTN_SM90_TRACE_CTA(false);

  if (role == 0) {
    // ---- producer: thread t moves 16-byte chunks t, t + 128, ... of every K and V tile ----
    setmaxnreg_dec<kProducerRegs<kHeadDim, kFp8, kDecodes, kFp8Mma>>();
    if constexpr (kFusedW) {
      if (warp != 0) {
        if (!divs.write_items) {
          copy_new_rows<kChunks, kHeadDim>(p, ctid - 32);
          return;
        }
        // Each (token, kv head) once: the item of split 0 whose packed rows hold the token's first
        // row stores it, once warp 0 issued the item's last key tile (sProgress), which holds the
        // item's own tokens (causal, from scratch), so that the copy reads what that bulk copy
        // brings into L2: one read from DRAM, and the write spread over the launch instead of a
        // burst at its start (8 x 1k: copying at the item's start ran 1.014 x faster than the
        // share at the launch's start, and copying here 1.007 x faster again).
        pdl_wait_for_producer();  // the kernel ahead (a GEMM in a serving step) may still write K and V
        for (int round = 0;; ++round) {
          const int w = item_id(round);
          if (w >= num_work) break;
          while (atomicAdd(sProgress, 0) < 2 * round + divs.write_items - 1) __nanosleep(256);
          const Item it = item_fields_at(round, w);
          if (it.split != 0) continue;
          const int lo = max(it.row0, 0), hi = min(it.row0 + kBlockM, it.q_len * G);
          if (hi > lo)
            copy_item_rows<kChunks, kHeadDim>(p, ctid - 32, it.kvh, it.q_start, token_of(lo + G - 1), token_of(hi + G - 1));
        }
        return;
      }
    }
    int done = 0;  // key tiles of earlier items: tile u of the CTA uses stage u % kStages
    bool cache_written = false;  // pdl_wait_for_producer returned
    // Boxes per tile by a shift where the box is a power of two slots (a division costs the
    // producer ~25 instructions per tile and warp).
    const int box_shift = maps.box_rows > 0 && (maps.box_rows & (maps.box_rows - 1)) == 0 ? __ffs(maps.box_rows) - 1 : -1;
    // fp8 cache: producer thread t owns the 16-byte code chunks t, t + 128, ... of every tile's K
    // and V (row-major, kChunks8 per row), so that a warp's copy reads whole 128-byte row segments.
    // The codes land by cp.async inside the bytes that their own row's fp16 widening takes in the
    // swizzled stage, and are widened in place once the thread's copies landed:
    // - When kChunks8 divides 32 (all head sizes but 192) a warp's copy covers whole rows, and row
    //   r's codes sit unswizzled in row r of the stage (chunk c: column block c / 8, 16-byte slot
    //   c % 8), so a copy writes whole 128-byte lines of shared memory, as the copy engine wants
    //   (ncu: scattered 16-byte destinations made every copy take 32 wavefronts, one per lane).
    //   The warp reads its rows' codes, syncs, then overwrites them with the fp16 chunks.
    // - At head size 192 rows straddle warps: chunk c goes into one half of the 32 bytes that its
    //   own fp16 chunks 2c, 2c + 1 take (the swizzle keeps that pair together), which no other
    //   thread touches, so no sync is needed.
    // The fp16 stores go first to the chunk in the even or odd swizzle slot as c / 4 is even or
    // odd, which spreads each store of a warp over all banks.
    constexpr int kChunks8 = kHeadDim / 16;
    constexpr int kPer8 = kBlockN * kChunks8 / 128;  // chunks per thread per tile, of K and of V
    constexpr bool kShareRows = 32 % kChunks8 == 0;
    // Rows of a warp's copy when it covers whole rows: each lane reads one block-table entry per
    // tile and the others take theirs by shuffle.
    constexpr int kRowsPer8 = kShareRows ? 32 / kChunks8 : 1;
    constexpr int kLook = (kStages + 1) / 2;  // tiles whose codes are in flight: 1, 2 or 3
    static_assert(kPer8 % 2 == 0, "chunks widened two at a time");
    int widened = 0;                           // tiles widened (CTA count, as `done`)
    auto fp8_slot = [](int r, int c) -> uint32_t {
      if constexpr (kShareRows) return (c >> 3) * kKvBlockBytes + r * 128 + (c & 7) * 16;
      return (swizzled(r, 2 * c, kKvBlockBytes) & ~16u) | static_cast<uint32_t>((((c >> 2) ^ r) & 1) << 4);
    };
    // Widens this thread's chunks of the stage's K and V, then hands them to the consumers:
    // generic-proxy stores, fenced for their wgmma reads, and this thread's arrival on "full".
    auto widen_fp8 = [&](int stage) {
      uint8_t* tile = sKV + stage * kStageBytes;
#pragma unroll 1
      for (int i0 = 0; i0 < kPer8; i0 += 2) {
        uint4 codes[2][2];  // [chunk][K, V]
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int idx = ctid + 128 * (i0 + j);
          codes[j][0] = *reinterpret_cast<const uint4*>(tile + fp8_slot(idx / kChunks8, idx % kChunks8));
          codes[j][1] = *reinterpret_cast<const uint4*>(tile + kKvBytes + fp8_slot(idx / kChunks8, idx % kChunks8));
        }
        if constexpr (kShareRows) __syncwarp();  // the warp's codes are read before it overwrites them
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int idx = ctid + 128 * (i0 + j);
          const int r = idx / kChunks8, c = idx % kChunks8;
          const bool low_first = ((c >> 2) & 1) == 0;
          const uint32_t first = swizzled(r, low_first ? 2 * c : 2 * c + 1, kKvBlockBytes);
          const uint32_t second = swizzled(r, low_first ? 2 * c + 1 : 2 * c, kKvBlockBytes);
#pragma unroll
          for (int kv = 0; kv < 2; ++kv) {
            const uint4& w = codes[j][kv];
            uint8_t* t = tile + kv * kKvBytes;
            const uint2 a = fp8x4_to_16<__half, kE5m2>(low_first ? w.x : w.z);
            const uint2 b = fp8x4_to_16<__half, kE5m2>(low_first ? w.y : w.w);
            *reinterpret_cast<uint4*>(t + first) = make_uint4(a.x, a.y, b.x, b.y);
            const uint2 c2 = fp8x4_to_16<__half, kE5m2>(low_first ? w.z : w.x);
            const uint2 d = fp8x4_to_16<__half, kE5m2>(low_first ? w.w : w.y);
            *reinterpret_cast<uint4*>(t + second) = make_uint4(c2.x, c2.y, d.x, d.y);
          }
        }
      }
      fence_proxy_async();
      mbar_arrive(full_bar(stage));
    };
    // kFp8Mma: producer warp w owns rows 32w .. 32w + 31 of every tile (whole boxes of them come by
    // the copy engine, the others by its cp.async, copy i: chunk lane % 8 of row 32w + 4i + lane / 8),
    // K's codes into the swizzled K tile that Q K^T reads, V's into a staging tile swizzled the same
    // way at the start of the V region, and then it transposes those rows into
    // V^T ([128 dims][128 keys], swizzled) in the V region's upper half: P V's B operand, keys
    // contiguous. Byte 4t + i of V^T's 16-byte chunk j holds key 16j + {2t, 2t + 1, 2t + 8, 2t + 9}[i],
    // the order in which the S accumulators hold each 16 keys (k-slots 4t .. 4t + 3 of wgmma_rs_e4m3's
    // A registers are accumulator columns 2t, 2t + 1, 2t + 8, 2t + 9), so P needs no shuffle.
    auto transpose_v = [&](int stage) {
      const uint8_t* vraw = sKV + stage * kStageBytes + kKvBytes;
      uint8_t* vt = sKV + stage * kStageBytes + kKvBytes + kVtOffset;
      __syncwarp();  // the warp's copies (each lane waited for its own) are visible to all its lanes
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int j = 2 * warp + h;  // keys 16j .. 16j + 15
        uint32_t in[16];             // key 16j + k, head dims 4 lane .. 4 lane + 3: a whole row per load
#pragma unroll
        for (int k = 0; k < 16; ++k)  // bytes 4 lane .. of the row, its 16-byte chunk lane / 4 swizzled
          in[k] = *reinterpret_cast<const uint32_t*>(vraw + (16 * j + k) * 128 + ((4 * lane) ^ ((k & 7) << 4)));
#pragma unroll
        for (int st = 0; st < 4; ++st) {
          // Head dim 4 lane + e, e rotated with the lane so that each 8-lane phase of the 16-byte
          // stores covers the 8 swizzle slots once (no bank conflict).
          const int e = (st + (lane >> 1)) & 3;
          const uint32_t sel = static_cast<uint32_t>(e | ((e + 4) << 4));
          uint32_t w[4];
#pragma unroll
          for (int t = 0; t < 4; ++t)
            w[t] = __byte_perm(__byte_perm(in[2 * t], in[2 * t + 1], sel), __byte_perm(in[2 * t + 8], in[2 * t + 9], sel),
                               0x5410);
          const int d = 4 * lane + e;
          *reinterpret_cast<uint4*>(vt + d * 128 + ((j ^ (d & 7)) << 4)) = make_uint4(w[0], w[1], w[2], w[3]);
        }
      }
      fence_proxy_async();
      mbar_arrive(full_bar(stage));
    };
    // The oldest tile in flight (the CTA's tile u), once its codes landed: widened (16-bit MMAs)
    // or V transposed (this thread's cp.async landed; with maps, the stage's bulk copies too).
    auto finish_fp8 = [&](int u) {
      const int stage = u % kStages;
      if constexpr (kFp8Mma) {
        if (maps.box_rows > 0) mbar_wait(land_bar(stage), (u / kStages) & 1);
        transpose_v(stage);
      } else {
        widen_fp8(stage);
      }
    };
    // A tile is whole boxes of box_rows slots of one page each, so with maps, every box below
    // seq_len is one bulk copy per 64 dims of K and of V: the copy engine does the address
    // arithmetic that costs the gather its issue slots. The rows from the first box reaching
    // seq_len on (the last tile of a sequence) are gathered with 16-byte cp.async by all producer
    // threads, and keys at or past seq_len are zero-filled (never read from the cache: page tails
    // may hold NaN, and P = 0 times NaN is NaN).
    const int bs = p.block_size;
    const int bs_shift = (bs & (bs - 1)) == 0 ? __ffs(bs) - 1 : -1;
    // Key -> its slot in its block, and (physical block, slot) through the sequence's block-table
    // row (p.block_table + row).
    auto slot_of = [&](int key) { return bs_shift >= 0 ? key & (bs - 1) : key % bs; };
    auto page_of = [&](int row, int key, int& blk, int& slot) {
      const int blk_idx = bs_shift >= 0 ? key >> bs_shift : key / bs;
      blk = p.block_table[row + blk_idx];
      slot = key - blk_idx * bs;
    };
    // Where one key tile's K and V rows come from. The overlapped schedule (kOverlap) puts V of
    // the CTA's tile u - 1 beside K of tile u in slot u, so the source of a V may be the last
    // item's: it travels in one of these (ints: the producer has 40 registers).
    struct TileSrc {
      int row;  // the sequence's first block-table entry: p.block_table + row
      int kvh, seq_len, n_tile;
      int box_block;  // lane i of producer warp w: the physical block of box w + 4 i
    };
    // Boxes of a tile that go through the copy engine: at most kBlockN / 16 (a block size is a
    // multiple of 16). Box b belongs to lane b / 4 of producer warp b % 4: a bulk copy's operands
    // are uniform registers, so one warp issuing a tile's copies (4 per box at head size 128) for
    // its lanes holding different coordinates issues them one lane at a time; four warps take a
    // quarter of that, which shortens a stage's trip from its release to its refill.
    auto boxes_of = [&](const TileSrc& t) {
      const int rows = max(0, min(kBlockN, t.seq_len - t.n_tile * kBlockN));
      return maps.box_rows <= 0 ? 0 : box_shift >= 0 ? rows >> box_shift : rows / maps.box_rows;
    };
    // The source of tile n_tile of `item`. The lanes read their boxes' block-table entries at once,
    // before the producer waits for the stage, so the wait hides the load: one thread reading them
    // in turn would wait for each behind the copies it issued (their asm is a compiler barrier).
    auto src_of = [&](const Item& item, int row, int n_tile) {
      TileSrc t{row, item.kvh, item.seq_len, n_tile, 0};
      // Fused write: the tile comes from the step's K and V, where key k is token row + k.
      if (fused) {
        t.row = item.q_start;
        return t;
      }
      const int my_box = lane * 4 + warp;
      if (my_box < boxes_of(t)) {
        int slot;
        page_of(row, n_tile * kBlockN + my_box * maps.box_rows, t.box_block, slot);
      }
      return t;
    };
    // Bytes the bulk copies of K (is_v false) or V of t bring: whole boxes of 64 dims (at head
    // size 96 the second one's dims past 96 land as zeros).
    auto bulk_bytes = [&](const TileSrc& t, bool is_v) {
      if (fused)  // one box of kBlockN tokens per 64 dims, for a whole tile (load_half)
        return static_cast<uint32_t>(maps.box_rows > 0 && t.seq_len - t.n_tile * kBlockN >= kBlockN ? kBlockN * Tr::kDimPad * 2 : 0);
      return static_cast<uint32_t>(boxes_of(t) * maps.box_rows * (is_v ? Tr::kDimVPad : Tr::kDimPad) * 2);
    };
    // K (is_v false) or V of t into its part of stage `stage` (V kKvBytes after K).
    auto load_half = [&](const TileSrc& t, bool is_v, int stage, bool evict) {
      const int key0 = t.n_tile * kBlockN;
      const uint32_t full = full_bar(stage);
      uint8_t* dst = sKV + stage * kStageBytes + (is_v ? kKvBytes : 0);
      const CUtensorMap* map = is_v ? &maps.v : &maps.k;
      if constexpr (kFusedW) {
        // Warp 0 alone: a whole tile is kBlockN consecutive tokens of the step's K or V (one bulk
        // copy per 64 dims); the last tile of a sequence (or every tile without maps) is gathered
        // by cp.async, zero past seq_len (the next sequence's rows may hold a NaN key). The loop
        // is not unrolled: unrolled, ptxas spilled in the producer's 40 registers.
        const int rows = t.seq_len - key0;
        if (maps.box_rows > 0 && rows >= kBlockN) {
          if (elect_one_sync()) {
#pragma unroll
            for (int cb = 0; cb < Tr::kDimPad / 64; ++cb)
              tma_load_3d(smem_u32(dst) + cb * kKvBlockBytes, is_v ? &maps.v_new : &maps.k_new, cb * 64, t.kvh,
                          t.row + key0, full);
          }
          return;
        }
        const uint8_t* src = static_cast<const uint8_t*>(is_v ? p.v_new : p.k_new) + static_cast<int64_t>(t.kvh) * kHeadDim * 2;
#pragma unroll 1
        for (int idx = ctid; idx < kBlockN * kChunks; idx += 32) {
          const int r = idx / kChunks, chunk = idx % kChunks;
          const bool valid = r < rows;
          const int64_t off = static_cast<int64_t>(t.row + (valid ? key0 + r : 0)) * p.new_kv_stride * 2 + chunk * 16;
          cp_async_16(dst + swizzled(r, chunk, kKvBlockBytes), src + off, valid);
        }
        return;
      }
      const int n_boxes = boxes_of(t);
      // The warp's boxes are warp + 4 i (lane i holds the block of box warp + 4 i). Each is
      // issued by one elected lane from operands the compiler knows to be warp-uniform (the warp
      // index and the block shuffled from lane i), so no copy needs a loop over lanes.
      const int uwarp = __shfl_sync(0xffffffffu, warp, 0);
#pragma unroll
      for (int i = 0; i < (kBlockN / 16 + 3) / 4; ++i) {
        const int b = uwarp + 4 * i;
        if (b < n_boxes) {
          const int blk = __shfl_sync(0xffffffffu, t.box_block, i);
          const int in_block = slot_of(key0 + b * maps.box_rows);
          const int c1 = maps.slot_inner ? in_block : t.kvh, c2 = maps.slot_inner ? t.kvh : in_block;
          const uint32_t d = smem_u32(dst) + b * maps.box_rows * 128;
          if (elect_one_sync()) {
#pragma unroll
            for (int cb = 0; cb < (is_v ? Tr::kDimVPad : Tr::kDimPad) / 64; ++cb)
              if (kDecodes && evict) {
                tma_load_4d_hint(d + cb * kKvBlockBytes, map, cb * 64, c1, c2, blk, full, l2_evict_first_policy());
              } else {
                tma_load_4d(d + cb * kKvBlockBytes, map, cb * 64, c1, c2, blk, full);
              }
          }
        }
      }
      const int chunks = is_v ? kChunksV : kChunks;
      const uint8_t* cache = static_cast<const uint8_t*>(is_v ? p.v_cache : p.k_cache) +
                             static_cast<int64_t>(t.kvh) * p.kv_head_stride * 2;
#pragma unroll 4
      for (int idx = n_boxes * maps.box_rows * chunks + ctid; idx < kBlockN * chunks; idx += 128) {
        // Chunk idx of the tile, row-major (a fixed column when chunks divides 128).
        const int r = idx / chunks, chunk = idx % chunks;
        const int key = key0 + r;
        const bool valid = key < t.seq_len;
        int blk, slot;
        page_of(t.row, valid ? key : 0, blk, slot);
        const int64_t off = (static_cast<int64_t>(blk) * p.kv_block_stride + slot * p.kv_token_stride) * 2 + chunk * 16;
        cp_async_16(dst + swizzled(r, chunk, kKvBlockBytes), cache + off, valid);
      }
    };
    // Slot u once the consumers freed it (its (u / kStages)-th use): V of v (with_v) and K of k
    // (with_k). The copies complete the stage's "full" barrier by themselves (bulk copies by their
    // bytes, announced by one thread's arrival whether or not there are any; cp.async by an
    // arrival of each producer thread once its copies landed), so the producer never waits for its
    // own copies: every free stage is a tile in flight. Copies of other warps may complete bytes
    // before the announcing arrival: the transaction count may run below zero, and the phase
    // completes once both the arrivals and the count are done. evict: the bulk copies' lines go
    // under an L2 evict-first policy (Sm90PageMaps::decode_evict_first).
    auto fill_slot = [&](int u, const TileSrc& v, bool with_v, const TileSrc& k, bool with_k, bool evict = false) {
      const int stage = u % kStages;
      if (u >= kStages) mbar_wait(empty_bar(stage), ((u / kStages) - 1) & 1);
      if (ctid == 0 && maps.box_rows > 0)
        mbar_arrive_expect_tx(full_bar(stage), (with_v ? bulk_bytes(v, true) : 0u) + (with_k ? bulk_bytes(k, false) : 0u));
      if (with_k) load_half(k, false, stage, evict);
      if (with_v) load_half(v, true, stage, evict);
      cp_async_mbar_arrive(full_bar(stage));
    };
    TileSrc pending{};  // kOverlap: the last tile whose K went out; its V goes with the next K
    bool have_v = false;
    for (int round = 0;; ++round) {
      const int w = item_id(round);
      release_id(round);
      if (w >= num_work) break;
      if (dynamic && ctid == 0) publish_id(round + 1, claim());
      if (fused && ctid == 0) atomicExch(sProgress, 2 * round);  // the copy warps may store this item's rows
      const Item item = item_at(round, w);
      const int kvh = item.kvh, seq_len = item.seq_len;
      const int n_begin = item.tk.n_begin, num_tiles = item.tk.n_end - item.tk.n_begin;
      if (ctid == 0) {
        ATTN_SM90_TRACE_AT(round, kTraceTiles, num_tiles);
        ATTN_SM90_TRACE_AT(round, kTraceProducerItem, clock64());
      }
      const int row = item.row;
      // kFp8Mma: the item's rows of Q into L2, a token's G heads (contiguous) per producer thread.
      // Each tile of Q is read once, so the consumers' loads of it (plain loads: they quantize what
      // they load) waited for DRAM; the producer reaches an item a few key tiles before they do.
      // pq8 (2 x 4k, e4m3 cache, quantized queries) 1.019 x faster. The 16-bit kernels' cp.async
      // copies of Q gained nothing (8 x 1k 0.990, hd256 0.992, 2 x 4k 1.003; docs/PERF_NOTES.md
      // Version 55).
      if (kFp8Mma && divs.q_prefetch) {
        const int t_lo = token_of(max(item.row0, 0)), t_hi = min(item.q_len, token_of(item.row0 + kBlockM - 1) + 1);
        const char* const q_item = static_cast<const char*>(p.q) +
                                   (int64_t{item.q_start} * p.num_q_heads + kvh * G) * (kHeadDim * sizeof(Element));
        for (int t = t_lo + ctid; t < t_hi; t += 128)
          prefetch_l2_bulk(q_item + int64_t{t} * p.num_q_heads * (kHeadDim * sizeof(Element)), G * kHeadDim * sizeof(Element));
      }
      // fp8 cache: the block-table entry this lane reads for tile n_tile (rows shared, read before
      // the producer waits for the stage so that the wait hides the load): lane l reads that of
      // row l % kRowsPer8 of the warp's copy l / kRowsPer8.
      auto fp8_page = [&](int n_tile) {
        int blk = 0, slot;
        if constexpr (kFp8Mma) {
          const int key = n_tile * kBlockN + 32 * warp + lane;
          if (key < seq_len) page_of(row, key, blk, slot);
        } else if constexpr (kShareRows) {
          const int i = lane / kRowsPer8;
          const int key = n_tile * kBlockN + (warp * 32 + 128 * i) / kChunks8 + lane % kRowsPer8;
          if (i < kPer8 && key < seq_len) page_of(row, key, blk, slot);
        }
        return blk;
      };
      // The codes of this thread's chunks of tile n_tile by cp.async, each to its fp8_slot (zeros
      // at or past seq_len).
      auto issue_fp8 = [&](int n_tile, int stage, int my_blk) {
        const int key0 = n_tile * kBlockN;
        uint8_t* dst = sKV + stage * kStageBytes;
        const int64_t head_off8 = static_cast<int64_t>(kvh) * p.kv_head_stride;
        if constexpr (kFp8Mma) {
          uint8_t* vraw = dst + kKvBytes;
          // Rows below bulk_rows come as whole boxes through the copy engine: a box of K and one of
          // V per box_rows slots of a page, into the same 128-byte swizzle, issued by the warp whose
          // rows the box starts in (the lane holding its block). Their bytes complete the stage's
          // "landed" barrier, announced by thread 0 (0 bytes when none). The rows from the first
          // box reaching seq_len on (or every row, without maps) by cp.async, zero past seq_len.
          int bulk_rows = 0;
          if (maps.box_rows > 0) {
            const int rows = max(0, min(kBlockN, seq_len - key0));
            bulk_rows = box_shift >= 0 ? (rows >> box_shift) << box_shift : rows / maps.box_rows * maps.box_rows;
            if (ctid == 0) mbar_arrive_expect_tx(land_bar(stage), static_cast<uint32_t>(bulk_rows) * 256u);
            const int uwarp = __shfl_sync(0xffffffffu, warp, 0);
#pragma unroll 1
            for (int r0 = 0; r0 < bulk_rows; r0 += maps.box_rows) {
              if ((r0 >> 5) != uwarp) continue;
              const int blk = __shfl_sync(0xffffffffu, my_blk, r0 & 31);
              const int in_block = slot_of(key0 + r0);
              const int c1 = maps.slot_inner ? in_block : kvh, c2 = maps.slot_inner ? kvh : in_block;
              if (elect_one_sync()) {
                tma_load_4d(smem_u32(dst) + r0 * 128, &maps.k, 0, c1, c2, blk, land_bar(stage));
                tma_load_4d(smem_u32(vraw) + r0 * 128, &maps.v, 0, c1, c2, blk, land_bar(stage));
              }
            }
          }
          if (bulk_rows < kBlockN) {
#pragma unroll
          for (int i = 0; i < kBlockN / 16; ++i) {
            const int r = 32 * warp + 4 * i + lane / 8, c = lane % 8;
            const int blk = __shfl_sync(0xffffffffu, my_blk, 4 * i + lane / 8);
            if (r < bulk_rows) continue;
            const int key = key0 + r;
            const int64_t off = static_cast<int64_t>(blk) * p.kv_block_stride +
                                static_cast<int64_t>(slot_of(key)) * p.kv_token_stride + head_off8 + c * 16;
            const uint32_t at = r * 128 + ((c ^ (r & 7)) << 4);  // K and V rows alike swizzled
            cp_async_16(dst + at, static_cast<const uint8_t*>(p.k_cache) + off, key < seq_len);
            cp_async_16(vraw + at, static_cast<const uint8_t*>(p.v_cache) + off, key < seq_len);
          }
          }
        } else {
#pragma unroll 4
          for (int i = 0; i < kPer8; ++i) {
            const int idx = ctid + 128 * i;
            const int r = idx / kChunks8, c = idx % kChunks8;
            const int key = key0 + r;
            const bool valid = key < seq_len;
            int blk, slot;
            if constexpr (kShareRows) {
              blk = __shfl_sync(0xffffffffu, my_blk, i * kRowsPer8 + lane / kChunks8);
              slot = slot_of(key);
            } else {
              page_of(row, valid ? key : 0, blk, slot);
            }
            const int64_t off = static_cast<int64_t>(blk) * p.kv_block_stride +
                                static_cast<int64_t>(slot) * p.kv_token_stride + head_off8 + c * 16;
            uint8_t* d = dst + fp8_slot(r, c);
            cp_async_16(d, static_cast<const uint8_t*>(p.k_cache) + off, valid);
            cp_async_16(d + kKvBytes, static_cast<const uint8_t*>(p.v_cache) + off, valid);
          }
        }
        cp_async_commit();
      };
      // The CTA's key tile u goes to stage u % kStages (with kOverlap its K, and its V to stage u + 1).
      for (int t = 0; t < num_tiles; ++t) {
        const int u = done + t;
        const int stage = u % kStages;
        // The cache write ahead of this kernel (launched after it with programmatic stream
        // serialization) may still run: the first tile holding one of this step's new keys
        // (seq_len - q_len on) waits for it, the context's tiles before it stream meanwhile.
        if (!cache_written && (n_begin + t + 1) * kBlockN > seq_len - item.q_len) {
          pdl_wait_for_producer();
          cache_written = true;
        }
        if constexpr (kFp8) {
          const int blk8 = fp8_page(n_begin + t);
          if (u >= kStages) mbar_wait(empty_bar(stage), ((u / kStages) - 1) & 1);
          // kLook tiles' codes in flight, then the oldest is widened (its copies landed: the
          // kLook - 1 newer groups may still be pending). The order of the CTA's tiles carries
          // across items, so the next item's first codes load under this one's last widenings.
          issue_fp8(n_begin + t, stage, blk8);
          if (u + 1 - widened == kLook) {
            cp_async_wait<kLook - 1>();
            finish_fp8(widened);
            ++widened;
          }
        } else {
          const TileSrc src = src_of(item, row, n_begin + t);
          if constexpr (kOverlap<kHeadDim, kHeadDimV, kFp8, kDecodes>) {
            fill_slot(u, pending, have_v, src, true);
            pending = src;
            have_v = true;
          } else {
            // A decode item: its whole query is one tile.
            fill_slot(u, src, true, src, true, maps.decode_evict_first && item.q_len * G <= kBlockM);
          }
        }
        if (t == 0 && ctid == 0) ATTN_SM90_TRACE_AT(round, kTraceProducerFirst, clock64());
      }
      if (ctid == 0) ATTN_SM90_TRACE_AT(round, kTraceProducerLast, clock64());
      if (fused && ctid == 0) atomicExch(sProgress, 2 * round + 1);  // its last tile's copies are issued
      done += num_tiles;
    }
    if (fused && ctid == 0) atomicExch(sProgress, 0x7fffffff);  // no more rounds: the copy takes the rest
    if constexpr (kFp8) {
      cp_async_wait<0>();
      for (; widened < done; ++widened) finish_fp8(widened);
    }
    if (have_v) fill_slot(done, pending, true, pending, false);  // kOverlap: the last tile's V
    cp_async_wait_all();  // no copy outlives its thread
    if (!cache_written) pdl_wait_for_producer();  // no CTA finishes before the kernel ahead of it
    if (dynamic && ctid == 0) {
      // The last CTA to finish claiming zeroes the counters for the next launch (no CTA of this one
      // claims any more: each stopped at its first claim past the last item).
      __threadfence();
      if (atomicAdd(p.work_counters + 2, 1) == static_cast<int>(gridDim.x) - 1) {
        atomicExch(reinterpret_cast<unsigned long long*>(p.work_counters), 0ull);
        atomicExch(p.work_counters + 2, 0);
      }
    }
    return;
  }

  // ---- consumers ----
  setmaxnreg_inc<kConsumerRegs<kHeadDim, kFp8, kConsumers, kDecodes, kFp8Mma>>();
  const bool softcap = !kPlainScores && p.softcap > 0.f;
  const bool alibi = !kPlainScores && p.alibi_slopes != nullptr;
  // Scores in log2 units: without a soft cap s2 = qk * scale * k_descale * log2e (the descale per
  // item, below; a bf16 Q on an fp8 cache was stored times kFp8QScale).
  // kFp8Mma: the e4m3 codes of Q are q / q_scale.
  const float base_qk_scale = p.softmax_scale * (softcap ? 1.f / p.softcap : kLog2e) *
                              (kFp8Mma ? p.q_scale : kQToHalf ? 1.f / kFp8QScale : 1.f);
  const float cap_log2 = p.softcap * kLog2e;
  int done = 0;  // key tiles of earlier items (the producer's count)
  bool slot_waited = false;  // kOverlap: the slot of the next item's first K was waited for
  const int other = wg + 1 == kConsumers ? 0 : wg + 1;
  const bool last_wg = wg == kConsumers - 1;
  bool turn_passed = false;  // the last consumer gave consumer 0 its first turn of this item
  // Turns (kBarTurn: the consumers issue their products in order, one after the other) only over
  // fp8 caches and at head size 96; elsewhere each consumer issues as soon as its stage is full,
  // which ran 1.005-1.013 x faster (head sizes 64, 128, 192, 256, 16-bit caches) and 0.977-0.994 x
  // over fp8 caches (docs/PERF_NOTES.md Version 56).
  constexpr bool kTurns = kFp8 || kHeadDim == 96;
  auto turn_wait = [&]() {
    if constexpr (kTurns) named_bar_sync(kBarTurn + wg, 256);
  };
  auto turn_pass = [&](int to) {
    if constexpr (kTurns) named_bar_arrive(kBarTurn + to, 256);
  };
  // Where packed row prow of an item (query length q_len, kv head kvh) sits in q and o, in rows of
  // num_q_heads x head size past the item's first token's; -1 past the query, and below its first
  // row (rows_from_end: token_of of a negative row is negative at G = 1, else past 2^31 / G; both
  // compare past q_len unsigned).
  auto row_rel = [&](int prow, int q_len, int kvh) {
    const int t = token_of(prow);
    return static_cast<unsigned>(t) < static_cast<unsigned>(q_len) ? t * p.num_q_heads + kvh * G + (prow - t * G) : -1;
  };
  for (int round = 0;; ++round) {
    const int w = item_id(round);
    release_id(round);
    if (w >= num_work) break;
    if (ctid == 0) ATTN_SM90_TRACE_AT(round, kTraceConsumer0 + kTraceConsumerPoints * wg + kTraceItem, clock64());
    const Item item = item_at(round, w);
    const int kvh = item.kvh;
    const float k_descale = kFp8 && p.k_descale ? p.k_descale[item.seq * p.num_kv_heads + kvh] : 1.f;
    const float v_descale = kFp8 && p.v_descale ? p.v_descale[item.seq * p.num_kv_heads + kvh] : 1.f;
    const float qk_scale = base_qk_scale * k_descale;
    // Without a soft cap or ALiBi the score scale is fused into the exponent (exp2(s * scale - m)),
    // which needs a positive scale to commute with the row maximum.
    const bool fused_scale = kPlainScores || (!softcap && !alibi && qk_scale > 0.f);
    const int q_start = item.q_start, q_len = item.q_len, seq_len = item.seq_len, row0 = item.row0;
    const int pos_base = seq_len - q_len;
    const int kv_lo = item.tk.kv_lo, n_begin = item.tk.n_begin, n_end = item.tk.n_end;
    const int n_plain_lo = item.tk.n_plain_lo, n_plain_hi = item.tk.n_plain_hi;
    const int num_tiles = n_end - n_begin;
    // Whether the CTA's next item has key tiles: then the last consumer passes consumer 0 the turn
    // at its last issue of this item, and consumer 0 starts the next item (its epilogue, its Q, its
    // first Q K^T) while the others finish this one. Before, every consumer met at a CTA-wide
    // barrier at each item's start, and the tensor cores idled through the epilogue and Q's load.
    // (Without turns nobody needs it.)
    bool next_has_tiles = false;
    if (kTurns && kPersistent<kHeadDim> && last_wg) {
      const int w_next = item_id(round + 1);
      if (w_next < num_work) {
        const TileKeys nk = item_at(round + 1, w_next).tk;
        next_has_tiles = nk.n_end > nk.n_begin;
      }
    }
    const bool turn_was_passed = turn_passed;
    turn_passed = num_tiles > 0 && next_has_tiles;
    // The last consumer's final turn of the item: passed on when the next item takes turns.
    const bool pass_last = !last_wg || next_has_tiles;
    // kDecodes: a consumer whose 64 rows are all past the item's query (consumer 1 of a decode:
    // G x q_len <= 64 packed rows) computes nothing: it loads no Q, takes its turns (kTurns) and frees each
    // stage once it is full.
    const bool idle = kDecodes && row0 + wg * 64 >= q_len * G;
    // ---- Q: each warp moves its own 16 rows (16-byte chunks lane, lane + 32, ..., row-major) ----
    // A warp's rows of Q held its O of the item before (the epilogue below), which it stored itself.
    const int wrow0 = wg * 64 + warp * 16;  // the warp's first row of the tile
    __syncwarp();  // every lane's epilogue loads of those rows are done
    if (idle) {
    } else if constexpr (kFp8Mma) {
      // e4m3 codes of q / q_scale: a lane quantizes 16 head dims (two 16-byte loads) per chunk of
      // the 128-byte rows, swizzled like K; rows past the query are zero.
      const float inv_q_scale = 1.f / p.q_scale;
      const Element* q = static_cast<const Element*>(p.q);
#pragma unroll
      for (int i = 0; i < 16 * 8 / 32; ++i) {
        const int r = wrow0 + (32 * i + lane) / 8, c = (32 * i + lane) % 8;
        const int rel = row_rel(row0 + r, q_len, kvh);
        uint4 codes = make_uint4(0u, 0u, 0u, 0u);
        if (rel >= 0) {
          const Element* src = q + (int64_t{q_start} * p.num_q_heads + rel) * kHeadDim + c * 16;
          const uint4 a = *reinterpret_cast<const uint4*>(src);
          const uint4 b = *reinterpret_cast<const uint4*>(src + 8);
          auto quad = [&](uint32_t lo, uint32_t hi) {
            const float2 x = to_float2<Element>(lo), y = to_float2<Element>(hi);
            return f32x4_to_e4m3x4(x.x * inv_q_scale, x.y * inv_q_scale, y.x * inv_q_scale, y.y * inv_q_scale);
          };
          codes = make_uint4(quad(a.x, a.y), quad(a.z, a.w), quad(b.x, b.y), quad(b.z, b.w));
        }
        *reinterpret_cast<uint4*>(sQ + r * 128 + ((c ^ (r & 7)) << 4)) = codes;
      }
    } else if constexpr ((kChunks & (kChunks - 1)) == 0 && kChunks <= 16) {
      // Lane r < 16 finds where the warp's row r comes from, as rows of q past the item's first
      // token's (-1 past the query: zero-filled), and the lanes copy their chunks of those rows
      // (lane_rows_base): one token_of per row, not per chunk. (Head size 256 keeps the loop below:
      // this one made its soft-cap kernel spill 28 bytes.)
      int x0;
      uint8_t* const sts0 = sQ + lane_rows_base<kChunks>(lane, wrow0, kQBlockBytes, x0);
      const int rel = lane < 16 ? row_rel(row0 + wrow0 + lane, q_len, kvh) : -1;
      const char* const qbase =
          static_cast<const char*>(p.q) + int64_t{q_start} * p.num_q_heads * (kHeadDim * 2) + lane % kChunks * 16;
#pragma unroll
      for (int i = 0; i < 16 * kChunks / 32; ++i) {
        const int r = __shfl_sync(0xffffffffu, rel, lane / kChunks + 32 / kChunks * i);
        cp_async_16(sts0 + pass_offset<kChunks>(x0, i), qbase + static_cast<int64_t>(max(r, 0)) * (kHeadDim * 2), r >= 0);
      }
      cp_async_commit();
      cp_async_wait<0>();
      if constexpr (kQToHalf) {
        // Each thread converts the chunks it copied, in place (elementwise: the swizzle is irrelevant).
#pragma unroll
        for (int i = 0; i < 16 * kChunks / 32; ++i) fp8_q_to_half(sts0 + pass_offset<kChunks>(x0, i));
      }
    } else {
      const Element* q = static_cast<const Element*>(p.q);
#pragma unroll
      for (int i = 0; i < 16 * kChunks / 32; ++i) {
        const int r = wrow0 + (32 * i + lane) / kChunks, chunk = (32 * i + lane) % kChunks;
        const int rel = row_rel(row0 + r, q_len, kvh);
        const Element* src = q + (int64_t{q_start} * p.num_q_heads + max(rel, 0)) * kHeadDim + chunk * 8;
        cp_async_16(sQ + swizzled(r, chunk, kQBlockBytes), src, rel >= 0);
      }
      cp_async_commit();
      cp_async_wait<0>();
      if constexpr (kQToHalf) {
        // Each thread converts the chunks it copied, in place (elementwise: the swizzle is irrelevant).
#pragma unroll
        for (int i = 0; i < 16 * kChunks / 32; ++i)
          fp8_q_to_half(sQ + swizzled(wrow0 + (32 * i + lane) / kChunks, (32 * i + lane) % kChunks, kQBlockBytes));
      }
    }
    if (!idle) {
      fence_proxy_async();
      named_bar_sync(kBarQ + wg, 128);  // the consumer's 64 rows of Q landed (each warp copied 16)
      if (ctid == 0) ATTN_SM90_TRACE_AT(round, kTraceConsumer0 + kTraceConsumerPoints * wg + kTraceQ, clock64());
    }
    const int warp_row0 = row0 + wg * 64 + warp * 16;  // first packed row of this warp

    float acc_o[Tr::kAccO];  // O rows (g, g + 8) of this warp, D / 8 column blocks of 8
    float row_max[2] = {-INFINITY, -INFINITY};
    float row_sum[2] = {0.f, 0.f};  // this thread's partial sums; quad-reduced in the epilogue
#pragma unroll
    for (int i = 0; i < Tr::kAccO; ++i) acc_o[i] = 0.f;

    // Q of this warpgroup: rows 64 wg .. (8 groups of 8 rows, 1024 bytes apart); K of stage 0 (K-major,
    // as Q); V of stage 0 (N-major: the leading offset steps between 64-column blocks).
    const Sw128Desc q_desc = sw128_desc_words(sQ_addr + wg * 64 * 128, 16, 1024).uniform();
    const Sw128Desc k_desc = sw128_desc_words(sKV_addr, 16, 1024);
    const Sw128Desc v_desc = sw128_desc_words(sKV_addr + kKvBytes, kKvBlockBytes, 1024);

    // S = Q K^T of the tile in stage `stage`, issued (not waited for). k-step ks reads head dims
    // 16 ks ..: column block ks / 4 of each tile, 32-byte offset ks % 4 inside its swizzled rows.
    auto issue_qk = [&](float (&s)[Tr::kAccS], int stage) {
      const Sw128Desc kd = (k_desc + stage * kStageBytes).uniform();
      wgmma_fence();
      if constexpr (kFp8Mma) {
        // e4m3: 32 head dims (32 bytes of each 128-byte row) per k-step.
#pragma unroll
        for (int ks = 0; ks < kHeadDim / 32; ++ks) wgmma_ss_e4m3(s, q_desc.at(ks * 32), kd.at(ks * 32), ks > 0);
      } else {
#pragma unroll
        for (int ks = 0; ks < kHeadDim / 16; ++ks) {
          const uint32_t qoff = (ks / 4) * kQBlockBytes + (ks % 4) * 32;
          const uint32_t koff = (ks / 4) * kKvBlockBytes + (ks % 4) * 32;
          wgmma_ss<MmaT>(s, q_desc.at(qoff), kd.at(koff), ks > 0);
        }
      }
      wgmma_commit();
    };
    // Keys per P V k-step: 16 (16-bit operands) or 32 (e4m3).
    constexpr int kPvSteps = kFp8Mma ? kBlockN / 32 : kBlockN / 16;
    // O += P V of the tile in stage `stage`, issued: P's accumulator fragments are already the A
    // fragments of the k-steps (16 keys each, 2048 bytes of V rows apart; the instruction's N spans
    // the D / 64 column blocks, kKvBlockBytes apart).
    // kFp8Mma: B is V^T (K-major, 32 keys = 32 bytes of each row per k-step).
    auto issue_pv = [&](const uint32_t (&pa)[kPvSteps][4], int stage) {
      fence_regs(acc_o);
      wgmma_fence();
      if constexpr (kFp8Mma) {
        // V^T is K-major, like K: the K descriptor's words, moved to the stage's V^T.
        const Sw128Desc vd = (k_desc + (stage * kStageBytes + kKvBytes + kVtOffset)).uniform();
#pragma unroll
        for (int kk = 0; kk < kPvSteps; ++kk) wgmma_rs_e4m3(acc_o, pa[kk], vd.at(kk * 32), 1);
      } else {
        const Sw128Desc vd = (v_desc + stage * kStageBytes).uniform();
#pragma unroll
        for (int kk = 0; kk < kPvSteps; ++kk) wgmma_rs<MmaT>(acc_o, pa[kk], vd.at(kk * 16 * 128), 1);
      }
      wgmma_commit();
    };
    // Scores of key tile n_tile -> probabilities (in place), running max and sums updated; corr
    // receives the factor O must be rescaled by (rows g and g + 8 of this warp). Returns whether
    // either row's reference max moved (corr != 1).
    // Lazy rescaling: a row keeps the max its probabilities are taken against until a tile's scores
    // exceed it by more than kLazyLog2 (log2 units), so P <= 2^kLazyLog2 and, once a row's max has
    // settled (within the first tiles on typical data; scenario decode_peaked_scores keeps it
    // rising), O is not rescaled: the warp skips its D / 2 multiplies when no row of it moved. m,
    // the sums and O stay consistent, so the LSE and the epilogue are unchanged. 16-bit P holds up
    // to 2^8 with its usual relative rounding. e4m3 P (kFp8Mma) is stored times 2^kPLog2 =
    // 2^(8 - kLazyLog2), so that it stays within 2^8 of e4m3's 448 however far the lazy max lags,
    // while probabilities down to 2^-(6 + kPLog2) of the max stay out of e4m3's subnormals (below
    // 2^-6). A lag of 2^2 instead of none: the max settles within a few tiles instead of growing
    // at most of them (each growth rescaled the warp's 64 O accumulators).
    constexpr float kLazyLog2 = kFp8Mma ? 2.f : 8.f;
    constexpr float kPLog2 = kFp8Mma ? 8.f - kLazyLog2 : 0.f;
    constexpr float kPUnscale = 1.f / static_cast<float>(1 << static_cast<int>(kPLog2));  // 2^-kPLog2
    auto softmax = [&](float (&s)[Tr::kAccS], int n_tile, float (&corr)[2]) {
      bool moved = false;
      const bool need_mask = n_tile < n_plain_lo || n_tile >= n_plain_hi;
      const float s_scale = fused_scale ? qk_scale : 1.f;
      const int key_tile0 = n_tile * kBlockN;
      if (fused_scale && need_mask) {
        // Mask only (causal diagonal, window or chunk edge): the scores stay unscaled.
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int prow = warp_row0 + g + 8 * h;
          mask_row_scores<kBlockN / 8>(s, h, row_visible_keys(p, kv_lo, seq_len, pos_base + token_of(prow)), key_tile0, tq);
        }
      } else if (!fused_scale) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int prow = warp_row0 + g + 8 * h;
          const int t = token_of(prow);
          const int pos = pos_base + t;
          const float slope = alibi ? p.alibi_slopes[kvh * G + prow - t * G] * kLog2e : 0.f;
          const RowKeys vis = row_visible_keys(p, kv_lo, seq_len, pos);
#pragma unroll
          for (int j = 0; j < kBlockN / 8; ++j) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              float v = s[4 * j + 2 * h + e] * qk_scale;
              if (softcap) v = cap_log2 * tanhf(v);
              const int key = key_tile0 + j * 8 + 2 * tq + e;
              if (alibi) v -= slope * static_cast<float>(abs(pos - key));
              if (need_mask && (key < vis.lo || key > vis.hi)) v = -INFINITY;
              s[4 * j + 2 * h + e] = v;
            }
          }
        }
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mx = -INFINITY;
#pragma unroll
        for (int j = 0; j < kBlockN / 8; ++j) mx = fmaxf(mx, fmaxf(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        mx *= s_scale;
        // -inf + kLazyLog2 is -inf: the first tile with a visible key always sets the max.
        const bool move = mx > row_max[h] + kLazyLog2;
        const float old_max = row_max[h];
        if (move) row_max[h] = mx;
        moved |= move;
        const float m_use = row_max[h] == -INFINITY ? 0.f : row_max[h];  // no visible key yet: keep P = 0
        corr[h] = move ? fast_exp2(old_max - m_use) : 1.f;
        // e4m3 P: P x 2^kPLog2 (at most 256 of e4m3's 448 under the lazy max) keeps small
        // probabilities out of e4m3's subnormals; the row sums carry the same factor, which the
        // epilogue takes out.
        const float bias = kPLog2 - m_use;
        float sum = 0.f;
#pragma unroll
        for (int j = 0; j < kBlockN / 8; ++j) {
          s[4 * j + 2 * h] = fast_exp2(fmaf(s[4 * j + 2 * h], s_scale, bias));
          s[4 * j + 2 * h + 1] = fast_exp2(fmaf(s[4 * j + 2 * h + 1], s_scale, bias));
          sum += s[4 * j + 2 * h] + s[4 * j + 2 * h + 1];
        }
        row_sum[h] = row_sum[h] * corr[h] + sum;
      }
      return moved;
    };
    auto rescale_o = [&](const float (&corr)[2]) {
#pragma unroll
      for (int d = 0; d < kHeadDimV / 8; ++d) {
        acc_o[4 * d] *= corr[0];
        acc_o[4 * d + 1] *= corr[0];
        acc_o[4 * d + 2] *= corr[1];
        acc_o[4 * d + 3] *= corr[1];
      }
    };
    // P -> the A registers of P V. e4m3: k-step kk covers accumulator column blocks 4kk .. 4kk + 3;
    // a[0] (row g) takes columns 2t, 2t + 1 of blocks 4kk and 4kk + 1, a[1] the same of row g + 8,
    // a[2] / a[3] those of blocks 4kk + 2 and 4kk + 3 (the key order V^T was written in).
    auto to_a = [&](const float (&s)[Tr::kAccS], uint32_t (&pa)[kPvSteps][4]) {
#pragma unroll
      for (int kk = 0; kk < kPvSteps; ++kk) {
        if constexpr (kFp8Mma) {
          const float* b = s + 16 * kk;
          pa[kk][0] = f32x4_to_e4m3x4(b[0], b[1], b[4], b[5]);
          pa[kk][1] = f32x4_to_e4m3x4(b[2], b[3], b[6], b[7]);
          pa[kk][2] = f32x4_to_e4m3x4(b[8], b[9], b[12], b[13]);
          pa[kk][3] = f32x4_to_e4m3x4(b[10], b[11], b[14], b[15]);
        } else {
          pa[kk][0] = pack2<MmaT>(s[8 * kk + 0], s[8 * kk + 1]);
          pa[kk][1] = pack2<MmaT>(s[8 * kk + 2], s[8 * kk + 3]);
          pa[kk][2] = pack2<MmaT>(s[8 * kk + 4], s[8 * kk + 5]);
          pa[kk][3] = pack2<MmaT>(s[8 * kk + 6], s[8 * kk + 7]);
        }
      }
    };
    // Turns, round robin: consumer c issues Q K^T of a tile after consumer c - 1 issued its own
    // (consumer 0: after the last consumer issued that of the previous tile), then passes the turn
    // to c + 1; across items too (pass_last). Every arrive meets one sync: the last consumer passes
    // no turn after its last issue of an item unless the next item takes turns, and then gives the
    // first turn of an item only if it did not pass it already. No consumer can arrive twice on a
    // barrier before its owner synced: its next arrive needs a full round of the others' turns.
    if (last_wg && num_tiles > 0 && !turn_was_passed) turn_pass(0);
    if (idle) {
      for (int n_tile = n_begin; n_tile < n_end; ++n_tile) {
        const int u = done + n_tile - n_begin;
        const int stage = u % kStages;
        mbar_wait(full_bar(stage), (u / kStages) & 1);
        turn_wait();
        if (pass_last || n_tile + 1 < n_end) turn_pass(other);
        __syncwarp();
        if (lane == 0) mbar_arrive(empty_bar(stage));
      }
      done += num_tiles;
      continue;
    }
    if constexpr (kOverlap<kHeadDim, kHeadDimV, kFp8, kDecodes>) {
      // Slot done + t holds K of tile n_begin + t and V of tile n_begin + t - 1 (the producer's
      // order). The item's first slot was waited for at the last P V of the item before, if any;
      // its V (that item's) is spent, so the slot frees once Q K^T read its K. A turn per issue:
      // Q K^T of the first tile, Q K^T of tile t with P V of t - 1, P V of the last tile.
      if (num_tiles > 0) {
        uint32_t pa[kPvSteps][4];
        float corr[2];
        // threadIdx.y is 0 in this 1-D block, but not known to be at compile time; 0x3210 selects the
        // bytes of a byte permute's first operand.
        const uint32_t opaque_zero = threadIdx.y;
        const uint32_t keep_new = 0x3210u + opaque_zero;
        {
          const int u = done, stage = u % kStages;
          if (!slot_waited) mbar_wait(full_bar(stage), (u / kStages) & 1);
          if (maps.box_rows == 0 || (n_begin + 1) * kBlockN > seq_len) fence_proxy_async();
          float s[Tr::kAccS];
          turn_wait();
          if (ctid == 0) ATTN_SM90_TRACE_AT(round, kTraceConsumer0 + kTraceConsumerPoints * wg + kTraceTurn, clock64());
          issue_qk(s, stage);
          turn_pass(other);  // a P V follows: every consumer has another turn
          wgmma_wait<0>();
          fence_regs(s);
          if (ctid == 0) ATTN_SM90_TRACE_AT(round, kTraceConsumer0 + kTraceConsumerPoints * wg + kTraceFirstS, clock64());
          __syncwarp();
          if (lane == 0) mbar_arrive(empty_bar(stage));
          softmax(s, n_begin, corr);  // O is still zero: nothing to rescale
          to_a(s, pa);
        }
        for (int n_tile = n_begin + 1; n_tile < n_end; ++n_tile) {
          const int u = done + n_tile - n_begin, stage = u % kStages;
          mbar_wait(full_bar(stage), (u / kStages) & 1);
          // Gathered rows (see below) in K of this tile or V of the one before: the later reaches
          // seq_len first.
          if (maps.box_rows == 0 || (n_tile + 1) * kBlockN > seq_len) fence_proxy_async();
          float s[Tr::kAccS];
          turn_wait();
          issue_qk(s, stage);
          // The turn passes before P V is issued (FlashAttention-3 passes it after both): if a
          // warp's 16 back-to-back products stall their own issue, the other consumer would
          // otherwise wait through most of this P V for its Q K^T.
          turn_pass(other);
          issue_pv(pa, stage);
          wgmma_wait<1>();  // S landed; P V of the tile before still runs
          fence_regs(s);
          // Its results are pinned before the wait: left free, the compiler sinks the softmax to their
          // uses after it, where nothing overlaps.
          const bool moved = __any_sync(0xffffffffu, softmax(s, n_tile, corr));
          fence_regs(s);
          fence_regs(corr);
          fence_regs(row_sum);
          // A warp sync whose mask depends on the softmax (a run-time zero folded in): without it
          // the scheduler moves the P V wait up to the softmax's first instructions (SASS), and
          // nothing overlaps. (A never-taken trap branch there instead made ptxas serialise the
          // products and spill 480 bytes, C7512.)
          __syncwarp(0xffffffffu ^ (static_cast<uint32_t>(moved) & opaque_zero));
          wgmma_wait<0>();
          fence_regs(acc_o);
          fence_regs(pa);  // P's registers were the in-flight P V's operand until here
          // O holds the tiles before this one: rescaled to this tile's max before its P V.
          if (moved) rescale_o(corr);
          // P of this tile into the registers of the last one, each new word through a byte
          // permute that also reads the old one (the selector takes the new word's bytes only, but
          // is not known at compile time). That read keeps the old P live up to here: otherwise
          // the register allocator sees it dead once its P V was issued and gives its registers to
          // the softmax's temporaries, which then wait for that P V.
          uint32_t fresh[kPvSteps][4];
          to_a(s, fresh);
#pragma unroll
          for (int kk = 0; kk < kPvSteps; ++kk)
#pragma unroll
            for (int i = 0; i < 4; ++i) pa[kk][i] = __byte_perm(fresh[kk][i], pa[kk][i], keep_new);
          // The slot's release, its address offset by a run-time zero taken from the new P: the
          // scheduler otherwise hoists the arrive, and the P V wait it must follow, to the top of
          // the softmax (SASS), and nothing overlaps.
          __syncwarp();
          if (lane == 0) mbar_arrive(empty_bar(stage) + (pa[kPvSteps - 1][3] & opaque_zero));
        }
        {
          const int u = done + num_tiles, stage = u % kStages;
          mbar_wait(full_bar(stage), (u / kStages) & 1);
          if (maps.box_rows == 0 || n_end * kBlockN > seq_len) fence_proxy_async();
          turn_wait();
          issue_pv(pa, stage);
          if (pass_last) turn_pass(other);
          wgmma_wait<0>();
          fence_regs(acc_o);
          if (ctid == 0) ATTN_SM90_TRACE_AT(round, kTraceConsumer0 + kTraceConsumerPoints * wg + kTraceLastPv, clock64());
          slot_waited = true;  // the slot holds the next item's first K: that item frees it
        }
      }
    } else if constexpr (kFp8Mma) {
      // Ping-pong between the consumers (FlashAttention-3's inter-warpgroup schedule): a turn issues
      // P V of tile t - 1 and Q K^T of tile t together, so that one consumer's softmax runs while
      // the other's two products keep the tensor cores busy (on fp8 products a tile's softmax is
      // as long as its products). A consumer holds two stages: V of t - 1 until its P V completed.
      if (num_tiles > 0) {
        uint32_t pa[kPvSteps][4];
        float corr[2];
        int prev_stage = 0;
        for (int n_tile = n_begin; n_tile < n_end; ++n_tile) {
          const int u = done + n_tile - n_begin, stage = u % kStages;
          mbar_wait(full_bar(stage), (u / kStages) & 1);
          if (maps.box_rows == 0 || (n_tile + 1) * kBlockN > seq_len) fence_proxy_async();
          float s[Tr::kAccS];
          turn_wait();
          if (n_tile > n_begin) issue_pv(pa, prev_stage);
          issue_qk(s, stage);
          turn_pass(other);  // a last P V follows: every consumer has another turn
          wgmma_wait<0>();
          fence_regs(s);
          fence_regs(acc_o);
          if (n_tile > n_begin) {
            __syncwarp();
            if (lane == 0) mbar_arrive(empty_bar(prev_stage));  // V of tile t - 1 is read
          }
          if (__any_sync(0xffffffffu, softmax(s, n_tile, corr))) rescale_o(corr);
          to_a(s, pa);
          prev_stage = stage;
        }
        turn_wait();
        issue_pv(pa, prev_stage);
        if (pass_last) turn_pass(other);
        wgmma_wait<0>();
        fence_regs(acc_o);
        __syncwarp();
        if (lane == 0) mbar_arrive(empty_bar(prev_stage));
      }
    } else {
      for (int n_tile = n_begin; n_tile < n_end; ++n_tile) {
        const int u = done + n_tile - n_begin;
        const int stage = u % kStages;
        mbar_wait(full_bar(stage), (u / kStages) & 1);
        // Rows that cp.async wrote (generic proxy; every row without maps, else only in the tile that
        // reaches seq_len) and that the barrier made visible to this thread: the proxy fence orders
        // them before this thread's wgmma reads of the stage (async proxy). Bulk copies need none.
        if (maps.box_rows == 0 || (n_tile + 1) * kBlockN > seq_len) fence_proxy_async();
        float s[Tr::kAccS];
        turn_wait();
        // Traced builds: the item's first stage full (and turn taken), its first S, its last P V, so
        // that the item timeline splits this schedule's items as it splits the overlapped ones.
        if (ctid == 0 && n_tile == n_begin)
          ATTN_SM90_TRACE_AT(round, kTraceConsumer0 + kTraceConsumerPoints * wg + kTraceTurn, clock64());
        issue_qk(s, stage);
        if (pass_last || n_tile + 1 < n_end) turn_pass(other);
        wgmma_wait<0>();
        fence_regs(s);
        if (ctid == 0 && n_tile == n_begin)
          ATTN_SM90_TRACE_AT(round, kTraceConsumer0 + kTraceConsumerPoints * wg + kTraceFirstS, clock64());
        float corr[2];
        // A warp-uniform branch: no wgmma is in flight (the last P V was waited for).
        if (__any_sync(0xffffffffu, softmax(s, n_tile, corr))) rescale_o(corr);
        uint32_t pa[kPvSteps][4];
        to_a(s, pa);
        issue_pv(pa, stage);
        wgmma_wait<0>();
        fence_regs(acc_o);
        if (ctid == 0 && n_tile + 1 == n_end)
          ATTN_SM90_TRACE_AT(round, kTraceConsumer0 + kTraceConsumerPoints * wg + kTraceLastPv, clock64());
        __syncwarp();
        if (lane == 0) mbar_arrive(empty_bar(stage));  // this warp's MMAs no longer read the stage
      }
    }

    {
      // The item's fields, carried through the key tiles (ptxas reports no spill that it did not before;
      // loaded again here, they cost each item ~0.3 us after its last P V: the item timeline).
      const Item& ep = item;
      const int q_start = ep.q_start, q_len = ep.q_len, kvh = ep.kvh, split = ep.split;
      const int warp_row0 = ep.row0 + wg * 64 + warp * 16;
      // (a condition on the loaded fields, always true, so that the stamp waits for the loads)
      if (ctid == 0 && ep.tk.n_end >= 0 && ep.q_start >= 0)
        ATTN_SM90_TRACE_AT(round, kTraceConsumer0 + kTraceConsumerPoints * wg + kTraceEpiFields, clock64());
      // ---- epilogue from registers: each quad owns whole rows ----
      // The model-dtype O leaves through shared memory: each warp writes its 16 rows into its own rows
      // of the Q buffer (this consumer's Q K^T are done, and the warp loads its rows of the next
      // item's Q only after its stores), then stores whole rows in 16-byte chunks. Stored straight from
      // the accumulator layout, a warp's 4-byte stores filled half of each 32-byte sector and queued
      // behind each other (ncu, 8 x 1k: the stores' LSU throttle was 3 % of the samples).
      const bool use_sink = p.sinks != nullptr && split == 0;
      const int64_t slot = p.partial_offset + split;
      const bool staged = p.o_partial == nullptr;
      float row_wgt[2] = {0.f, 0.f};  // rows g and g + 8: O's factor (0 past the query: never stored)
  #pragma unroll
      for (int h = 0; h < 2; ++h) {
        float sm = row_sum[h];
        sm += __shfl_xor_sync(0xffffffffu, sm, 1);
        sm += __shfl_xor_sync(0xffffffffu, sm, 2);
        if constexpr (kFp8Mma) sm *= kPUnscale;  // the sums of P x 2^kPLog2 (O carries the factor too: wgt)
        const int prow = warp_row0 + g + 8 * h;
        const int t = token_of(prow);
        if (static_cast<unsigned>(t) >= static_cast<unsigned>(q_len)) continue;  // (as row_rel)
        const int head = kvh * G + prow - t * G;
        const RowEnd end = end_row(row_max[h], sm, use_sink, use_sink ? p.sinks[head] * kLog2e : 0.f);
        const float wgt = end.weight * v_descale * kPUnscale;
        const float lse = end.lse2 * (p.lse_base2 ? 1.f : kLn2);
        const int64_t tok = q_start + t;
        const int64_t row_index = tok * p.num_q_heads + head;
        if (!staged) {
          // o_partial: [slots, num_tokens, num_q_heads, Dv] fp32; lse_partial: [slots, num_tokens, num_q_heads]
          const int64_t prow_index = slot * p.num_tokens * p.num_q_heads + row_index;
          float* dst = p.o_partial + prow_index * kHeadDimV + 2 * tq;
  #pragma unroll
          for (int d = 0; d < kHeadDimV / 8; ++d)
            *reinterpret_cast<float2*>(dst + d * 8) = make_float2(acc_o[4 * d + 2 * h] * wgt, acc_o[4 * d + 2 * h + 1] * wgt);
          if (tq == 0) p.lse_partial[prow_index] = lse;
        } else {
          row_wgt[h] = wgt;
          if (tq == 0 && p.lse) p.lse[tok * p.lse_token_stride + head * p.lse_head_stride] = lse;
        }
      }
      if (staged) {
        // The warp's 16 rows into its rows of the Q buffer, two 16-byte chunks of both row halves per
        // stmatrix (tiles: rows g and g + 8 of chunk d, then of chunk d + 1); lane l names row l % 8
        // of tile l / 8, whose 16 bytes the swizzle puts in their own bank group. Before, a 4-byte
        // store per tile, four per stmatrix, with their addresses (ncu, 8 x 1k: ~60 of the
        // epilogue's ~655 instructions).
        const int l8 = lane & 7, tile = lane >> 3;
        const uint32_t row_addr = sQ_addr + (wg * 64 + warp * 16 + l8 + 8 * (tile & 1)) * 128;
  #pragma unroll
        for (int d = 0; d < kHeadDimV / 8; d += 2) {
          const int chunk = d + (tile >> 1);
          stmatrix_x4(row_addr + (chunk >> 3) * kQBlockBytes + (((chunk & 7) ^ l8) << 4),
                      pack2<Element>(acc_o[4 * d] * row_wgt[0], acc_o[4 * d + 1] * row_wgt[0]),
                      pack2<Element>(acc_o[4 * d + 2] * row_wgt[1], acc_o[4 * d + 3] * row_wgt[1]),
                      pack2<Element>(acc_o[4 * d + 4] * row_wgt[0], acc_o[4 * d + 5] * row_wgt[0]),
                      pack2<Element>(acc_o[4 * d + 6] * row_wgt[1], acc_o[4 * d + 7] * row_wgt[1]));
        }
      }
      if (ctid == 0) ATTN_SM90_TRACE_AT(round, kTraceConsumer0 + kTraceConsumerPoints * wg + kTraceEpiRows, clock64());
      if (staged) {
        // o: [num_tokens, num_q_heads, Dv] of the model dtype. Lane r < 16 finds where row r of the
        // warp goes, as rows of o past the item's first token's (a small number: the item's tokens x
        // num_q_heads; -1 past the sequence's query), the lanes take it from there by shuffle.
        const int rel = lane < 16 ? row_rel(warp_row0 + lane, q_len, kvh) : -1;
        __syncwarp();  // the warp's rows are in shared memory
        char* const o_item = static_cast<char*>(p.o) + int64_t{q_start} * p.num_q_heads * (kHeadDimV * 2);
        if constexpr ((kChunksV & (kChunksV - 1)) == 0) {
          // The lanes store their chunks of the warp's rows (lane_rows_base), each row's address the
          // item's first row plus the shuffled offset: ~6 instructions per chunk, where working out
          // each chunk's row, swizzle and 64-bit address took ~25 (~200 of the epilogue's ~655
          // instructions per warp and item, ncu, 8 x 1k).
          int x0;
          const uint8_t* const lds0 = sQ + lane_rows_base<kChunksV>(lane, wg * 64 + warp * 16, kQBlockBytes, x0);
          char* const obase = o_item + lane % kChunksV * 16;
  #pragma unroll
          for (int i = 0; i < 16 * kChunksV / 32; ++i) {
            const int r = __shfl_sync(0xffffffffu, rel, lane / kChunksV + 32 / kChunksV * i);
            const uint4 v = *reinterpret_cast<const uint4*>(lds0 + pass_offset<kChunksV>(x0, i));
            if (r >= 0) *reinterpret_cast<uint4*>(obase + static_cast<int64_t>(r) * (kHeadDimV * 2)) = v;
          }
        } else {
  #pragma unroll 4  // fully unrolled, head size 192 spilled (the loads ran ahead of the stores)
          for (int i = 0; i < 16 * kChunksV / 32; ++i) {
            const int r = (i * 32 + lane) / kChunksV, c = (i * 32 + lane) % kChunksV;
            const int row = __shfl_sync(0xffffffffu, rel, r);
            if (row >= 0) {
              const uint4 v = *reinterpret_cast<const uint4*>(sQ + swizzled(wg * 64 + warp * 16 + r, c, kQBlockBytes));
              *reinterpret_cast<uint4*>(o_item + static_cast<int64_t>(row) * (kHeadDimV * 2) + c * 16) = v;
            }
          }
        }
      }
    }
    if (ctid == 0) ATTN_SM90_TRACE_AT(round, kTraceConsumer0 + kTraceConsumerPoints * wg + kTraceEnd, clock64());
    done += num_tiles;
  }
  if (tid == 128) ATTN_SM90_TRACE_CTA(true);
#endif
}

}  // namespace attn::fa::sm90

namespace attn::fa {

// Whether whole pages go through the bulk tensor copy engine (default); ATTN_FA_SM90_TMA=0 gathers
// every row with cp.async, for A/B timing in one binary.
inline bool sm90_tma() {
  static const bool on = ab_switch_on("ATTN_FA_SM90_TMA");
  return on;
}

// The L2 promotion of the 16-bit maps (the pages' and the step's new rows'): 128 bytes. A box row is
// 64 elements (128 bytes) of a head row, and 256 bytes fetched the next 128 bytes with it, which a
// later box or another CTA copies at its own time (FLASHMLA's maps measured the same;
// kernels/flashmla/flashmla_launch.cu). The mixed steps 1.001-1.022 x faster, the sm_90a decode
// launches 1.02-1.12 x, the prefills unchanged (1.000-1.001; docs/PERF_NOTES.md Version 70).
// ATTN_FA_SM90_PROMOTION_128=0 restores 256 bytes, for A/B.
inline TmaL2Promotion sm90_map_promotion() {
  static const TmaL2Promotion promotion =
      ab_switch_on("ATTN_FA_SM90_PROMOTION_128") ? TmaL2Promotion::bytes128 : TmaL2Promotion::bytes256;
  return promotion;
}

// The page maps of p's caches (Sm90PageMaps), or none (box_rows = 0) when the strides do not suit
// the copy engine. A box is gcd(block size, kBlockN) slots, so a tile is a whole number of boxes
// and no box crosses a page (48-slot pages under 128-key tiles: boxes of 16, as 16-slot pages
// get; before, such pages were gathered row by row with cp.async). The maps of the last call
// are kept: encoding them costs microseconds of host time, and a layer reuses its cache.
// codes8: an fp8 cache's codes as bytes (the fp8 tensor-core path, kFp8Mma): boxes of 128 codes.
template <int kHeadDim, int kBlockN>
sm90::Sm90PageMaps page_maps(const FlashAttnParams& p, bool fp16, bool codes8 = false) {
  struct Key {
    const void *k, *v;
    int block_size, num_kv_heads;
    int64_t block, slot, head;
    bool fp16, codes8;
    bool operator==(const Key& o) const {
      return k == o.k && v == o.v && block_size == o.block_size && num_kv_heads == o.num_kv_heads && block == o.block &&
             slot == o.slot && head == o.head && fp16 == o.fp16 && codes8 == o.codes8;
    }
  };
  static thread_local Key last{};
  static thread_local sm90::Sm90PageMaps maps{};
  const Key key{p.k_cache, p.v_cache, p.block_size, p.num_kv_heads, p.kv_block_stride, p.kv_token_stride, p.kv_head_stride,
                fp16, codes8};
  if (maps.box_rows != 0 && key == last) return maps;
  sm90::Sm90PageMaps m{};
  const int bs = p.block_size;
  const int box_rows = bs > 0 ? std::gcd(bs, kBlockN) : 0;  // a multiple of 16, as both are
  const int64_t eb = codes8 ? 1 : 2;                        // bytes per element
  const bool aligned = (p.kv_block_stride * eb) % 16 == 0 && (p.kv_token_stride * eb) % 16 == 0 &&
                       (p.kv_head_stride * eb) % 16 == 0 && reinterpret_cast<uintptr_t>(p.k_cache) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(p.v_cache) % 16 == 0;
  if (box_rows == 0 || box_rows % 16 != 0 || !aligned || !sm90_tma()) return m;
  m.box_rows = box_rows;
  m.slot_inner = p.kv_token_stride <= p.kv_head_stride ? 1 : 0;
  // The block count is not a parameter: the bound only limits what the engine would fetch for an
  // out-of-range block index, and every index comes from the block table.
  constexpr uint64_t kMaxBlocks = uint64_t{1} << 30;
  const uint64_t slot_dim[2] = {static_cast<uint64_t>(bs), static_cast<uint64_t>(p.kv_token_stride * eb)};
  const uint64_t head_dim[2] = {static_cast<uint64_t>(p.num_kv_heads), static_cast<uint64_t>(p.kv_head_stride * eb)};
  const uint64_t* inner = m.slot_inner ? slot_dim : head_dim;
  const uint64_t* outer = m.slot_inner ? head_dim : slot_dim;
  const uint64_t dims[4] = {kHeadDim, inner[0], outer[0], kMaxBlocks};
  const uint64_t strides[3] = {inner[1], outer[1], static_cast<uint64_t>(p.kv_block_stride * eb)};
  const uint32_t box[4] = {codes8 ? 128u : 64u, m.slot_inner ? static_cast<uint32_t>(m.box_rows) : 1u,
                           m.slot_inner ? 1u : static_cast<uint32_t>(m.box_rows), 1};
  m.k = codes8 ? make_tensor_map_8bit(p.k_cache, 4, dims, strides, box)
               : make_tensor_map_16bit(p.k_cache, 4, dims, strides, box, fp16, sm90_map_promotion());
  m.v = codes8 ? make_tensor_map_8bit(p.v_cache, 4, dims, strides, box)
               : make_tensor_map_16bit(p.v_cache, 4, dims, strides, box, fp16, sm90_map_promotion());
  last = key;
  maps = m;
  return m;
}

// The step's new K and V as maps (Sm90PageMaps::k_new) for a launch that writes the cache itself:
// [num_tokens][num_kv_heads][head_size], token rows new_kv_stride elements apart, a box 64 dims x
// kBlockN tokens of one kv head, swizzled as the page boxes. Kept across launches as page_maps' are.
template <int kHeadDim, int kBlockN>
void new_token_maps(const FlashAttnParams& p, bool fp16, sm90::Sm90PageMaps& m) {
  if (m.box_rows == 0) return;  // no maps: warp 0 gathers every tile (load_half)
  if (reinterpret_cast<uintptr_t>(p.k_new) % 16 != 0 || reinterpret_cast<uintptr_t>(p.v_new) % 16 != 0 ||
      (p.new_kv_stride * 2) % 16 != 0)
    throw RuntimeError("flash_fwd_sm90: the step's K and V are not 16-byte aligned (fused cache write)");
  struct Key {
    const void *k, *v;
    int num_tokens, num_kv_heads;
    int64_t stride;
    bool fp16;
    bool operator==(const Key& o) const {
      return k == o.k && v == o.v && num_tokens == o.num_tokens && num_kv_heads == o.num_kv_heads &&
             stride == o.stride && fp16 == o.fp16;
    }
  };
  static thread_local Key last{};
  static thread_local CUtensorMap k{}, v{};
  const Key key{p.k_new, p.v_new, p.num_tokens, p.num_kv_heads, p.new_kv_stride, fp16};
  if (!(key == last)) {
    const uint64_t dims[3] = {kHeadDim, static_cast<uint64_t>(p.num_kv_heads), static_cast<uint64_t>(std::max(p.num_tokens, 1))};
    const uint64_t strides[2] = {kHeadDim * 2, static_cast<uint64_t>(p.new_kv_stride) * 2};
    const uint32_t box[3] = {64, 1, static_cast<uint32_t>(kBlockN)};
    k = make_tensor_map_16bit(p.k_new, 3, dims, strides, box, fp16, sm90_map_promotion());
    v = make_tensor_map_16bit(p.v_new, 3, dims, strides, box, fp16, sm90_map_promotion());
    last = key;
  }
  m.k_new = k;
  m.v_new = v;
}

// Whether a launch takes its items head-major (Sm90Divisors::head_major): one CTA per item at head
// size 256 over a 16-bit cache (2 x 4k 16/16 1.012-1.015 x faster; over an fp8 cache, half the bytes,
// 0.947 x, so it keeps tile-major). ATTN_FA_SM90_HEAD_MAJOR=0 turns it off. The persistent launches
// keep tile-major ids: head-major rounds of the snake left their CTAs' loads uneven (2 x 4k hd128
// 0.668 x); the planner's lists group their heads instead (balance_fixed_rounds).
template <int kHeadDim, bool kFp8, bool kDecodes>
bool sm90_head_major() {
  static const bool on = ab_switch_on("ATTN_FA_SM90_HEAD_MAJOR");
  return on && !sm90::kPersistent<kHeadDim> && !kFp8 && !kDecodes;
}

// SMs of the current device (the persistent grid's size, and qk 192 / v 128's choice of stages).
inline int current_sm_count() {
  int dev = 0, sms = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  return sms;
}

// Host side of one head size (flash_fwd_sm90_hd<N>.cu): the launch over the SMs.
// kFusedW: the launch writes the step's cache itself (FlashAttnParams::fused_cache_write).
template <int kHeadDim, class Element, bool kFp8, bool kE5m2, bool kFp8Mma, bool kDecodes, int kHeadDimV = kHeadDim,
          int kKeys = 0, bool kPlainScores = false, bool kFusedW = false>
void launch_flash_fwd_sm90(const FlashAttnParams& p, cudaStream_t stream) {
  using Tr = sm90::Sm90Traits<kHeadDim, kFp8, kDecodes, kHeadDimV, kKeys, kFp8Mma>;
  constexpr auto kernel =
      sm90::flash_fwd_sm90_kernel<kHeadDim, Element, kFp8, kE5m2, kFp8Mma, kDecodes, kHeadDimV, kKeys, kPlainScores, kFusedW>;
  static const cudaError_t configured =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes);
  (void)configured;
  // One persistent CTA per SM (at most one per work item), or one CTA per item.
  const int64_t work = static_cast<int64_t>(p.num_tiles) * p.num_kv_heads * p.num_splits;
  int64_t ctas = work;
  if constexpr (sm90::kPersistent<kHeadDim>) ctas = std::min<int64_t>(work, std::max(current_sm_count(), 1));
  const dim3 grid(static_cast<unsigned>(ctas));
  // An fp8 cache widened to fp16 has no maps: its producer copies the codes and widens them in
  // place. The fp8 tensor-core path (kFp8Mma) moves the codes of whole boxes by the copy engine.
  sm90::Sm90PageMaps maps = kFp8Mma ? page_maps<kHeadDim, Tr::kBlockN>(p, false, true)
                            : kFp8  ? sm90::Sm90PageMaps{}
                                    : page_maps<kHeadDim, Tr::kBlockN>(p, std::is_same_v<Element, __half>);
  if constexpr (kFusedW) new_token_maps<kHeadDim, Tr::kBlockN>(p, std::is_same_v<Element, __half>, maps);
  static const bool decode_evict_first = ab_switch_on("ATTN_FA_DECODE_EVICT_FIRST");
  maps.decode_evict_first = kDecodes && decode_evict_first ? 1 : 0;
  // After the step's cache write, which lets this kernel launch at once (the producer waits for
  // it before the first tile with new keys).
  sm90::Sm90Divisors divs;
  divs.group = FastDivU32(static_cast<uint32_t>(p.num_q_heads / p.num_kv_heads));
  divs.splits = FastDivU32(static_cast<uint32_t>(p.num_splits));
  divs.heads_splits = FastDivU32(static_cast<uint32_t>(p.num_kv_heads * p.num_splits));
  divs.tiles = FastDivU32(static_cast<uint32_t>(std::max(p.num_tiles, 1)));
  divs.head_major = sm90_head_major<kHeadDim, kFp8, kDecodes>() ? 1 : 0;
  static const bool q_prefetch = ab_switch_on("ATTN_FA_SM90_Q_PREFETCH");
  divs.q_prefetch = q_prefetch ? 1 : 0;
  // 0 .. 4, read strictly: another value warns and keeps 2.
  static const int write_items =
      static_cast<int>(env_int_in("ATTN_FA_FUSED_WRITE_ITEMS", 0, 4, "2 (the default)").value_or(2));
  divs.write_items = write_items;
  sm90::trace_before_launch(stream);
  (void)kern::launch_after_producer(kernel, grid, dim3(Tr::kThreads), Tr::kSmemBytes, stream, p, maps, divs);
  sm90::trace_after_launch(stream, static_cast<int>(grid.x));
}

// Whether a 16-bit launch's features allow the kernel without the soft-cap and ALiBi score
// path (kPlainScores). ATTN_FA_SM90_PLAIN=0 keeps the general kernel (A/B timing in one binary).
inline bool sm90_plain_scores(const FlashAttnParams& p) {
  static const bool on = ab_switch_on("ATTN_FA_SM90_PLAIN");
  return on && p.softcap <= 0.f && p.alibi_slopes == nullptr && p.softmax_scale > 0.f;
}

// Whether a launch whose features allow it (sm90_plain_scores) takes the plain-scores kernel: every
// prefill at head size 256, those of short items at 128 (the planner's mean, kSm90PlainMaxItemTiles128),
// none at 64 (0.959 x), 96 and 192 (not measured: no instantiation).
template <int kHeadDim>
bool sm90_plain_at(const FlashAttnParams& p) {
  if constexpr (kHeadDim == 256) return sm90_plain_scores(p);
  if constexpr (kHeadDim == 128)
    return sm90_plain_scores(p) && p.mean_item_key_tiles > 0 && p.mean_item_key_tiles <= kSm90PlainMaxItemTiles128;
  return false;
}

// Whether a head size 128 decode launch (kDecodes: mixed passes, and passes of speculative decodes
// beyond the mma.sync tilings) takes the plain-scores kernel: wherever its features allow it (mixed
// steps 1.000-1.016 x faster; docs/PERF_NOTES.md Version 68). ATTN_FA_SM90_DECODE_PLAIN=0 keeps the
// general one.
inline bool sm90_decode_plain_at(const FlashAttnParams& p) {
  static const bool on = ab_switch_on("ATTN_FA_SM90_DECODE_PLAIN");
  return on && sm90_plain_scores(p);
}

template <int kHeadDim, int kHeadDimV>
void run_flash_fwd_sm90(const FlashAttnParams& p, bool fp16, bool fp8, bool fp8_mma, bool decodes, cudaStream_t stream) {
  if constexpr (kHeadDimV != kHeadDim) {
    // qk 192 / v 128: prefills over a 16-bit cache only (the launcher checked). Two 128-key stages
    // where at least two CTAs per kv head run at once, which then share its K and V through L2;
    // four 64-key stages where each CTA streams a head of its own from DRAM and needs more tiles
    // in flight (MLA prefill 4 x 4k on 8k: 16 heads 1.16 x faster on 128 keys, 128 heads 0.92 x;
    // docs/PERF_NOTES.md Version 32).
    (void)fp8;
    (void)fp8_mma;
    (void)decodes;
    if (2 * static_cast<int64_t>(p.num_kv_heads) * p.num_splits <= current_sm_count()) {
      fp16 ? launch_flash_fwd_sm90<kHeadDim, __half, false, false, false, false, kHeadDimV, 128>(p, stream)
           : launch_flash_fwd_sm90<kHeadDim, __nv_bfloat16, false, false, false, false, kHeadDimV, 128>(p, stream);
    } else {
      fp16 ? launch_flash_fwd_sm90<kHeadDim, __half, false, false, false, false, kHeadDimV, 64>(p, stream)
           : launch_flash_fwd_sm90<kHeadDim, __nv_bfloat16, false, false, false, false, kHeadDimV, 64>(p, stream);
    }
    return;
  }
  if constexpr (kHeadDim == 128) {
    if (fp8_mma) {
      fp16 ? launch_flash_fwd_sm90<kHeadDim, __half, true, false, true, false>(p, stream)
           : launch_flash_fwd_sm90<kHeadDim, __nv_bfloat16, true, false, true, false>(p, stream);
      return;
    }
  }
  if (fp8 && p.kv_fp8_e5m2) {
    fp16 ? launch_flash_fwd_sm90<kHeadDim, __half, true, true, false, false>(p, stream)
         : launch_flash_fwd_sm90<kHeadDim, __nv_bfloat16, true, true, false, false>(p, stream);
    return;
  }
  if (fp8) {
    fp16 ? launch_flash_fwd_sm90<kHeadDim, __half, true, false, false, false>(p, stream)
         : launch_flash_fwd_sm90<kHeadDim, __nv_bfloat16, true, false, false, false>(p, stream);
    return;
  }
  // Decode launches of a 16-bit cache (head size 192 has no such variant: its consumers multiply
  // the zero rows instead).
  if constexpr (kHeadDim != 192) {
    if (decodes) {
      if constexpr (kHeadDim == 128) {
        if (sm90_decode_plain_at(p)) {
          fp16 ? launch_flash_fwd_sm90<kHeadDim, __half, false, false, false, true, kHeadDim, 0, true>(p, stream)
               : launch_flash_fwd_sm90<kHeadDim, __nv_bfloat16, false, false, false, true, kHeadDim, 0, true>(p, stream);
          return;
        }
      }
      fp16 ? launch_flash_fwd_sm90<kHeadDim, __half, false, false, false, true>(p, stream)
           : launch_flash_fwd_sm90<kHeadDim, __nv_bfloat16, false, false, false, true>(p, stream);
      return;
    }
  }
  // The step's cache write inside the launch (sm90::kFusedWrite): instantiated at head sizes 64 and 128.
  if (p.fused_cache_write != 0) {
    if constexpr (kHeadDim == 64) {
      fp16 ? launch_flash_fwd_sm90<kHeadDim, __half, false, false, false, false, kHeadDim, 0, false, true>(p, stream)
           : launch_flash_fwd_sm90<kHeadDim, __nv_bfloat16, false, false, false, false, kHeadDim, 0, false, true>(p, stream);
      return;
    }
    if constexpr (kHeadDim == 128) {
      if (sm90_plain_at<kHeadDim>(p)) {
        fp16 ? launch_flash_fwd_sm90<kHeadDim, __half, false, false, false, false, kHeadDim, 0, true, true>(p, stream)
             : launch_flash_fwd_sm90<kHeadDim, __nv_bfloat16, false, false, false, false, kHeadDim, 0, true, true>(p, stream);
      } else {
        fp16 ? launch_flash_fwd_sm90<kHeadDim, __half, false, false, false, false, kHeadDim, 0, false, true>(p, stream)
             : launch_flash_fwd_sm90<kHeadDim, __nv_bfloat16, false, false, false, false, kHeadDim, 0, false, true>(p, stream);
      }
      return;
    }
    throw RuntimeError("flash_fwd_sm90: the fused cache write is built for head sizes 64 and 128 (flash_attn_sm90_fused_write)");
  }
  if constexpr (kHeadDim == 128 || kHeadDim == 256) {
    if (sm90_plain_at<kHeadDim>(p)) {
      fp16 ? launch_flash_fwd_sm90<kHeadDim, __half, false, false, false, false, kHeadDim, 0, true>(p, stream)
           : launch_flash_fwd_sm90<kHeadDim, __nv_bfloat16, false, false, false, false, kHeadDim, 0, true>(p, stream);
      return;
    }
  }
  fp16 ? launch_flash_fwd_sm90<kHeadDim, __half, false, false, false, false>(p, stream)
       : launch_flash_fwd_sm90<kHeadDim, __nv_bfloat16, false, false, false, false>(p, stream);
}

// True when the current device runs an sm_90a image of the kernel (not a JIT of older PTX,
// whose body is empty).
template <int kHeadDim>
bool sm90_prefill_compiled() {
  static const bool ok =
      kern::runs_sm90a_image(reinterpret_cast<const void*>(sm90::flash_fwd_sm90_kernel<kHeadDim, __nv_bfloat16, false, false, false, false>));
  return ok;
}

#define ATTN_FA_SM90_INSTANTIATE_HEAD_SIZE(D)                                                  \
  template void run_flash_fwd_sm90<D, D>(const FlashAttnParams&, bool, bool, bool, bool, cudaStream_t); \
  template bool sm90_prefill_compiled<D>();

}  // namespace attn::fa
