#pragma once
// A Batch is the host truth of one scenario step: shapes, paging and, through the counter-based
// generator, every input value. It holds nothing proportional to the KV cache.
#include <cstdint>
#include <string>
#include <vector>

#include "core/values.hpp"
#include "model/scenario.hpp"
#include "model/spec.hpp"

namespace attn {

struct Batch {
  std::string label;
  AttentionSpec spec;  // k_scale/v_scale/q_scale resolved ("calc" applied), scale resolved
  uint64_t seed = 0;
  std::vector<RequestShape> requests;  // batch order = token order
  int shared_prefix_len = 0;           // tokens [0, L) of every request share blocks and values
  int local_attention_chunk = 0;
  long step = -1;
  // Value regime (make_batch resolves [data]): Q = q_amplitude * U[-1, 1), so the scaled scores
  // have std q_amplitude / 3 with U[-1, 1) keys; sink logit of head h = sink_centre + sink_spread * U.
  DataConfig data;  // as given; the resolved regime follows
  ValueRegime regime;  // K/V (and latent) values, shared with the device cache fill
  float q_amplitude = 4.0f;
  float sink_centre = 0.0f, sink_spread = 2.0f;

  // Paging. Physical block 0 is the reserved null block: never allocated, used as padding.
  int block_size = 16;
  int64_t num_blocks = 0;             // physical blocks in the cache, null block included
  int max_blocks_per_req = 0;
  std::vector<int32_t> block_table;   // [num_reqs, max_blocks_per_req], padding = 0
  std::vector<int64_t> slot_mapping;  // [num_tokens] new tokens' cache slots
  std::vector<int32_t> query_start_loc;  // [num_reqs + 1]
  std::vector<float> sinks;   // [num_q_heads] or empty
  std::vector<float> alibi;   // [num_q_heads] slopes or empty
  // Generator id of each request (empty = its index). A request cut out of a batch keeps its
  // id, so it sees the same values alone as inside the batch (batch-invariance check).
  std::vector<uint32_t> request_ids;

  int num_reqs() const { return static_cast<int>(requests.size()); }
  int64_t num_tokens() const { return query_start_loc.empty() ? 0 : query_start_loc.back(); }
  int shared_blocks() const { return shared_prefix_len / block_size; }

  // Generator request id of token `pos` of request `req` (shared prefix tokens share one id).
  uint32_t value_req(int req, int pos) const {
    if (pos < shared_prefix_len) return kSharedPrefixRequest;
    return request_ids.empty() ? static_cast<uint32_t>(req) : request_ids[static_cast<size_t>(req)];
  }

