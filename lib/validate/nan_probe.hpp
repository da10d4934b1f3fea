#pragma once
// The NaN probe: a token's K planted NaN (RunOptions::nan_keys) must make exactly the rows that
// attend it NaN and leave every other row as it was. A row's keys may be cut into
// split pieces or cascade levels and merged by their LSEs; a piece that read a NaN must carry a NaN
// LSE, since one with the -inf LSE of a piece without keys weighs nothing in its merge and the row
// comes out finite and wrong, which only a sampled comparison with the reference could see. Rows
// that do not attend the key catch the other way round: a mask, window or head mapping that reads
// the key where it should not.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "model/batch.hpp"

namespace attn {

// The keys the probe plants in one run, one or both of:
// - a context key: the middle of the shared prefix when there is one (every request's rows attend it
//   through the cascade's prefix level), else the middle of the context keys that the first new token
//   of the request with the longest context sees (the request most likely cut into split pieces), in
//   the last kv head;
// - a new token's key, planted in the K input that the run's cache write stores: the middle new token
//   of the request with the most new tokens, in kv head 0. The rows before it in the same causal
//   tiles must stay clean, which only a masked key can show, and a batch without context (a
//   prefill from scratch) is probed at all. Its rows must not be the context key's, which would be
//   NaN anyway: it is planted where kv head 0 is not the context key's head, or else in another
//   request than the context key's, and never beside a key of the shared prefix.
std::vector<TokenKey> nan_probe_keys(const Batch& b);

std::vector<uint8_t> rows_attending(const Batch& b, const TokenKey& key);

struct NanProbeResult {
  bool pass = true;
  std::string failure;         // the first wrong row and how many there are
  int64_t attending_rows = 0;  // rows that must come out NaN (attending any key)
};

// `planted`, the output of a run with `keys` NaN, against `clean`, a run without: rows attending
// any key NaN in every element of O and in the LSE; every other row without NaN, and bitwise the
// clean run's when `bitwise` (a backend that gave the same bits twice on this batch).
NanProbeResult check_nan_probe(const Batch& b, const std::vector<TokenKey>& keys, const AttentionOutput& clean,
                               const AttentionOutput& planted, bool bitwise);

}  // namespace attn
