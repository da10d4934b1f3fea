#include "backends/flash_attn/flash_attn_plan.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <numeric>
#include <queue>
#include <utility>

#include "core/env.hpp"

namespace attn {

int flash_attn_num_splits(int64_t ctas, int max_keys, int num_sms, int ctas_per_sm, bool equal_ctas) {
  if (ctas <= 0 || num_sms <= 0) return 1;
  const int64_t slots = static_cast<int64_t>(num_sms) * std::max(ctas_per_sm, 1);
  // Share of the slots the last wave of ctas x s CTAs keeps busy.
  auto eff = [&](int s) {
    const int64_t n = ctas * s;
    return static_cast<double>(n) / static_cast<double>((n + slots - 1) / slots * slots);
  };
  if (ctas >= num_sms && (!equal_ctas || ctas < slots || eff(1) >= 0.85)) return 1;
  const int max_s = static_cast<int>(std::clamp<int64_t>(max_keys / kMinSplitKeys, 1, kMaxSplits));
  int best = 1;
  for (int s = 1; s <= max_s; ++s) {
    if (eff(s) >= 0.95) return s;
    if (eff(s) > eff(best)) best = s;
  }
  return best;
}

FlashAttnTiling flash_attn_pass_tiling(const std::vector<int32_t>& query_lens, int gqa, int head_size, Sm90Passes sm90,
                                       int num_kv_heads, int num_sms, bool spec_tiles) {
  int max_rows = 0;
  for (const int32_t q : query_lens) max_rows = std::max(max_rows, q * gqa);
  FlashAttnTiling t = flash_attn_tiling(head_size, std::max(max_rows, 1));
  // Speculative decodes (every sequence 17-32 packed rows) on the decode tiling's spec tiles: one
  // tile per sequence, each K/V tile read once for all its rows by all four warps, 2 CTAs per SM.
  // ATTN_FA_SM90_DECODE=all keeps them on the sm_90a kernel's decode launch (A/B timing).
  if (spec_tiles && sm90 != Sm90Passes::all && max_rows > t.small_block_m && max_rows <= kSpecTileRows) {
    t.block_m = t.small_block_m = kSpecTileRows;
    t.decode = t.small_seqs = t.spec = true;
    return t;
  }
  for (const int32_t q : query_lens)
    if (q * gqa <= t.small_block_m) t.small_seqs = true;
  const bool all_small = max_rows <= t.small_block_m;  // decodes alone
  if (sm90 == Sm90Passes::all || (sm90 == Sm90Passes::mixed && !all_small) ||
      (sm90 == Sm90Passes::prefills && !t.small_seqs)) {
    // One tile size for every sequence: a decode-sized one is a single 128-row tile.
    t.decode = false;
    t.sm90_tiles = true;
    // A pass whose every sequence fits one consumer's 64 rows (speculative decodes: G x q_len rows
    // past the mma.sync decode tile's 16) is a decode launch too: its items stream their pages once,
    // and the decode launch's consumers hold one stage each (no overlap of two tiles), so more stay
    // in flight (H200: 16 requests at 4k, 32 rows 1.05-1.07 x, 64 rows 1.10 x; 64 x 16 tokens at 1k,
    // 64 rows, 1.06 x). Sequences of up to a whole 128-row tile too where each CTA gets one item
    // (16 x 32 tokens at 4k, 32/8 heads: 1.15 x); with more items per CTA both consumers compute
    // and the prefill launch's overlap wins there (64 x 32 tokens at 1k / 4k: 0.948 / 0.982 x as a
    // decode launch; docs/PERF_NOTES.md Version 61). Passes with longer sequences keep the prefill
    // launch (48 8-token decodes beside 2 x 512 new tokens: 0.966 x as a decode launch). Head size 192
    // has no decode launch.
    static const bool one_tile_decodes = ab_switch_on("ATTN_FA_SM90_ONE_TILE_DECODES");
    const int64_t items = static_cast<int64_t>(query_lens.size()) * num_kv_heads;
    if (one_tile_decodes && (sm90 == Sm90Passes::all || sm90 == Sm90Passes::mixed) && head_size != 192 &&
        (max_rows <= 64 || (max_rows <= sm90_block_m(head_size, true) && items > 0 && items <= num_sms)))
      t.small_seqs = true;
    t.block_m = t.small_block_m = sm90_block_m(head_size, t.small_seqs);
  }
  return t;
}

bool flash_attn_sm90_can_claim(const FlashAttnTiling& t, int head_size) {
  // Decode launches (kDecodes in flash_fwd_sm90.cuh) at head sizes 64, 96 and 128: 192 has no
  // decode launch, and at 256 one CTA runs one item.
  return t.sm90_tiles && t.small_seqs && (head_size == 64 || head_size == 96 || head_size == 128);
}

namespace {

// ATTN_FA_SM90_DYNAMIC=1 / 0: every main pass whose kernel can claim its items does / none does
// (A/B timing of the two schedules, plan_flash_attn); -1 (unset) keeps the rule. Read once, here,
// so that the tile order (claim_front_ctas) and the schedule agree on any value.
int sm90_dynamic_override() {
  static const int forced = [] {
    const char* v = std::getenv("ATTN_FA_SM90_DYNAMIC");
    return v != nullptr ? std::atoi(v) : -1;
  }();
  return forced;
}

// The sm_90a kernel's key tiles (128 keys) of a work item with `keys` keys, at least one: the cost
// both schedule estimates below give an item.
int64_t item_key_tiles(int64_t keys) { return std::max<int64_t>((keys + 127) / 128, 1); }

// Key tiles of split sp of a tile with n of them, cut into `splits` as tile_keys (flash_mask.cuh)
// cuts them.
int64_t split_key_tiles(int64_t n, int64_t splits, int64_t sp) {
  const int64_t each = (n + splits - 1) / splits;
  return std::max<int64_t>(0, std::min(n, (sp + 1) * each) - sp * each);
}

// The kernel's snake of fixed rounds (flash_fwd_sm90.cuh), item by item: round r's items go to
// CTAs 0, 1, ... in even rounds and from the far end in odd ones. next() is the CTA of the next item.
struct SnakeRounds {
  int ctas;
  int pos = 0;
  bool even = true;
  int next() {
    const int b = even ? pos : ctas - 1 - pos;
    if (++pos == ctas) {
      pos = 0;
      even = !even;
    }
    return b;
  }
};

// Whether the persistent sm_90a kernel's CTAs should claim a mixed pass's work items as they go
// (FlashAttnPass::dynamic_items) rather than take fixed rounds. Both schedules are simulated with
// an item costing its key tiles (tile order as launched, items_per_tile consecutive items per tile:
// kv heads x splits): one CTA spends about as long on a decode's key tile as on a prefill's (1.9
// and 2.2 us, H100; Version 38), so fixed rounds that hand some CTAs many more tiles than others
// end late. Neither can beat the decodes' pages read at the copy bandwidth, which stream_share x
// the SMs streaming at once reach (flash_attn_stream_share: 0.65 on the H100, 0.94 on the H200).
// Dynamic where that predicts >= 10 % less time (claiming costs each item an atomic and balances
// worse where the tiles are even), and where the decodes are most of the work, whose fixed rounds
// ran far slower than the model says.
bool claim_items_dynamically(const std::vector<int64_t>& tile_keys, const std::vector<bool>& tile_is_decode,
                             int items_per_tile, int num_sms, double stream_share) {
  const int64_t items = static_cast<int64_t>(tile_keys.size()) * items_per_tile;
  const int ctas = static_cast<int>(std::min<int64_t>(items, std::max(num_sms, 1)));
  if (ctas <= 0 || items <= ctas) return false;  // one item per CTA: nothing to balance
  auto cost_of = [&](std::size_t t) { return item_key_tiles(tile_keys[t]); };
  // Fixed rounds: the kernel's snake, CTA by CTA.
  std::vector<int64_t> fixed(static_cast<std::size_t>(ctas), 0);
  int64_t decode_tiles = 0, total = 0, largest = 0;
  SnakeRounds snake{ctas};
  for (std::size_t t = 0; t < tile_keys.size(); ++t) {
    const int64_t cost = cost_of(t);
    if (tile_is_decode[t]) decode_tiles += cost * items_per_tile;
    total += cost * items_per_tile;
    largest = std::max(largest, cost);
    for (int i = 0; i < items_per_tile; ++i) fixed[static_cast<std::size_t>(snake.next())] += cost;
  }
  const double decode_per_sm = static_cast<double>(decode_tiles) / std::max(num_sms, 1);
  const double floor = decode_per_sm / stream_share;
  const double longest = static_cast<double>(*std::max_element(fixed.begin(), fixed.end()));
  // Where the decodes' key tiles per SM are at least 0.715 x the longest CTA's tiles (most of the
  // work), claimed from both ends (two items per CTA or more): fixed rounds ran 1.53 x slower on
  // 128 decodes at 1k + 2 x 1024 on 1k at 32/32 heads of size 96 (4096 one-row decode items, 0.83)
  // and 1.008 x on 96 x 1 @ 4k + 4 x 256 on 2k at 32/8 heads of size 128 (0.82), H100, Version 39;
  // 48 x 1 @ 2k + 2 x 512 on 1k (0.67) keeps its fixed rounds, which claims from either end lose
  // to. This reads the work mix, not the device's bandwidth: on the H200 the first ran 1.26 x
  // slower on fixed rounds and the second 1.001 x (Version 66), though the pages priced at its
  // bandwidth no longer set either's time (0.715 is 1.1 x the H100's stream share, where this
  // rule was first written as the floor exceeding the longest CTA by 10 %).
  if (items >= 2 * static_cast<int64_t>(ctas) && decode_per_sm >= 0.715 * longest) return true;
  const double t_fixed = std::max(longest, floor);
  // Claims end no earlier than the mean load or the largest item: where even that is within 10 %
  // of the fixed rounds, the simulation below cannot say yes (most steps stop here).
  const double lower = std::max({static_cast<double>(total) / ctas, static_cast<double>(largest), floor});
  if (lower >= 0.9 * t_fixed) return false;
  // Claims: each CTA takes the next item in list order when it frees up.
  std::priority_queue<int64_t, std::vector<int64_t>, std::greater<int64_t>> free_at;
  for (int b = 0; b < ctas; ++b) free_at.push(0);
  for (std::size_t t = 0; t < tile_keys.size(); ++t) {
    for (int i = 0; i < items_per_tile; ++i) {
      const int64_t start = free_at.top();
      free_at.pop();
      free_at.push(start + cost_of(t));
    }
  }
  int64_t claimed = 0;
  while (!free_at.empty()) {
    claimed = std::max(claimed, free_at.top());
    free_at.pop();
  }
  return std::max(static_cast<double>(claimed), floor) < 0.9 * t_fixed;
}

// A mixed pass whose items are claimed (claim_items_dynamically) is claimed from both ends
// (FlashAttnPass::claim_front_ctas): how many CTAs take the prefill items from the front, the
// others taking the decode items from the back, or 0 (one end, in the interleaved order). The
// decodes' CTAs are the share of the grid that the decodes' work takes (per CTA, 1.9 us per decode
// key tile and 2.2 per prefill key tile, H100; Version 38), so that both kinds end together;
// whichever group runs out first takes the other's items from its end. Against claims from one end
// (H100, Version 39): 32 x 1 @ 8k + 2048 new 1.054 x, 128 x 1 @ 1k + 2 x 1024 on 1k 1.027 x (at
// head size 64 1.018 x). Not where fixed rounds are even: 48 x 1 @ 2k + 2 x 512 on 1k ran 0.941 x
// the fixed rounds from both ends, whose interleaved order lets each CTA's producer load a decode's
// pages under its prefill tiles. Both ends need items of their own beyond the CTAs' first ones.
// ATTN_FA_SM90_TWO_ENDED=0 claims from the front only, as ATTN_FA_SM90_DYNAMIC=0 takes fixed
// rounds (A/B timing); ATTN_FA_SM90_FRONT_CTAS=N forces N front CTAs.
int claim_front_ctas(const std::vector<int64_t>& tile_keys, const std::vector<bool>& tile_is_decode,
                     int items_per_tile, int num_sms) {
  static const bool enabled = [] {
    const char* two = std::getenv("ATTN_FA_SM90_TWO_ENDED");
    return (two == nullptr || std::string(two) != "0") && sm90_dynamic_override() != 0;
  }();
  static const int forced = [] {
    const char* v = std::getenv("ATTN_FA_SM90_FRONT_CTAS");
    return v != nullptr ? std::max(std::atoi(v), 0) : 0;
  }();
  const int64_t items = static_cast<int64_t>(tile_keys.size()) * items_per_tile;
  const int ctas = static_cast<int>(std::min<int64_t>(items, std::max(num_sms, 1)));
  if (!enabled || ctas < 2 || items < 2 * static_cast<int64_t>(ctas)) return 0;
  if (forced > 0) return std::min(forced, ctas - 1);
  double dw = 0, pw = 0;  // the decodes' and the prefills' work per kv head and split, us
  for (std::size_t t = 0; t < tile_keys.size(); ++t)
    (tile_is_decode[t] ? dw : pw) += static_cast<double>(item_key_tiles(tile_keys[t])) * (tile_is_decode[t] ? 1.9 : 2.2);
  const int decode_ctas = std::clamp(static_cast<int>(std::lround(ctas * dw / (dw + pw))), 1, ctas - 1);
  return ctas - decode_ctas;
}

}  // namespace

FlashAttnPass make_flash_attn_pass(const std::vector<int32_t>& query_lens, const std::vector<int32_t>& seq_lens,
                                   bool causal, int gqa, int head_size, int num_kv_heads, int num_sms,
                                   int kv_begin, Sm90Passes sm90, const FlashAttnConfig* config,
                                   double stream_share, int window) {
  FlashAttnPass pass;
  pass.kv_begin = kv_begin;
  int max_keys = 0;
  for (size_t s = 0; s < query_lens.size(); ++s) max_keys = std::max(max_keys, seq_lens[s] - kv_begin);
  pass.tiling = flash_attn_pass_tiling(query_lens, gqa, head_size, sm90, num_kv_heads, num_sms,
                                       config != nullptr && flash_attn_spec_tiles(*config));
  const int decode_rows = pass.tiling.spec ? kSpecTileRows : flash_attn_tiling(head_size, 1).small_block_m;
  const bool all_decodes =
      std::all_of(query_lens.begin(), query_lens.end(), [&](int32_t q) { return q * gqa <= decode_rows; });
  // CTAs of equal work for the split rule: every sequence decode-sized (one tile each), in waves of
  // CTAs. The persistent sm_90a kernel has no waves: its decodes stream at the full bandwidth from
  // fewer SMs than it has (Version 14: balancing the SMs' work did not shorten the run), so there
  // only passes with fewer work items than SMs split.
  const bool equal_ctas = all_decodes && !pass.tiling.sm90_tiles;

  struct Tile {
    int32_t seq, m_block;
    int64_t keys;         // from kv_begin to its last token's key: the sort, the balanced rounds
    int64_t window_keys;  // the keys its sliding window holds (= keys without one): the claim rule
  };
  std::vector<Tile> tiles;
  // The sm_90a kernel's prefill launches (no decode-sized sequence) tile each query from its end:
  // a 4k query at head size 64 (192-row tiles) then has its 64-row tile first, on 1 key tile,
  // where its last tile, on 32, left two of three consumers without rows (hd64 2 x 4k 1.027 x,
  // docs/PERF_NOTES.md Version 60). Decode launches (mixed passes) keep them from the start: their
  // prefill tiles were not measured so.
  pass.rows_from_end = pass.tiling.sm90_tiles && !pass.tiling.small_seqs;
  // A sliding window: a tile attends the keys from its first token's window on (tile_keys in
  // flash_mask.cuh), and the kernel's splits share out those, not the sequence's: the split rule
  // takes the longest tile's window, as FlashAttention-3's caps the keys of local attention
  // (get_num_splits). Gemma-2's window test (9 prefill tiles x 8 kv heads) ran 3 splits of <= 319
  // keys in 44.3 us, unsplit 36.5; gpt-oss 16 x 1 @ 32k (window 128) 4 splits 12.0, unsplit 11.1
  // (H200, docs/PERF_NOTES.md Version 72). The claim rule of a mixed pass prices each tile by its
  // window's keys too: sinks_gptoss's step 1.043 x (Version 73). The sort and the balanced rounds
  // (tile_keys) keep every key from kv_begin: with the window's, gpt-oss 2 x 4k ran 0.981 x.
  // ATTN_FA_WINDOW_KEYS=0 counts every key in the split and claim rules too (A/B timing).
  static const bool window_keys = ab_switch_on("ATTN_FA_WINDOW_KEYS");
  const int tile_window = window_keys ? window : 0;
  int64_t max_window_keys = 0;
  for (size_t s = 0; s < query_lens.size(); ++s) {
    const int rows = query_lens[s] * gqa;
    // Decode-sized sequences get one decode tile (see flash_fwd_kernel), others prefill tiles.
    const int bm = rows <= pass.tiling.small_block_m ? pass.tiling.small_block_m : pass.tiling.block_m;
    const int shift = pass.rows_from_end ? sm90_rows_from_end_shift(rows, bm) : 0;
    for (int mb = 0; mb * bm < rows; ++mb) {
      const int last_token = std::min(rows - 1, (mb + 1) * bm - 1 - shift) / gqa;
      const int64_t pos_base = seq_lens[s] - query_lens[s];
      const int64_t hi = causal ? pos_base + last_token + 1 : seq_lens[s];
      const int64_t keys = std::max<int64_t>(hi - kv_begin, 0);
      tiles.push_back({static_cast<int32_t>(s), mb, keys, keys});
      if (tile_window > 0) {
        const int64_t lo = std::max<int64_t>(kv_begin, pos_base + std::max(mb * bm - shift, 0) / gqa - tile_window + 1);
        max_window_keys = std::max(max_window_keys, hi - lo);
        tiles.back().window_keys = std::max<int64_t>(hi - lo, 0);
      }
    }
  }
  if (tile_window > 0) max_keys = static_cast<int>(std::min<int64_t>(max_window_keys, max_keys));
  // Longest first: the last wave then holds the short tiles (causal prefill, mixed batches).
  std::stable_sort(tiles.begin(), tiles.end(), [](const Tile& a, const Tile& b) { return a.keys > b.keys; });
  // The sm_90a kernel's mixed passes order their decode and prefill tiles below.
  auto is_decode = [&](const Tile& t) { return query_lens[static_cast<size_t>(t.seq)] * gqa <= decode_rows; };
  std::vector<Tile> dec, pre;  // the sm_90a kernel's decode and prefill tiles, each longest first
  if (pass.tiling.sm90_tiles)
    for (const Tile& t : tiles) (is_decode(t) ? dec : pre).push_back(t);
  const bool mixed = !dec.empty() && !pre.empty();  // decode and prefill tiles in one sm_90a launch
  const int per_sm = config != nullptr ? flash_attn_ctas_per_sm(*config, pass.tiling) : 0;
  pass.num_splits =
      flash_attn_num_splits(static_cast<int64_t>(tiles.size()) * num_kv_heads, max_keys, num_sms, per_sm > 0 ? per_sm : 2,
                            equal_ctas);
  const int items_per_tile = num_kv_heads * pass.num_splits;
  if (mixed) {
    // Decode tiles spread evenly among the prefill tiles, so that at any time some CTAs stream
    // decode pages while the others compute prefill tiles, and a CTA's producer loads its next
    // decode's pages under its prefill tiles. Longest first alone put every decode (2k keys) before
    // the prefill tiles (<= 1.5k) of a chunked-prefill step: the memory idled in the compute phase
    // and the tensor cores in the streaming one (H100, 48 decodes at 2k + 2 x 512 on 1k: 208.3 ->
    // 187.4 us). Next from the list whose next tile sits earlier in its own list's share of the order.
    tiles.clear();
    size_t i = 0, j = 0;
    while (i < pre.size() || j < dec.size()) {
      const bool take_pre = j == dec.size() || (i < pre.size() && (2 * i + 1) * dec.size() <= (2 * j + 1) * pre.size());
      tiles.push_back(take_pre ? pre[i++] : dec[j++]);
    }
  }
  if (mixed && flash_attn_sm90_can_claim(pass.tiling, head_size)) {
    std::vector<int64_t> keys;
    std::vector<bool> decode;
    for (const Tile& t : tiles) {
      keys.push_back(t.window_keys);
      decode.push_back(is_decode(t));
    }
    pass.dynamic_items = claim_items_dynamically(keys, decode, items_per_tile, num_sms, stream_share);
    if (pass.dynamic_items) pass.claim_front_ctas = claim_front_ctas(keys, decode, items_per_tile, num_sms);
    if (pass.claim_front_ctas > 0) {
      // Claimed from both ends: the prefill tiles longest first from the front, the decode tiles
      // longest first from the back.
      tiles = pre;
      tiles.insert(tiles.end(), dec.rbegin(), dec.rend());
    }
  }
  pass.tiles.reserve(tiles.size() * 2);
  for (const Tile& t : tiles) {
    pass.tiles.push_back(t.seq);
    pass.tiles.push_back(t.m_block);
    pass.tile_keys.push_back(t.keys);
  }
  return pass;
}

// An item's cost outside its key tiles, in quarter key tiles (11 = 2.75 key tiles): ~4.7 us of Q,
// first product and epilogue against ~1.7 us per key tile (the item timeline of 8 x 1k and 2 x 4k,
// hd128, H100; Versions 40-41).
constexpr int64_t kFixedRoundsItemQuarters = 11;

// The K/V bytes a group of the balanced list may hold (l2_groups): half an H100's 50 MB of L2, the
// rest left to Q, O and the lines of the group's neighbours as the CTAs move on.
constexpr int64_t kL2GroupBytes = int64_t{24} << 20;

bool sm90_balance_enabled() {
  static const bool balance = ab_switch_on("ATTN_FA_SM90_BALANCE");
  return balance;
}

bool sm90_head_groups_enabled() {
  static const bool groups = ab_switch_on("ATTN_FA_SM90_HEAD_GROUPS");
  return groups;
}

L2Groups l2_groups(const FlashAttnPass& pass, int num_kv_heads, int head_size, int kv_elem_bytes, int ctas) {
  L2Groups g;
  if (kv_elem_bytes <= 0 || !sm90_head_groups_enabled()) return g;
  // Each sequence's keys (its last tile's, the most of any of its tiles) and items per kv head.
  std::vector<int64_t> seq_keys, seq_items;
  for (int t = 0; t < pass.num_tiles(); ++t) {
    const auto seq = static_cast<std::size_t>(pass.tiles[2 * static_cast<std::size_t>(t)]);
    if (seq >= seq_keys.size()) {
      seq_keys.resize(seq + 1, 0);
      seq_items.resize(seq + 1, 0);
    }
    seq_keys[seq] = std::max(seq_keys[seq], pass.tile_keys[static_cast<std::size_t>(t)]);
    seq_items[seq] += std::max(pass.num_splits, 1);
  }
  const int64_t pair_bytes_per_key = int64_t{2} * head_size * kv_elem_bytes;  // K and V
  int64_t keys = 0;
  for (const int64_t k : seq_keys) keys += k;
  if (keys * pair_bytes_per_key * num_kv_heads <= 2 * kL2GroupBytes) return g;
  // Pairs head-major, each group closed once it holds kL2GroupBytes and enough items for the CTAs
  // to even out within it (two each at least).
  const int num_seqs = static_cast<int>(seq_keys.size());
  const int64_t min_items = 2 * static_cast<int64_t>(ctas);
  g.num_seqs = num_seqs;
  g.of_pair.assign(static_cast<std::size_t>(num_kv_heads) * num_seqs, 0);
  std::vector<int64_t> group_items;
  int64_t bytes = 0, items = 0;
  for (int h = 0; h < num_kv_heads; ++h) {
    for (int sq = 0; sq < num_seqs; ++sq) {
      const int64_t pb = seq_keys[static_cast<std::size_t>(sq)] * pair_bytes_per_key;
      if (items >= min_items && bytes + pb > kL2GroupBytes) {
        group_items.push_back(items);
        bytes = items = 0;
      }
      bytes += pb;
      items += seq_items[static_cast<std::size_t>(sq)];
      g.of_pair[static_cast<std::size_t>(h) * num_seqs + sq] = static_cast<int32_t>(group_items.size());
    }
  }
  group_items.push_back(items);
  g.count = static_cast<int>(group_items.size());
  // A last group too small to even the CTAs out joins the one before it.
  if (g.count > 1 && group_items.back() < min_items) {
    for (int32_t& x : g.of_pair)
      if (x == g.count - 1) x = g.count - 2;
    --g.count;
  }
  if (g.count <= 1) g = L2Groups{};
  return g;
}

int l2_group_elem_bytes(DType kv_cache_dtype) {
  return is_fp8(kv_cache_dtype) ? 0 : static_cast<int>(dtype_size(kv_cache_dtype));
}

int mean_item_key_tiles(const FlashAttnPass& pass) {
  if (pass.tile_keys.empty() || pass.tile_keys.size() != static_cast<std::size_t>(pass.num_tiles())) return 0;
  const int64_t splits = std::max(pass.num_splits, 1);
  int64_t sum = 0;
  for (const int64_t keys : pass.tile_keys)
    for (int64_t sp = 0; sp < splits; ++sp) sum += split_key_tiles(item_key_tiles(keys), splits, sp);
  const int64_t items = static_cast<int64_t>(pass.tile_keys.size()) * splits;
  return static_cast<int>((sum + items - 1) / items);
}

void balance_fixed_rounds(FlashAttnPass& pass, int num_kv_heads, int head_size, int num_sms, int kv_elem_bytes) {
  pass.work_order.clear();
  pass.work_rounds = pass.work_ctas = pass.l2_groups = 0;
  // Head size 256 runs one CTA per item (kPersistent in flash_fwd_sm90.cuh; its launches take the
  // items head-major themselves); decode launches and claimed items keep their own order.
  if (!pass.tiling.sm90_tiles || pass.tiling.small_seqs || pass.dynamic_items || head_size == 256) return;
  if (pass.tile_keys.size() != static_cast<std::size_t>(pass.num_tiles())) return;  // no costs to balance by
  const int splits = std::max(pass.num_splits, 1);
  const int64_t per_tile = static_cast<int64_t>(num_kv_heads) * splits;
  const int64_t items = static_cast<int64_t>(pass.num_tiles()) * per_tile;
  const int ctas = static_cast<int>(std::min<int64_t>(items, std::max(num_sms, 1)));
  if (ctas <= 0 || items <= ctas || items > std::numeric_limits<int32_t>::max()) return;
  // Item w = (tile w / per_tile, kv head, split w % splits), as the kernel decomposes it; the
  // tile's key tiles cut into splits as tile_keys (flash_mask.cuh) cuts them. make_flash_attn_pass's
  // tiles come most keys first, so without splits its items already come heaviest first (the MLA
  // prefill's passes share one tile list in sequence order, and are sorted below).
  std::vector<int64_t> cost(static_cast<std::size_t>(items));
  for (int64_t t = 0, w = 0; t < pass.num_tiles(); ++t) {
    const int64_t n = item_key_tiles(pass.tile_keys[static_cast<std::size_t>(t)]);
    for (int64_t h = 0; h < num_kv_heads; ++h)
      for (int64_t sp = 0; sp < splits; ++sp, ++w)
        cost[static_cast<std::size_t>(w)] = kFixedRoundsItemQuarters + 4 * split_key_tiles(n, splits, sp);
  }
  // The kernel's snake (SnakeRounds) is kept where its longest CTA is within 0.5 % of what any
  // order can reach (the mean load or the largest item). Long prefills come out so, and there the
  // snake also beat the balanced list in the model (2 x 4k, 1 x 8k: 1.004 / 1.002 x the mean against 1.008 / 1.004), while short ones
  // did not (8 x 1k: 1.031 x against 1.013; 4 x 2k: 1.031 x against 1.008).
  std::vector<int64_t> snake(static_cast<std::size_t>(ctas), 0);
  int64_t total = 0, largest = 0;
  SnakeRounds rounds_of{ctas};
  for (const int64_t c : cost) {
    snake[static_cast<std::size_t>(rounds_of.next())] += c;
    total += c;
    largest = std::max(largest, c);
  }
  const int64_t snake_max = *std::max_element(snake.begin(), snake.end());
  const double best = std::max(static_cast<double>(total) / ctas, static_cast<double>(largest));
  const L2Groups groups = l2_groups(pass, num_kv_heads, head_size, kv_elem_bytes, ctas);
  const bool grouped = groups.count > 1;
  if (!grouped && static_cast<double>(snake_max) <= 1.005 * best) return;
  // The order the items are dealt in: heaviest first, within each group of (kv head, sequence)
  // pairs when grouped (the whole list is one group otherwise).
  std::vector<int32_t> by_cost(static_cast<std::size_t>(items));
  std::iota(by_cost.begin(), by_cost.end(), 0);
  const bool heaviest_first = std::is_sorted(cost.begin(), cost.end(), std::greater<>());
  auto group_of = [&](int32_t w) {
    if (!grouped) return 0;
    const int64_t tile = w / per_tile, h = (w % per_tile) / splits;
    return static_cast<int>(groups.of_pair[static_cast<std::size_t>(h * groups.num_seqs + pass.tiles[2 * static_cast<std::size_t>(tile)])]);
  };
  if (grouped || !heaviest_first)
    std::stable_sort(by_cost.begin(), by_cost.end(), [&](int32_t x, int32_t y) {
      const int gx = group_of(x), gy = group_of(y);
      return gx != gy ? gx < gy : cost[static_cast<std::size_t>(x)] > cost[static_cast<std::size_t>(y)];
    });
  // Each item to the least loaded CTA (lowest index among equals): a binary min-heap of
  // load << 20 | CTA, its root raised and sifted down once per item (~25 ns an item). The loads
  // carry from one group to the next, so the CTAs move through the groups together.
  std::vector<uint64_t> heap(static_cast<std::size_t>(ctas));
  for (int b = 0; b < ctas; ++b) heap[static_cast<std::size_t>(b)] = static_cast<uint64_t>(b);  // a valid heap
  constexpr int kCtaBits = 20;
  std::vector<int32_t> cta_of(static_cast<std::size_t>(items));
  std::vector<int32_t> count(static_cast<std::size_t>(ctas), 0);
  const std::size_t n = heap.size();
  for (const int32_t w : by_cost) {
    const uint64_t root = heap[0] + (static_cast<uint64_t>(cost[static_cast<std::size_t>(w)]) << kCtaBits);
    const int b = static_cast<int>(root & ((1u << kCtaBits) - 1));
    cta_of[static_cast<std::size_t>(w)] = b;
    ++count[static_cast<std::size_t>(b)];
    std::size_t i = 0;  // sift the raised root down
    for (;;) {
      std::size_t m = 2 * i + 1;
      if (m >= n) break;
      if (m + 1 < n && heap[m + 1] < heap[m]) ++m;
      if (heap[m] >= root) break;
      heap[i] = heap[m];
      i = m;
    }
    heap[i] = root;
  }
  uint64_t longest = 0;
  for (const uint64_t h : heap) longest = std::max(longest, h >> kCtaBits);
  // Ungrouped: the list where it ends sooner than the snake. Grouped: where it ends no later than
  // the snake or within 1 % of the best order's end (what it gives back is L2's, which the model
  // does not see: hd96 2 x 4k 32/32 1.009 x the mean, against the snake's 1.004 x).
  if (!grouped && static_cast<int64_t>(longest) >= snake_max) return;
  if (grouped && static_cast<int64_t>(longest) > snake_max && static_cast<double>(longest) > 1.01 * best) return;
  const int rounds = *std::max_element(count.begin(), count.end());
  pass.work_rounds = rounds;
  pass.work_ctas = ctas;
  pass.l2_groups = grouped ? groups.count : 0;
  pass.work_order.assign(static_cast<std::size_t>(ctas) * static_cast<std::size_t>(rounds), static_cast<int32_t>(items));
  std::fill(count.begin(), count.end(), 0);
  for (const int32_t w : by_cost) {  // each CTA's items in the order it took them
    const int b = cta_of[static_cast<std::size_t>(w)];
    pass.work_order[static_cast<std::size_t>(b) * rounds + count[static_cast<std::size_t>(b)]++] = w;
  }
}

double flash_attn_stream_share(const DeviceInfo& d) {
  // ATTN_FA_SM90_STREAM_SHARE=x prices the pages at x instead (A/B timing of the claim rule).
  static const double forced = [] {
    const char* v = std::getenv("ATTN_FA_SM90_STREAM_SHARE");
    return v != nullptr ? std::atof(v) : 0.0;
  }();
  if (forced > 0) return forced;
  if (d.dram_peak_bytes_per_sec() <= 0 || d.num_sms <= 0) return kH100StreamShare;
  // A copy reaches about 0.9 of the DRAM's peak (3.0 of 3.35 TB/s on the H100 SXM, 4.26 of 4.81 on
  // the H200; `attn-bench device`).
  const double copy = 0.9 * d.dram_peak_bytes_per_sec();
  return std::clamp(copy / (kStreamPerCta * d.num_sms), 0.25, 1.0);
}

FlashAttnSchedule plan_flash_attn(const Batch& b, const CommonAttentionMetadata& m, const RunOptions& opts,
                                  int num_sms, double stream_share) {
  const AttentionSpec& spec = b.spec;
  const int gqa = spec.gqa_ratio();
  std::vector<int32_t> query_lens(m.num_reqs);
  for (int r = 0; r < m.num_reqs; ++r) query_lens[r] = m.query_len(r);

  FlashAttnSchedule s;
  const CascadeChoice cascade = choose_cascade(b, m, opts.cascade, num_sms);
  const FlashAttnConfig config = make_flash_attn_config(spec);
  const Sm90Passes sm90 = flash_attn_sm90_passes(config);
  s.cascade = cascade.use;
  s.cascade_reason = cascade.reason;

  if (s.cascade) {
    s.prefix_len = cascade.prefix_len;
    const int32_t num_tokens = static_cast<int32_t>(m.num_actual_tokens);
    s.prefix = make_flash_attn_pass({num_tokens}, {s.prefix_len}, false, gqa, spec.head_size_qk, spec.num_kv_heads,
                                    num_sms, 0, sm90, &config);
    // The suffix pass: each decode's own keys past the prefix, a few hundred (short items, whose
    // per-item costs the persistent kernel does not amortise): its decodes keep the mma.sync decode
    // tiling (128 decodes sharing 4k + 512 own: 170.7 on the sm_90a kernel -> 167.3 us).
    s.main = make_flash_attn_pass(query_lens, m.seq_lens, true, gqa, spec.head_size_qk, spec.num_kv_heads,
                                  num_sms, s.prefix_len,
                                  sm90 == Sm90Passes::all || sm90 == Sm90Passes::mixed ? Sm90Passes::prefills : sm90,
                                  &config);
  } else {
    s.main = make_flash_attn_pass(query_lens, m.seq_lens, m.causal, gqa, spec.head_size_qk, spec.num_kv_heads,
                                  num_sms, 0, sm90, &config, stream_share, spec.sliding_window);
  }
  // ATTN_FA_NUM_SPLITS=N forces N KV splits on the main pass (A/B timing of the split rule, like
  // the num_splits argument of vLLM's flash_attn_varlen_func); 0 or unset keeps the rule.
  static const int forced_splits = [] {
    const char* v = std::getenv("ATTN_FA_NUM_SPLITS");
    return v != nullptr ? std::clamp(std::atoi(v), 0, kMaxSplits) : 0;
  }();
  if (forced_splits > 0) s.main.num_splits = forced_splits;
  const int forced_dynamic = sm90_dynamic_override();
  if (forced_dynamic >= 0)
    s.main.dynamic_items = forced_dynamic > 0 && flash_attn_sm90_can_claim(s.main.tiling, spec.head_size_qk);
  // Without cascade the main pass's splits are the only partials: a decode pass merges them in
  // clusters where it can (the cascade's suffix partials merge with the prefix's).
  s.main.cluster_merge = !s.cascade && flash_attn_cluster_merge(config, s.main.tiling, s.main.num_splits);
  if (sm90_balance_enabled())
    balance_fixed_rounds(s.main, spec.num_kv_heads, spec.head_size_qk, num_sms, l2_group_elem_bytes(spec.kv_cache_dtype));
  return s;
}

std::string FlashAttnSchedule::summary() const {
  const char* tiling = main.tiling.spec ? "spec" : main.tiling.decode ? "decode" : main.tiling.sm90_tiles ? "sm90" : "prefill";
  std::string out = "tiles=" + std::to_string(main.num_tiles()) + " tiling=" + tiling +
                    " splits=" + std::to_string(main.num_splits);
  // The sm_90a kernel's decode launch (kDecodes): mixed passes, and passes of one-tile sequences.
  if (main.tiling.sm90_tiles && main.tiling.small_seqs) out += " launch=decodes";
  if (main.cluster_merge) out += " merge=cluster";
  if (main.dynamic_items) out += " items=dynamic";
  if (main.claim_front_ctas > 0) out += " front_ctas=" + std::to_string(main.claim_front_ctas);
  if (!main.work_order.empty()) out += " rounds=balanced";
  if (main.l2_groups > 0) out += " l2_groups=" + std::to_string(main.l2_groups);
  if (cascade) {
    out += " cascade=on prefix=" + std::to_string(prefix_len) + " prefix_tiles=" + std::to_string(prefix.num_tiles()) +
           " prefix_splits=" + std::to_string(prefix.num_splits);
  } else {
    out += " cascade=off (" + cascade_reason + ")";
  }
  return out;
}

FlashAttnConfig make_flash_attn_config(const AttentionSpec& s) {
  FlashAttnConfig c;
  c.num_q_heads = s.num_q_heads;
  c.num_kv_heads = s.num_kv_heads;
  c.head_size_qk = s.head_size_qk;
  c.head_size_v = s.head_size_v;
  c.dtype = s.dtype;
  c.kv_dtype = s.kv_cache_dtype;
  c.block_size = s.block_size;
  c.layout = s.kv_layout;
  c.use_mla = s.use_mla;
  c.q_fp8 = s.q_scale > 0.f;
  return c;
}

}  // namespace attn
