#pragma once
// The host schedule of FLASHMLA's MLA prefill (vLLM's chunked-context MLA prefill): which keys
// of which prefill each pass gathers, where they sit in the dense K/V the attention kernel reads,
// and the kernel's tile list. Plain C++ (no CUDA), unit-tested on the host.
#include <cstdint>
#include <vector>

namespace attn {

struct MlaPrefillPlan {
  // One attention pass over all prefills: a context chunk (non-causal) or the new tokens
  // themselves (causal, the last pass).
  struct Pass {
    bool causal = false;
    std::vector<int32_t> key_begin;    // [num_prefills] first key (position) of the range
    std::vector<int32_t> key_count;    // [num_prefills] keys in the range (0 = empty chunk); the kernel's seq_lens
    std::vector<int32_t> dense_begin;  // [num_prefills + 1] first dense row, multiples of kDenseBlock
    std::vector<int32_t> block_table;  // [num_prefills, max_dense_blocks] identity rows into the dense K/V
    int dense_rows() const { return dense_begin.back(); }
  };
  static constexpr int kDenseBlock = 16;  // rows per block of the dense K/V (FA: a multiple of 16)
  int num_prefills = 0;
  int num_tokens = 0;        // new tokens of all prefills
  int chunk = 0;             // context tokens per chunk and request (0: no context anywhere)
  int num_chunks = 0;
  int max_dense_rows = 0;
  int max_dense_blocks = 0;  // block-table row length (>= 1)
  int block_m = 0;           // query rows per attention tile
  std::vector<int32_t> query_start;  // [num_prefills + 1] prefill-local token offsets
  std::vector<int32_t> tiles;        // [num_tiles, 2] (prefill, m_block), the same for every pass
  std::vector<Pass> passes;          // context chunks in order, then the causal pass
};

// q_lens, context_lens: [num_prefills]. workspace_tokens: context tokens gathered per chunk pass
// over all prefills (vLLM's workspace), split evenly among the prefills with context and rounded
// down to whole 64-token pages: chunk = max(64, workspace / with_context / 64 * 64). A request
// whose context ends before chunk c gets an empty range there: its rows still get O = 0 and
// LSE = -inf from the pass, which the merge weighs with 0. block_m: rows per attention tile.
MlaPrefillPlan plan_mla_prefill(const std::vector<int32_t>& q_lens, const std::vector<int32_t>& context_lens,
                                int workspace_tokens, int block_m);

// [num_tiles] the keys each tile of `plan` attends in pass `pass` (the cost model by which the
// kernel's fixed rounds are balanced): a context chunk's every key of its prefill, the causal pass's
// keys up to the tile's last query row (the new tokens attend to themselves).
std::vector<int64_t> mla_pass_tile_keys(const MlaPrefillPlan& plan, int pass);

}  // namespace attn
