#include "backends/flashmla/mla_metadata.hpp"

#include <string>

#include "core/error.hpp"

namespace attn::flashmla {

namespace {

int ceil_div(int64_t a, int64_t b) { return static_cast<int>((a + b - 1) / b); }

}  // namespace

int mla_num_parts(int num_sms, int num_q_heads_per_kv_times_q_len, int num_kv_heads) {
  if (num_sms <= 0 || num_q_heads_per_kv_times_q_len <= 0 || num_kv_heads <= 0)
    throw InputError("get_mla_metadata: num_sms, heads x q_len and num_kv_heads must be positive (got " +
                     std::to_string(num_sms) + ", " + std::to_string(num_q_heads_per_kv_times_q_len) + ", " +
                     std::to_string(num_kv_heads) + ")");
  const int parts = num_sms / num_kv_heads / ceil_div(num_q_heads_per_kv_times_q_len, kBlockSizeM);
  return parts > 1 ? parts : 1;
}

// The greedy fill of FlashMLA's get_mla_metadata: a cursor (request, block, split) walks the
// batch; each partition has `payload` blocks to spend. A request whose remaining blocks plus
// the fixed cost fit is closed there (its split count becomes final); otherwise the partition
// takes payload - overhead blocks of it and the request gets one more split.
MlaMetadata get_mla_metadata(const std::vector<int32_t>& seq_lens, int num_q_heads_per_kv_times_q_len,
                             int num_kv_heads, int num_sms) {
  MlaMetadata m;
  m.num_parts = mla_num_parts(num_sms, num_q_heads_per_kv_times_q_len, num_kv_heads);
  const int batch = static_cast<int>(seq_lens.size());
  std::vector<int> blocks(static_cast<size_t>(batch));
  int64_t total = 0;
  for (int i = 0; i < batch; ++i) {
    if (seq_lens[static_cast<size_t>(i)] < 0)
      throw InputError("get_mla_metadata: seq_lens[" + std::to_string(i) + "] = " +
                       std::to_string(seq_lens[static_cast<size_t>(i)]) + " is negative");
    blocks[static_cast<size_t>(i)] = ceil_div(seq_lens[static_cast<size_t>(i)], kBlockSizeN);
    total += blocks[static_cast<size_t>(i)] + kFixedOverheadBlocks;
  }
  m.payload = ceil_div(total, m.num_parts) + kFixedOverheadBlocks;
  m.tile_scheduler_metadata.assign(static_cast<size_t>(m.num_parts) * kMetadataSize, 0);
  m.num_splits.assign(static_cast<size_t>(batch) + 1, 0);

  int now_req = 0, now_block = 0, now_split = 0, cum_splits = 0;
  for (int part = 0; part < m.num_parts; ++part) {
    int32_t* md = m.tile_scheduler_metadata.data() + static_cast<size_t>(part) * kMetadataSize;
    md[0] = now_req;
    md[1] = now_block * kBlockSizeN;
    md[4] = now_split;
    int remain = m.payload;
    while (now_req < batch) {
      const int rest = blocks[static_cast<size_t>(now_req)] - now_block;
      if (remain >= rest + kFixedOverheadBlocks) {
        cum_splits += now_split + 1;
        m.num_splits[static_cast<size_t>(now_req) + 1] = cum_splits;
        remain -= rest + kFixedOverheadBlocks;
        ++now_req;
        now_block = 0;
        now_split = 0;
      } else {
        if (remain - kFixedOverheadBlocks > 0) {
          now_block += remain - kFixedOverheadBlocks;
          ++now_split;
        }
        break;
      }
    }
    // The partition ends inside now_req when it took part of it, else with the request before.
    md[2] = now_block > 0 ? now_req : now_req - 1;
    md[3] = now_block > 0 ? now_block * kBlockSizeN : (now_req > 0 ? seq_lens[static_cast<size_t>(now_req) - 1] : 0);
  }
  // payload = ceil(total / parts) + overhead leaves room for every split's extra overhead.
  if (now_req != batch)
    throw RuntimeError("get_mla_metadata: " + std::to_string(batch - now_req) + " requests left unscheduled");
  return m;
}

}  // namespace attn::flashmla
