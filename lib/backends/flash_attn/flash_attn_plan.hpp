#pragma once
// Host-side schedule of the FLASH_ATTN kernels: which tiles run, how many KV splits each pass
// uses and whether the shared prefix goes through cascade attention. Pure host code.
#include <cstdint>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "kernels/flash_attn/flash_attn_launch.hpp"
#include "timing/device_query.hpp"

namespace attn {

// One forward launch.
struct FlashAttnPass {
  FlashAttnTiling tiling;
  std::vector<int32_t> tiles;  // [num_tiles, 2] (seq, m_block), most key tiles first
  int num_splits = 1;
  int kv_begin = 0;            // suffix pass: the prefix length
  bool cluster_merge = false;  // the splits merge in clusters (flash_attn_cluster_merge): no partials
  // sm_90a persistent kernel: the CTAs claim work items as they go (FlashAttnParams::work_counters)
  // instead of taking fixed rounds. Mixed passes whose fixed rounds the planner predicts uneven or
  // far below the decodes' page floor (claim_items_dynamically in flash_attn_plan.cpp).
  bool dynamic_items = false;
  // Claimed from both ends (FlashAttnParams::claim_front_ctas): this many CTAs take the prefill
  // tiles' items from the front of the list, the others the decode tiles' from the back; 0 = one end.
  int claim_front_ctas = 0;
  // sm_90a prefill launches: each query's rows tiled from its end (FlashAttnParams::rows_from_end),
  // its partial tile first; tile_keys counts them so.
  bool rows_from_end = false;
  std::vector<int64_t> tile_keys;  // [num_tiles] keys each tile attends (the schedules' cost model)
  // sm_90a prefill passes on fixed rounds (balance_fixed_rounds): CTA b of work_ctas takes the work
  // items work_order[b * work_rounds + r], r = 0, 1, ... (num_work past its last one); empty: the
  // kernel's snake of rounds (FlashAttnParams::work_order).
  std::vector<int32_t> work_order;
  int work_rounds = 0;
  int work_ctas = 0;
  // The list deals its items in this many groups of (kv head, sequence) pairs, one after the other
  // (l2_groups), so that the CTAs running at once read K/V that stay in L2; 0 = one group (or no list).
  int l2_groups = 0;
  int num_tiles() const { return static_cast<int>(tiles.size() / 2); }
};

// Balances the fixed rounds of an sm_90a prefill pass (no decode-sized sequence, items not claimed,
// a persistent head size) over min(items, num_sms) CTAs: each work item (tile, kv head, split)
// costs 2.75 key tiles plus its own, and goes, heaviest first, to the CTA with the least cost so
// far (longest processing time first), where the kernel's snake of rounds would end its longest
// CTA more than 0.5 % past what any order can reach and this ends it sooner. The snake
// left 8 x 1k's CTAs 184 / 195 / 203 us long (min / mean / max, H100; the model predicts each CTA's
// span within ~1 us, docs/PERF_NOTES.md Version 42).
// Where the pass's K/V outgrow L2 (l2_groups; kv_elem_bytes: bytes of a cache element, 0 for none
// of this), the items are dealt a group of (kv head, sequence) pairs at a time, each group heaviest
// first, and the list is kept where it ends no later than the snake or within 1 % of the best order:
// tile-major rounds spread the CTAs running at once over every (sequence, head), whose K/V then come
// from DRAM again for each tile (Version 49). Leaves other passes as they are (work_order empty).
void balance_fixed_rounds(FlashAttnPass& pass, int num_kv_heads, int head_size, int num_sms, int kv_elem_bytes = 0);
// Groups of the balanced list: (kv head, sequence) pairs, head-major, each group closed once it holds
// 24 MB of K/V and at least two items per CTA (a last group with fewer joins the one before), where
// the pass's K/V exceed twice that; else one group (count 0, of_pair empty).
// ATTN_FA_SM90_HEAD_GROUPS=0: always one group (A/B timing).
struct L2Groups {
  int count = 0;                 // groups (0: one group, nothing to deal apart)
  int num_seqs = 0;              // sequences of the pass's tiles (the pairs' second index)
  std::vector<int32_t> of_pair;  // [num_kv_heads * num_seqs] the group of pair (h, s) at h * num_seqs + s
};
L2Groups l2_groups(const FlashAttnPass& pass, int num_kv_heads, int head_size, int kv_elem_bytes, int ctas);
// balance_fixed_rounds' kv_elem_bytes for a cache of this dtype: its element size, or 0 over an fp8
// cache, whose items keep tile-major rounds (head-major ones ran slower there, Version 49).
int l2_group_elem_bytes(DType kv_cache_dtype);
// The mean key tiles (of 128 keys) of the pass's work items, each tile's cut into its splits as the
// kernel cuts them, rounded up; 0 for a pass without costs (FlashAttnParams::mean_item_key_tiles).
int mean_item_key_tiles(const FlashAttnPass& pass);
// Whether planners balance fixed rounds (balance_fixed_rounds); ATTN_FA_SM90_BALANCE=0 keeps the
// kernel's snake, for A/B timing in one binary (FLASH_ATTN and FLASHINFER's sm_90a passes alike).
bool sm90_balance_enabled();

// Whether the sm_90a kernel launched for a pass of this tiling can claim its work items
// (FlashAttnPass::dynamic_items): its decode launches at head sizes 64, 96 and 128.
bool flash_attn_sm90_can_claim(const FlashAttnTiling& t, int head_size);

struct FlashAttnSchedule {
  bool cascade = false;
  std::string cascade_reason;
  int prefix_len = 0;          // cascade: shared tokens, attended by the prefix pass
  FlashAttnPass prefix;        // cascade only: all tokens as one sequence, non-causal
  FlashAttnPass main;          // the whole attention, or the suffix pass under cascade
  // Partial states merged by merge_attn_states (0 = the main pass writes O directly).
  int num_partials() const {
    if (cascade) return prefix.num_splits + main.num_splits;
    return main.num_splits > 1 && !main.cluster_merge ? main.num_splits : 0;
  }
  std::string summary() const;
};

// Split rule (FlashDecoding): a pass of `ctas` CTAs (tiles x kv heads) fills slots = num_sms x
// ctas_per_sm at once; splitting each CTA's keys in s chunks makes ctas x s CTAs, whose last wave
// fills a share eff(s) = waves / ceil(waves) of the slots.
// - Fewer CTAs than SMs: the fewest s <= min(kMaxSplits, max_keys / kMinSplitKeys) with
//   eff(s) >= 0.95, or the best eff when none (one wave of up to ctas_per_sm CTAs per SM).
// - Otherwise no split, except for CTAs of equal work (a decode pass of the mma.sync kernel,
//   equal_ctas; the persistent sm_90a kernel has no waves) in more than one
//   wave whose last wave would leave more than 15 % of the slots idle (eff(1) < 0.85); then the
//   same search. A split costs a partial write and a merge, and prefill tiles differ in length.
// Measured on the H100 (3 rounds, median of 30): fp8 64 x 4k decode (512 CTAs, 3 per SM) took
// 277 us unsplit, 245/240/247/247 us in 2/3/4/6 splits, 247 us in 10 (eff 0.995); the 48 decodes
// at 2k (384 CTAs, 2 per SM) 176 us unsplit, 171 us in 2; a mixed step (48 decodes at 2k + 2 x 512
// new tokens, 640 prefill-tiling CTAs) 256 us unsplit, 272 us in 2 (hence equal_ctas).
constexpr int kMinSplitKeys = 256;
constexpr int kMaxSplits = 32;
int flash_attn_num_splits(int64_t ctas, int max_keys, int num_sms, int ctas_per_sm = 2, bool equal_ctas = false);

// The launcher's view of a layer: what its selector decides support and kernels on.
FlashAttnConfig make_flash_attn_config(const AttentionSpec& s);

// The tiling of one pass over sequences with these query lengths (packed rows = query_len x
// gqa): the sm_90a kernel's tiles (sm90_block_m: 128 rows, 192 for head size 64 prefills) for
// every sequence when `sm90` (flash_attn_sm90_passes)
// gives it the pass (all passes; mixed and some sequence is longer than a decode tile; prefills
// and no sequence fits a decode tile), else
// flash_attn_tiling of the longest.
// On the sm_90a kernel, a pass of speculative decodes (every sequence within a consumer's 64 rows,
// or within one 128-row tile at one item per SM at most) is a decode launch (small_seqs); num_kv_heads
// and num_sms (0: unknown) give that rule the pass's items per SM. With spec_tiles
// (flash_attn_spec_tiles of the layer), a pass whose every sequence has 17-32 packed rows takes the
// mma.sync decode tiling's spec tiles instead, one per sequence, unless `sm90` is all.
FlashAttnTiling flash_attn_pass_tiling(const std::vector<int32_t>& query_lens, int gqa, int head_size, Sm90Passes sm90,
                                       int num_kv_heads = 0, int num_sms = 0, bool spec_tiles = false);

// The share of the SMs whose CTAs, streaming decode pages through the sm_90a kernel's page boxes at
// about kStreamPerCta each, reach the device's copy bandwidth: the price of a mixed pass's decode
// pages in the claim rule (FlashAttnPass::dynamic_items). From the memory clock and bus width;
// kH100StreamShare where the device does not report them. On an H200 (4.26 TB/s) 0.94: the H100's
// 0.65 priced the pages of 64 x 1 @ 2k + 8 x 128 on 512 above every schedule's end there and kept
// its fixed rounds, 1.065 x slower than the claims this share gives (docs/PERF_NOTES.md Version 66).
// ATTN_FA_SM90_STREAM_SHARE=x forces x (A/B timing).
constexpr double kStreamPerCta = 35e9;     // bytes/s one CTA streams through page boxes (H100, Version 38)
constexpr double kH100StreamShare = 0.65;  // 3.0 TB/s / (35 GB/s x 132 SMs)
double flash_attn_stream_share(const DeviceInfo& d);

// Tiles and splits of one pass over sequences with these query and key lengths; keys below
// kv_begin are not attended. The tiling is flash_attn_pass_tiling's (head size 256 needs the
// sm_90a kernel's 128-row tiles: its mma.sync prefill tiles are 64 rows). With `config`, the split rule counts the CTAs per SM of the kernel that runs the pass
// (flash_attn_ctas_per_sm); without it, or when the device cannot tell, 2. `window` (a sliding
// window, 0: none): the keys the split rule shares out are the longest tile's window, not the whole
// sequence's (the tiles' costs, tile_keys, still count every key from kv_begin).
FlashAttnPass make_flash_attn_pass(const std::vector<int32_t>& query_lens, const std::vector<int32_t>& seq_lens,
                                   bool causal, int gqa, int head_size, int num_kv_heads, int num_sms,
                                   int kv_begin, Sm90Passes sm90 = Sm90Passes::none,
                                   const FlashAttnConfig* config = nullptr, double stream_share = kH100StreamShare,
                                   int window = 0);

FlashAttnSchedule plan_flash_attn(const Batch& b, const CommonAttentionMetadata& m, const RunOptions& opts,
                                  int num_sms, double stream_share = kH100StreamShare);

}  // namespace attn
