#pragma once
// Exact attention in float64 (Eigen) from the Batch's logical sequences. Never reads a paged
// cache or a block table.
#include <cstdint>
#include <vector>

#include "model/batch.hpp"

namespace attn {

struct ReferenceOptions {
  // Check at most this many (request, head) pairs; 0 = all. When fewer than all are checked,
  // the sample is drawn from sample_seed and reported.
  int64_t max_pairs = 0;
  uint64_t sample_seed = 0;
  int threads = 0;  // 0 = default_threads()
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
