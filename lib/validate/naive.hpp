#pragma once
// A textbook attention over a Batch's logical sequences, restricted to the rows a check needs.
//
// Two uses:
//  * strict validation: in the model precision (inputs in the model dtype, fp32 accumulation,
//    softmax in fp32, P rounded to the model dtype before P.V, O rounded to the model dtype),
//    its error against the float64 reference is what a plain GPU kernel achieves, and a
//    backend is held to twice that;
//  * the fp8 quantization error: in exact (float64) arithmetic on the K/V values before the
//    cache round trip (and the query before its quantization), compared with the reference on
//    the values the backends see.
// It follows the reference's semantics (causal/window/local chunk, soft cap, ALiBi, sinks,
// GQA, MLA up-projection) but not its code: it loops token by token, so it is only run on the
// checked rows.
#include <cstdint>
#include <vector>

#include "model/batch.hpp"

namespace attn {

struct NaiveOptions {
  enum class Precision {
    model,  // model dtype inputs, fp32 accumulation, P and O rounded to the model dtype
    exact,  // float64 throughout, nothing rounded
  };
  Precision precision = Precision::model;
  // Inputs before their fp8 round trips: K/V (MLA: the latent) before the cache's, and the query
  // before vLLM's query quantization (AttentionSpec::q_fp8).
  bool unquantized = false;
  int threads = 0;  // 0 = default_threads()
};

// rows: [num_tokens, num_q_heads], nonzero where an output row is wanted (e.g.
// ReferenceResult::checked); empty = every row.
// Returns O: [num_tokens, num_q_heads, head_size_v]; rows not wanted are NaN.
std::vector<double> naive_attention(const Batch& b, const std::vector<uint8_t>& rows, const NaiveOptions& opts);

// Relative L2 distance ||a - b|| / ||b|| over the rows where rows[t, h] != 0 (empty = all);
// a and b are [num_tokens, num_heads, head_size_v]. 0 when both are zero there.
double masked_rel_l2(const std::vector<double>& a, const std::vector<double>& b, const std::vector<uint8_t>& rows,
                     int64_t head_size_v);

// The fp8 KV-cache quantization error of a batch: relative L2 of the exact attention on the
// cached (quantized, dequantized) K/V (and quantized query, when the spec quantizes it) against
// the exact attention on the unquantized inputs,
// over `rows` (as in naive_attention). Reported, not gated. -1 when the cache is not fp8.
double quantization_rel_l2(const Batch& b, const std::vector<uint8_t>& rows, int threads = 0);

}  // namespace attn
