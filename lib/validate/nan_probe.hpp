#pragma once
// The NaN probe: one context token's cached K planted NaN (RunOptions::nan_key) must make exactly
// the rows that attend it NaN and leave every other row as it was. A row's keys may be cut into
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

// The key the probe plants: in the middle of the shared prefix when there is one (every request's
// rows attend it through the cascade's prefix level), else in the middle of the context keys that
// the first new token of the request with the longest context sees (the request most likely cut
// into split pieces), in the last kv head. None for a batch without context tokens (the new tokens'
// slots belong to the run's cache write).
std::optional<CachedKey> nan_probe_key(const Batch& b);

// Whether each row [num_tokens x num_q_heads] attends `key`: its request holds the key (every
// request for a key of the shared prefix), the key is in its visible range (visible_keys), and its
// query head reads the key's kv head (every head for MLA).
std::vector<uint8_t> rows_attending(const Batch& b, const CachedKey& key);

struct NanProbeResult {
  bool pass = true;
  std::string failure;         // the first wrong row and how many there are
  int64_t attending_rows = 0;  // rows that must come out NaN
};

// `planted`, the output of a run with `key` NaN, against `clean`, a run without: attending rows NaN
// in every element of O and in the LSE; every other row without NaN, and bitwise the clean run's
// when `bitwise` (a backend that gave the same bits twice on this batch).
NanProbeResult check_nan_probe(const Batch& b, const CachedKey& key, const AttentionOutput& clean,
                               const AttentionOutput& planted, bool bitwise);

}  // namespace attn
