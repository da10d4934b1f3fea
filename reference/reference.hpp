#pragma once
// Exact attention in float64 (Eigen) from the Batch's logical sequences. Never reads a paged
// cache or a block table.
#include <cstdint>
#include <optional>
#include <vector>

#include "model/batch.hpp"

namespace attn {

// A feature computed the way a typical bug computes it (docs/DESIGN.md, "Sensitivity"): the
// reference under a perturbation tells how much that bug would move the output of this batch.
enum class Perturbation {
  none,
  causal_plus_one,      // each causal row also sees the next (future) key
  window_plus_one,      // a sliding-window row also sees one key older than its window
  local_chunk_minus_one,  // a local-attention row also sees the last key of the previous chunk
  softcap_no_tanh,      // cap * (s / cap): the soft cap applied without its tanh
  sinks_dropped,        // the sink logit left out of the denominator
  alibi_dropped,        // the ALiBi bias left out
  fp8_scales_ignored,   // the fp8 cache (and a quantized query) read without its scales (as if 1)
  gqa_shifted,          // q head h reads kv head (h / group + 1) % num_kv_heads
  cascade_block_dropped,  // the last block of the shared prefix attended by neither pass
  mla_rope_dropped,     // MLA: the rotary part of the scores (q_pe . k_pe) left out, the keys read as
                        // their first kv_lora_rank (or qk_nope) columns only
};
const char* to_string(Perturbation p);

struct ReferenceOptions {
  // Check at most this many (request, head) pairs; 0 = all. When fewer than all are checked,
  // the sample is drawn from sample_seed and reported.
  int64_t max_pairs = 0;
  uint64_t sample_seed = 0;
  int threads = 0;  // 0 = default_threads()
  Perturbation perturbation = Perturbation::none;
  // vLLM's MLA data flow, which stores one intermediate in the model dtype before O: the result
  // of that flow in exact arithmetic, the one rounding included, so that a backend running it is
  // checked for its own arithmetic (docs/DESIGN.md, "Accuracy budgets"). Requests of this query
  // length run the absorbed decode (q_latent = q_nope W_UK^T rounded, attention over the latent
  // rows, o = o_latent W_UV); the others the prefill (k_nope = kv_c W_UK and v = kv_c W_UV
  // rounded). Unset: the exact result.
  std::optional<int> mla_flow_decode_q_len;
};

struct ReferenceResult {
  int64_t num_tokens = 0;
  int num_heads = 0;
  int head_size_v = 0;
  std::vector<double> o;          // [num_tokens, num_heads, head_size_v]
  std::vector<double> lse;        // [num_tokens, num_heads] natural log; -inf for no visible key
  std::vector<uint8_t> checked;   // [num_tokens, num_heads] 1 where computed
  int64_t pairs_total = 0;        // (request, head) pairs in the batch
  int64_t pairs_checked = 0;
};

ReferenceResult compute_reference(const Batch& b, const ReferenceOptions& opts = {});

}  // namespace attn
