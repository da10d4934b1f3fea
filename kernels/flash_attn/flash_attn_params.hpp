#pragma once
// Parameters of the FLASH_ATTN kernels (paged varlen forward); the LSE merge is
// shared (kernels/common/merge_params.hpp). Plain C++: no CUDA
// types, includable from host .cpp files. Every pointer is device memory.
//
// One forward launch covers a list of "tiles": (sequence, m_block) pairs, where an m_block is
// kBlockM consecutive rows of the sequence's packed query. A packed row is (token, g): the
// G = num_q_heads / num_kv_heads query heads that share a kv head sit next to each other, so a
// decode token of a GQA model fills G rows of a tile instead of one. The grid is
// (num_tiles, num_kv_heads, num_splits); decode launches flatten (tile, kv head) kv-head-fastest.
#include <cstdint>

namespace attn {

struct FlashAttnParams {
  // ---- inputs ----------------------------------------------------------------------------
  const void* q;        // [num_tokens, num_q_heads, head_size] model dtype (fp16/bf16)
  const void* k_cache;  // [num_blocks, block_size, num_kv_heads, head_size] cache dtype (FA K half, NHD)
  const void* v_cache;  // [num_blocks, block_size, num_kv_heads, head_size] cache dtype (FA V half, NHD; qk 192 / v 128:
                        // the same strides, dims 128.. unread)
  const int32_t* block_table;      // [num_seqs, block_table_stride] physical block of each logical block
  // sm_90a kernel only: when set, sequence s's blocks start at block_table[block_table_indptr[s]]
  // (FlashInfer's CSR page table: indptr + indices) instead of row s * block_table_stride.
  const int32_t* block_table_indptr;  // [num_seqs + 1] or nullptr
  const int32_t* seq_lens;         // [num_seqs] keys of each sequence (context + new tokens)
  const int32_t* query_start_loc;  // [num_seqs + 1] first flattened token of each sequence
  const int32_t* tiles;            // [num_tiles, 2] (seq, m_block) of blockIdx.x, heaviest first
  const float* k_descale;          // [num_seqs, num_kv_heads] fp8 caches, else nullptr (= 1)
  const float* v_descale;          // [num_seqs, num_kv_heads] fp8 caches, else nullptr (= 1)
  const float* alibi_slopes;       // [num_q_heads] or nullptr
  const float* sinks;              // [num_q_heads] sink logits (natural units) or nullptr

  // ---- outputs: either the final O/LSE or one partial state per split ----------------------
  void* o;              // [num_tokens, num_q_heads, Dv] model dtype (Dv: FlashAttnConfig::head_size_v); used when o_partial is null
  float* lse;           // lse[token * lse_token_stride + head * lse_head_stride] natural log (base 2 with lse_base2), or nullptr
  int64_t lse_token_stride;
  int64_t lse_head_stride;
  float* o_partial;     // [num_partials, num_tokens, num_q_heads, Dv] normalized partial O, or nullptr
  float* lse_partial;   // [num_partials, num_tokens, num_q_heads] natural-log LSE of each partial
  int partial_offset;   // this launch writes partial slots partial_offset .. partial_offset + num_splits - 1
  int lse_base2;        // sm_90a kernel only: 1 = LSEs in log2 units (FlashInfer's convention)

  // ---- shapes --------------------------------------------------------------------------------
  int num_tokens;
  int num_q_heads;
  int num_kv_heads;
  int head_size;
  int block_size;          // tokens per cache block (a multiple of 16)
  int block_table_stride;  // entries per block-table row
  int num_tiles;
  int num_splits;          // the key range of every tile is cut into this many chunks (blockIdx.z)
  int64_t kv_block_stride;  // elements between consecutive cache blocks
  int64_t kv_token_stride;  // elements between consecutive slots of a block
  int64_t kv_head_stride;   // elements between consecutive kv heads of a slot

  // ---- semantics -----------------------------------------------------------------------------
  float softmax_scale;
  float softcap;      // 0 = off, else cap * tanh(logit / cap)
  int causal;         // query token i of a sequence sits at seq_len - q_len + i and sees keys <= it
  int window;         // 0 = off, else key > pos - window
  int local_chunk;    // 0 = off, else key >= floor(pos / chunk) * chunk
  int kv_begin;       // keys below this are not attended (cascade suffix: the shared prefix length)
  int kv_fp8_e5m2;    // fp8 caches: 1 = e5m2, 0 = e4m3
  // > 0: the queries are quantized (vLLM's query quant): q holds e4m3(x / q_scale) * q_scale in the
  // model dtype, and the sm_90a kernel's fp8 tensor-core path (e4m3 cache, head size 128) takes the
  // codes back exactly. 0 = not quantized.
  float q_scale = 0.f;