  // ---- values (float, exactly what the backend's inputs hold) ----------------------------
  // Query of the new token at absolute position pos (context_len <= pos < seq_len), model dtype.
  // MHA: d < head_size_qk. MLA: d < 192 = q_nope (128) ‖ q_pe (64).
  float q(int req, int pos, int head, int d) const;
  // The query before vLLM's fp8 query quantization (spec.q_fp8()); q() is the value every backend
  // and the reference see: round_to(dtype, e4m3(q_input / q_scale) * q_scale). Without it, the same.
  float q_input(int req, int pos, int head, int d) const;
  // K/V inputs of a new token in the model dtype (before any cache quantization). MHA only.
  float k_input(int req, int pos, int kv_head, int d) const;
  float v_input(int req, int pos, int kv_head, int d) const;
  // K/V as stored in the cache and read back (fp8: quantized with k/v_scale and dequantized).
  float k(int req, int pos, int kv_head, int d) const;
  float v(int req, int pos, int kv_head, int d) const;
  // MLA: the latent entry kv_c (512) ‖ k_pe (64) of a token, input (model dtype) and cached.
  float latent_input(int req, int pos, int d) const;
  float latent(int req, int pos, int d) const;
  // MLA up-projections, model dtype: k_nope[h] = kv_c · W_UK[h], v[h] = kv_c · W_UV[h].
  float w_uk(int head, int c, int d) const;  // c < kv_lora_rank, d < qk_nope_head_dim
  float w_uv(int head, int c, int d) const;  // c < kv_lora_rank, d < v_head_dim
};

// The sizes a batch's arrays follow (block table num_reqs x max_blocks_per_req, slot mapping
// num_tokens, used_blocks physical blocks without the null block).
struct BatchSize {
  int64_t num_reqs = 0, num_tokens = 0, max_blocks_per_req = 0, used_blocks = 0;
};
BatchSize batch_size_of(const std::vector<RequestShape>& requests, int block_size, int shared_prefix_len);
// Host bytes of make_batch's own arrays for a batch of that size (the shape's request list and
// the batch's copy, query_start_loc, block table, slot mapping, the block allocator's scratch).
double batch_host_bytes(const BatchSize& size, int64_t num_blocks, bool shuffled);
// Host bytes one run of a batch takes at its peak, from its size alone (nothing allocated, no
// pass over its tokens), so that `run` and `describe` both refuse a batch too large for this
// machine before building it. Each part errs on the large side:
//   batch     make_batch's own arrays (batch_host_bytes);
//   metadata  their copies in the common metadata, its decode-first permutation and the block
//             marks of summarize_batch;
//   per_token what every run allocates per new token: Q (float and model dtype), new K/V, the
//             float64 reference's outputs (and the MLA data flow's), one perturbed reference at a
//             time and each declared feature's output kept, each backend's output, its second
//             run's and the copies kept for the cross-backend diff.
// Not counted: what grows with the context (the KV caches, the reference's K/V spans), which
// the cpu backend and the reference check themselves, with their own sizes.
struct HostBytes {
  double batch = 0, metadata = 0, per_token = 0;
  double total() const { return batch + metadata + per_token; }
};
HostBytes run_host_bytes(const AttentionSpec& spec, const BatchShape& shape, const BatchSize& size);
// Before anything is allocated: InputError when the sizes do not fit the int32 indices (new
// tokens in query_start_loc, block ids with the null block) or num_blocks is too small;
// RuntimeError (require_host_bytes) when run_host_bytes does not fit this machine's memory. The
// messages name shape.origin's file, line and key (its size_key for the batch's size).
void check_batch_size(const AttentionSpec& spec, const BatchShape& shape, const BatchSize& size);

// Builds paging (block allocator, block table, slot mapping) and resolves scales.
// Throws InputError on impossible shapes (e.g. num_blocks too small, prefix > context) and
// RuntimeError when the batch's arrays do not fit host memory (check_batch_size).
Batch make_batch(const AttentionSpec& spec, const BatchShape& shape, uint64_t seed);

// Visible keys [lo, hi] (both included) of the query at absolute position p of a request of seq_len
// tokens, the reference's semantics: causal rows see keys lo .. p, lo raised by a sliding window or
// a local attention chunk; non-causal rows see the whole sequence.
struct VisibleKeys {
  int64_t lo, hi;
};
VisibleKeys visible_keys(const Batch& b, int64_t p, int64_t seq_len);

// Work of one attention call over the batch: FLOPs count only unmasked (q, k) pairs
// (2·(dqk + dv) per pair); bytes = Q + K/V actually read (each visible token once per kv head,
// cache dtype) + new K/V written + O written.
struct WorkCounts {
  double flops = 0;
  double bytes = 0;
  double cache_write_bytes = 0;  // of `bytes`: the new tokens' K/V written into the cache
  int64_t kv_tokens_read = 0;   // sum over requests of distinct visible cache tokens
  int64_t attended_pairs = 0;   // sum over tokens of visible keys (per q head: x num_q_heads)
};
WorkCounts count_work(const Batch& b);

// The query length of an MLA batch's decodes: vLLM reorders the batch so that requests of at most
// the reorder threshold come first, and the FLASHMLA split-KV decode kernel takes one query length
// of 1 or 2 per launch, so the decodes are the requests of the shortest query length when that is
// 1 or 2; every other request is a prefill. 0: no decodes. count_work counts these tokens in the
// absorbed form the decode kernel runs.
int mla_decode_query_len(const Batch& b);

}  // namespace attn
