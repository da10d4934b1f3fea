#pragma once
// `attn-bench report merge A.csv B.csv ... -o all.csv`: one results file from the shards of a
// run (several processes, GPUs or nodes). Rows must come from one build on one kind of device
// and must not repeat a (scenario, backend) pair, unless the caller allows it.
#include <string>
#include <vector>

#include "report/results.hpp"

namespace attn {

struct MergeOptions {
  bool allow_mixed = false;       // rows of different builds or devices
  bool allow_duplicates = false;  // the same (scenario, backend) in several inputs: the last wins
};

struct MergeInput {
  std::string path;
  std::vector<ResultRow> rows;
};

// The rows of every input in order, each sweep's rows (`sweep` set) re-sorted into its case order
// (`case_index`) in the places they take. InputError naming both files (and the pair, build or
// device) on a duplicate or a mix that the options do not allow; for a sharded sweep, naming the
// shard that is missing or that two inputs hold (allow_duplicates allows the latter).
std::vector<ResultRow> merge_results(const std::vector<MergeInput>& inputs, const MergeOptions& opts = {});

}  // namespace attn