  // ---- launch --------------------------------------------------------------------------------
  // The kernels start before the kernel ahead of them in the stream has finished (programmatic
  // stream serialization, kernels/common/pdl_launch.hpp). 1: that kernel is the step's cache
  // write, which writes only the keys of the step's new tokens (the last q_len of each sequence),
  // so the tiles of older keys load before waiting for it; the sm_90a kernel always assumes so.
  // 0: the mma.sync kernel waits for it before reading anything (a GEMM may have written Q, K, V).
  int after_cache_write = 0;
  // 1 = the step's cache write happens in this launch, not in a kernel ahead (a cache of the model
  // dtype, no cascade). Two kernels do it:
  // - the decode tiling (after_cache_write 0): each CTA takes the rows of the step's new keys (the
  //   last q_len of its sequence) from k_new / v_new instead of the cache, and stores them into their
  //   cache slots once they landed: each new key of a kv head lies in one split's range, so it is
  //   stored once;
  // - the sm_90a prefill (sm90::kFusedWrite), for passes whose every sequence starts from scratch
  //   (seq_len = q_len): every key tile comes from k_new / v_new, and the CTAs copy the step's rows
  //   into the slots of slot_mapping meanwhile, each work item of split 0 the rows of the tokens
  //   whose first packed row it holds.
  int fused_cache_write = 0;
  const void* k_new;          // [num_tokens, num_kv_heads, head_size] model dtype (fused_cache_write), row stride new_kv_stride
  const void* v_new;          // [num_tokens, num_kv_heads, head_size] model dtype, row stride new_kv_stride
  int64_t new_kv_stride = 0;  // elements between tokens of k_new and v_new
  const int64_t* slot_mapping = nullptr;  // [num_tokens] cache slot of each token (< 0: none); the sm_90a fused write
  // Decode tiling (flash_attn_cluster_merge): 1 = the num_splits CTAs of a tile run as one thread
  // block cluster and merge their states in the first one's shared memory, which writes O and LSE;
  // o_partial is then unused and no merge_attn_states follows. 0 = splits write partials.
  int split_cluster = 0;
  // sm_90a persistent kernel: {items claimed from the front, from the back (one 64-bit word,
  // 8-byte aligned), the CTAs done claiming}, all zero between launches (the kernel's last CTA
  // zeroes them), or nullptr. Set, the CTAs claim their items as they go (the dynamic schedule,
  // flash_fwd_sm90.cuh); null, CTA b takes fixed items.
  int32_t* work_counters = nullptr;  // [3]
  // The dynamic schedule: CTAs [0, claim_front_ctas) claim work items from the front of the list,
  // the others from the back, until the ends meet (a mixed pass: prefill tiles first, decode tiles
  // last, so that both kinds run side by side); 0 = every CTA from the front.
  int claim_front_ctas = 0;
  // Fixed rounds (work_counters null): CTA b's item of round r is work_order[b * work_rounds + r]
  // (num_tiles * num_kv_heads * num_splits or more: none), a list the planner balanced by each
  // item's cost (balance_fixed_rounds in flash_attn_plan.cpp), made for a grid of work_ctas CTAs;
  // nullptr (or another grid): the kernel's snake of rounds. sm_90a persistent kernel only.
  const int32_t* work_order = nullptr;  // [work_ctas, work_rounds]
  int work_rounds = 0;
  int work_ctas = 0;
  // The planner's mean key tiles (of 128 keys) per work item, rounded up; 0 = not given. The sm_90a
  // prefill at head size 128 takes its plain-scores kernel for short items only (sm90_plain_at).
  int mean_item_key_tiles = 0;
  // sm_90a prefill launches (not decode launches): a query's packed rows are tiled from its end, so
  // that tile m holds rows m x block_m - shift .. (shift = block_m - rows % block_m where rows is
  // not a multiple of block_m and spans more than one tile; rows below 0 are none). The partial
  // tile is then the query's first, whose causal keys are fewest, instead of its last, whose
  // consumers without rows multiplied every key tile. The backends copy FlashAttnPass::rows_from_end
  // (make_flash_attn_pass), whose tile key counts assume it.
  int rows_from_end = 0;
};

}  // namespace attn
