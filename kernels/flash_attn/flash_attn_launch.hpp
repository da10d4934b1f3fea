#pragma once
// Plain C++ entry points of the FLASH_ATTN kernels. The selector below is the single place that
// decides what the kernels run: the backend's supports() and the launcher both call it.
#include <cuda_runtime_api.h>

#include <string>

#include "core/dtype.hpp"
#include "kernels/flash_attn/flash_attn_params.hpp"
#include "model/spec.hpp"

namespace attn {

// What selects a kernel instantiation plus the layout facts the kernels depend on.
struct FlashAttnConfig {
  int num_q_heads = 0;
  int num_kv_heads = 0;
  int head_size_qk = 0;
  int head_size_v = 0;
  DType dtype = DType::bf16;     // q and o
  DType kv_dtype = DType::bf16;  // cache: dtype, fp8_e4m3 or fp8_e5m2
  int block_size = 16;
  KvLayout layout = KvLayout::NHD;
  bool use_mla = false;
  bool q_fp8 = false;  // the queries are quantized to e4m3 (AttentionSpec::q_scale > 0)
};

// "" when the kernels of this build run `c`; otherwise why not (head size not compiled, dtype,
// block size, layout, ...).
std::string flash_attn_unsupported_reason(const FlashAttnConfig& c);

// Tile shape of one launch. The decode variant (few packed rows per sequence: G query heads of
// one decode token) spreads a tile's keys over the warps instead of its rows.
struct FlashAttnTiling {
  bool decode = false;
  int block_m = 0;        // packed query rows per tile
  int block_n = 0;        // keys per main-loop step (split chunks are multiples of it)
  int small_block_m = 0;  // a sequence with at most this many packed rows gets one decode tile
  // Every sequence in sm90_block_m tiles, as the sm_90a kernel takes them (set by the planner from
  // Sm90Passes). Only such launches may run the sm_90a kernel.
  bool sm90_tiles = false;
  bool small_seqs = false;  // some sequence fits a decode tile (query_len x G <= small_block_m)
  // The decode tiling's spec tiles (FwdTraits::kSpec, flash_attn_spec_tiles): every sequence one
  // tile of 32 packed rows (speculative decodes), two warps per 16 rows.
  bool spec = false;
};
// Packed rows of a spec tile.
constexpr int kSpecTileRows = 32;
// max_packed_rows: the largest query_len * G of any sequence in the launch.
FlashAttnTiling flash_attn_tiling(int head_size, int max_packed_rows);

// Packed query rows per tile of the sm_90a kernel, 64 per consumer warpgroup, which the kernel's
// consumer count follows: three at head size 64 in launches without a decode-sized sequence (192
// rows; FlashAttention-3's hd64 shape: with two, the chain Q K^T -> softmax -> P V left the tensor
// pipe idle 63 % of the time, ncu, docs/PERF_NOTES.md Version 24), two otherwise (128).
constexpr int sm90_block_m(int head_size, bool small_seqs) { return head_size == 64 && !small_seqs ? 192 : 128; }

// Where a query of `rows` packed rows is tiled from its end (FlashAttnParams::rows_from_end): tile
// m starts at row m x block_m minus this, so that the partial tile is its first. The planner's key
// counts and the sm_90a kernel's rows both take it from here.
constexpr int sm90_rows_from_end_shift(int rows, int block_m) {
  return rows > block_m ? (block_m - rows % block_m) % block_m : 0;
}

// Mean key tiles per work item (FlashAttnParams::mean_item_key_tiles) up to which a head size 128
// prefill takes the sm_90a kernel without the soft-cap and ALiBi score path (sm90_plain_at in
// flash_fwd_sm90.cuh). The two kernels differ only in the consumers' code: the plain one ran short
// items faster (8 x 1k, 4.5 key tiles per item: 1.028-1.030 x) and long ones slower (2 x 4k, 16.5:
// 1.002 x; 1 x 8k, 32.5: 0.991 x; 1 x 16k, 64.5: ~0.96 x; docs/PERF_NOTES.md Versions 51-52).
constexpr int kSm90PlainMaxItemTiles128 = 8;

// Whether the sm_90a wgmma kernel can serve layer `c` on the current device: head size 64, 96,
// 128, 192 or 256, fp16/bf16 with a cache of the same dtype or an fp8 one, a compute capability 9.0 device and an sm_90a
// image of that head size in this binary. ATTN_FA_SM90=0 in the environment turns it off (A/B
// timing against the mma.sync kernel).
bool flash_attn_sm90_available(const FlashAttnConfig& c);

// Which passes of a layer the planner gives the sm_90a kernel (its tiles for every sequence):
// none (it cannot serve the layer), prefills (passes without a decode-sized sequence; the others
// keep the mma.sync kernel with its decode tiles), mixed (also passes that mix decode-sized
// sequences with longer ones: a decode-sized sequence is one 128-row tile, the consumer warpgroup
// with no rows in it only takes its turns, and a mixed step is one persistent launch; passes of
// decodes alone keep the mma.sync decode tiling), or all (decode-only passes too).
enum class Sm90Passes { none, prefills, mixed, all };

// flash_attn_sm90_available, then mixed for a cache of the model dtype and prefills for an fp8 one
// (its decodes are faster on the mma.sync decode tiling, which widens the codes in registers:
// docs/PERF_NOTES.md, Version 16). Passes of 16-bit decodes alone left the sm_90a kernel in
// Version 27, when the mma.sync decode tiling's swizzled rows made it 1.004-1.036 x faster there.
// ATTN_FA_SM90_DECODE=0 keeps every pass with a decode on the mma.sync kernel, =all puts decode-only
// passes of a 16-bit cache on the sm_90a kernel too (A/B timing in one binary).
Sm90Passes flash_attn_sm90_passes(const FlashAttnConfig& c);

// Whether launch_flash_attn_fwd runs it for `c` and `t`: available, and sm90_block_m tiles for every
// sequence (FlashAttnTiling::sm90_tiles).
bool flash_attn_uses_sm90(const FlashAttnConfig& c, const FlashAttnTiling& t);

// Whether that launch runs Q K^T and P V on fp8 tensor cores (e4m3 operands, P rounded to e4m3):
// the sm_90a kernel at head size 128 over an e4m3 cache with quantized queries.
// ATTN_FA_FP8_MMA=0 keeps the fp8 codes widened to fp16 (A/B timing in one binary).
bool flash_attn_uses_fp8_mma(const FlashAttnConfig& c, const FlashAttnTiling& t);

// CTAs per SM of the kernel that launch_flash_attn_fwd runs for `c` and `t` on the current device
// (its registers and shared memory decide), for the split rule; for the persistent sm_90a kernel 1
// when the pass holds decode-sized sequences, else 2 (the rule its prefills were measured with);
// 0 when unsupported or no device answers.
int flash_attn_ctas_per_sm(const FlashAttnConfig& c, const FlashAttnTiling& t);

// Whether the decode tiling's num_splits CTAs of each tile run as one thread block cluster and merge
// their states in shared memory (FlashAttnParams::split_cluster): the mma.sync decode tiling on a
// compute capability 9.0 device with the sm_90a device code, exactly 2 splits (more ran slower, see
// the .cu), 16-bit caches at head sizes up to 128 (FwdTraits::kMaxClusterSplits: split 1's slot in
// split 0's shared memory keeps those tilings' CTAs per SM). The launch then writes O itself: no
// fp32 partials and no merge_attn_states after it.
// ATTN_FA_CLUSTER_MERGE=0 keeps the partials and the merge (A/B timing in one binary).
bool flash_attn_cluster_merge(const FlashAttnConfig& c, const FlashAttnTiling& t, int num_splits);

// Whether the mma.sync decode tiling's spec tiles (FwdTraits::kSpec) serve layer `c`: a cache of
// the model dtype at head size 64 or 128, in this build. The planner then gives a pass whose
// every sequence has 17-32 packed rows (G x q_len: speculative decodes, EAGLE verify steps) one
// such tile per sequence (flash_attn_pass_tiling). ATTN_FA_SPEC_TILES=0 turns them off (A/B timing
// in one binary: those passes then take the sm_90a kernel's decode launch, or the mma.sync prefill
// tiling without it).
bool flash_attn_spec_tiles(const FlashAttnConfig& c);

// Whether the sm_90a prefill launch for `c` and `t` can write the step's cache itself
// (FlashAttnParams::fused_cache_write, sm90::kFusedWrite): the sm_90a kernel's prefill launch (no
// decode-sized sequence) over a cache of the model dtype, at head size 64 or 128 (the instantiated ones).
// The caller adds what the launch cannot see: one pass whose every sequence starts from scratch.
// ATTN_FA_FUSED_PREFILL_WRITE=0 turns it off (A/B timing in one binary).
bool flash_attn_sm90_fused_write(const FlashAttnConfig& c, const FlashAttnTiling& t);

// Forward pass over p.num_tiles tiles with the tiling `t` (from flash_attn_tiling). Throws
// RuntimeError when `c` is unsupported or the launch fails. Allocates nothing, never syncs.
void launch_flash_attn_fwd(const FlashAttnParams& p, const FlashAttnConfig& c, const FlashAttnTiling& t,
                           cudaStream_t stream);

}  // namespace attn
