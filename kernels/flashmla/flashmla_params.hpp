#pragma once
// Parameters of the FLASHMLA split-KV decode kernel (docs/BACKGROUND.md, "FLASHMLA"). Plain C++:
// includable from host .cpp files. Every pointer is device memory.
//
// One launch covers a decode batch of `batch` requests with q_len (1 or 2) new tokens each. All
// q_len x num_heads query rows of a request share the single latent "kv head", so they are packed
// into the MMA rows: packed row = query index * num_heads + head, 64 rows per CTA tile (m_block).
// The grid is (m_blocks, num_parts): CTA (m, p) runs m_block m over the (request, key block)
// range of scheduler partition p (get_mla_metadata). O stays fp32 until W_UV: a bf16 round trip
// of the 512-wide latent output would add about one output rounding of error to the result. A request cut into several pieces writes
// each piece, normalized, to the fp32 scratch with its LSE; a request in one piece writes O and
// LSE directly. merge_attn_states (kernels/common) then combines the split requests by LSE, or the
// seesaw kernel merges them itself (merge_counters).
#include <cstdint>

namespace attn {

// Which decode kernel runs. automatic: on a Hopper device whose build has sm_90a, the narrow
// sm_90a kernel (flashmla_decode_sm90_narrow.cuh: keys as the MMA rows) for requests of at most 32
// packed query rows and the seesaw one (flashmla_decode_sm90.cuh: 64 query rows per tile) above;
// the mma.sync kernel (flashmla_decode.cuh) elsewhere. For A/B timing the environment variable
// ATTN_FLASHMLA_SM90=0 keeps mma.sync and ATTN_FLASHMLA_NARROW=0 the seesaw kernel for every
// request. The other values ask for one kernel (the sm_90a ones throw where they cannot run,
// wgmma_narrow also above 32 rows).
enum class FlashMlaKernel { automatic, mma_sync, wgmma, wgmma_narrow };

struct FlashMlaDecodeParams {
  // ---- inputs ------------------------------------------------------------------------------
  const void* q;         // [batch * q_len, num_heads, 576] model dtype: q_nope · W_UK (512) ‖ q_pe (64)
  const void* kv_cache;  // [num_blocks, 64, 576] model dtype: kv_c (512) ‖ k_pe (64); V = the first 512
  const int32_t* block_table;             // [batch, block_table_stride] physical block of each 64-key block
  const int32_t* seq_lens;                // [batch] keys of each request (context + its q_len new tokens)
  const int32_t* tile_scheduler_metadata; // [num_parts, 8] {begin_req, begin_token, end_req, end_token, begin_split, 0, 0, 0}
  const int32_t* num_splits;              // [batch + 1] prefix sums of each request's pieces

  // ---- outputs -----------------------------------------------------------------------------
  float* o;          // [batch * q_len, num_heads, 512] fp32 (requests in one piece; the combine fills the rest)
  float* lse;        // [batch * q_len, num_heads] natural log; -inf for a row with no visible key
  float* o_accum;    // [num_splits[batch], q_len * num_heads, 512] normalized O of each piece
  float* lse_accum;  // [num_splits[batch], q_len * num_heads] LSE of each piece
  // [batch, m_blocks] pieces of each (request, m_block) done so far, zero between launches (the
  // CTA that counts a request's last piece resets it), or null. The seesaw kernel (and only it)
  // then merges each request of 2 .. kFlashMlaMergeMaxPieces pieces itself: the CTA whose piece
  // comes last reads every piece back and writes O and LSE, and the combine skips such requests.
  int32_t* merge_counters;
  // 1: the sm_90a kernels' cache copies carry an L2 evict-first policy (a cache block is read by
  // the m_block CTAs of one partition, then never again), so that the streamed cache does not push
  // the pieces' partials out of L2 before the merge reads them (128 heads, 32 x 16k: 0.96 x the
  // time; docs/PERF_NOTES.md); 0: the default policy (ATTN_FLASHMLA_EVICT_FIRST=0).
  int kv_evict_first;

  // ---- shapes ------------------------------------------------------------------------------
  int batch;
  int q_len;                // 1 or 2; query i of a request sits at seq_len - q_len + i (causal)
  int num_heads;
  int block_table_stride;   // entries per block-table row
  int num_parts;            // scheduler partitions (gridDim.y)
  int64_t kv_block_stride;  // elements between consecutive cache blocks (64 * 576 when dense)
  int64_t num_cache_blocks; // blocks in the cache (the bounds of the sm_90a kernel's tensor map)
  float softmax_scale;
};

}  // namespace attn

namespace attn {

// One pass of the MLA prefill (MLA common, docs/BACKGROUND.md): the latents of a key range of
// every prefill request gathered from the paged cache into dense rows, request r at rows
// dense_begin[r] .. dense_begin[r] + key_count[r] - 1 and zero rows up to dense_begin[r + 1]
// (a multiple of 16: the dense K/V are read through an identity block table of 16-row blocks).
// k_pe, shared by all heads, also goes straight into dims 128..191 of every head's key.
struct MlaGatherParams {
  const void* kv_cache;        // [num_blocks, block_size, 576] model dtype
  const int32_t* block_table;  // [num_reqs, block_table_stride] the prefill requests' rows
  const int32_t* dense_begin;  // [num_reqs + 1] first dense row of each request
  const int32_t* key_begin;    // [num_reqs] first key (position) of the range
  const int32_t* key_count;    // [num_reqs] keys in the range (0 = an empty chunk)
  void* latent;                // [num_dense_rows, 576] model dtype
  void* k;                     // [num_dense_rows, num_heads, 192] model dtype (dims 128..191 written)
  int num_reqs;
  int num_dense_rows;
  int num_heads;
  int block_table_stride;
  int block_size;
  int64_t kv_block_stride;     // elements between cache blocks
};

}  // namespace attn
