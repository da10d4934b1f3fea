#pragma once
// FlashMLA's tile scheduler (get_mla_metadata; docs/BACKGROUND.md, "FLASHMLA"): splits the keys
// of a decode batch into one contiguous (request, block) range per SM partition, so that every
// CTA of the split-KV MLA decode kernel gets about the same number of 64-token key blocks plus a
// fixed cost per request piece. Host-side plan() work: plain C++, no CUDA.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace attn::flashmla {

constexpr int kBlockSizeN = 64;          // keys per scheduling block (the kernel's key tile)
constexpr int kBlockSizeM = 64;          // query rows (heads x q_len) per CTA tile
constexpr int kFixedOverheadBlocks = 5;  // cost of one request piece (Q load, epilogue, combine)
constexpr int kMetadataSize = 8;         // ints per partition in tile_scheduler_metadata

// One partition's entry of tile_scheduler_metadata[num_parts][8]:
//   [0] begin_req, [1] begin_token (a multiple of 64), [2] end_req (inclusive),
//   [3] end_token (exclusive, in end_req), [4] begin_split (split index of begin_req's first
//   piece), [5..7] unused (0). A partition with begin_req > end_req is idle.
struct MlaPartition {
  int begin_req, begin_token, end_req, end_token, begin_split;
};

struct MlaMetadata {
  int num_parts = 0;                            // SM partitions (CTAs of the decode kernel)
  int payload = 0;                              // blocks each partition may take (incl. overheads)
  std::vector<int32_t> tile_scheduler_metadata;  // [num_parts, 8]
  std::vector<int32_t> num_splits;               // [batch + 1] prefix sums of each request's pieces

  MlaPartition partition(int i) const {
    const int32_t* m = tile_scheduler_metadata.data() + static_cast<size_t>(i) * kMetadataSize;
    return {m[0], m[1], m[2], m[3], m[4]};
  }
  int splits_of(int req) const { return num_splits[static_cast<size_t>(req) + 1] - num_splits[static_cast<size_t>(req)]; }
};

// num_parts = max(num_sms / num_kv_heads / ceil(q_heads_per_kv * q_len / 64), 1), as FlashMLA.
int mla_num_parts(int num_sms, int num_q_heads_per_kv_times_q_len, int num_kv_heads = 1);

// seq_lens: [batch] keys of each request (0 allowed). Throws InputError on a negative length or
// non-positive counts.
MlaMetadata get_mla_metadata(const std::vector<int32_t>& seq_lens, int num_q_heads_per_kv_times_q_len,
                             int num_kv_heads, int num_sms);

}  // namespace attn::flashmla
