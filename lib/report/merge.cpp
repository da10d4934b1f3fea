#include "report/merge.hpp"

#include <algorithm>
#include <charconv>
#include <map>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "core/error.hpp"

namespace attn {

namespace {

// Host-only rows (the cpu backend) carry "host cpu" as their device in every shard.
bool host_row(const ResultRow& r) { return r.device == "host cpu"; }

// "I/N" -> (I, N); InputError naming the file, its line and the value otherwise.
std::pair<int, int> parse_row_shard(const std::string& path, size_t row, const std::string& text) {
  const size_t slash = text.find('/');
  int i = -1, n = 0;
  if (slash != std::string::npos) {
    const auto r1 = std::from_chars(text.data(), text.data() + slash, i);
    const auto r2 = std::from_chars(text.data() + slash + 1, text.data() + text.size(), n);
    if (r1.ptr != text.data() + slash || r2.ptr != text.data() + text.size() || r1.ec != std::errc() ||
        r2.ec != std::errc())
      i = -1;
  }
  if (i < 0 || n < 1 || i >= n)
    throw InputError(InputSite{path, static_cast<long>(row) + 2, "shard", text, "not a shard",
                               "I/N with 0 <= I < N, as sweep --shard writes it"});
  return {i, n};
}

// What the inputs hold of one sweep's shards.
struct SweepShards {
  int count = 0;                 // N of every "I/N"
  std::string count_file;        // the input that set it
  std::map<int, std::vector<std::string>> files;  // shard -> the inputs holding its rows
  std::map<int, std::set<int>> cases;             // shard -> its case indices
};

// Every shard of a sharded sweep, each from one input. A shard that got no case (a sweep cut
// into more shards than it has cases) leaves a file without rows, which names no shard: missing
// shards are accepted only as such, as many as the inputs without rows, and only where the
// sweep has that few cases (the shard cut gives the first shards one case each, the last none).
void check_shards(const std::vector<MergeInput>& inputs, const MergeOptions& opts) {
  std::map<std::string, SweepShards> sweeps;
  size_t empty_inputs = 0;
  for (const MergeInput& in : inputs) {
    if (in.rows.empty()) ++empty_inputs;
    std::set<std::pair<std::string, int>> here;  // (sweep, shard) pairs of this input
    for (size_t k = 0; k < in.rows.size(); ++k) {
      const ResultRow& r = in.rows[k];
      if (r.shard.empty()) continue;
      const auto [i, n] = parse_row_shard(in.path, k, r.shard);
      SweepShards& s = sweeps[r.sweep];
      if (s.count == 0) {
        s.count = n;
        s.count_file = in.path;
      } else if (n != s.count) {
        throw InputError(fmt::format("report merge: {} holds shard {} of sweep {}, but {} a shard of {} (merge the "
                                     "shards of one split)",
                                     in.path, r.shard, r.sweep, s.count_file, s.count));
      }
      if (here.emplace(r.sweep, i).second) s.files[i].push_back(in.path);
      s.cases[i].insert(r.case_index);
    }
  }
  for (const auto& [name, s] : sweeps) {
    for (const auto& [i, files] : s.files)
      if (files.size() > 1 && !opts.allow_duplicates)
        throw InputError(fmt::format("report merge: shard {}/{} of sweep {} is in both {} and {} (give each shard "
                                     "once, or pass --allow-duplicates to keep the last rows)",
                                     i, s.count, name, files[0], files[1]));
    std::vector<int> missing;
    for (int i = 0; i < s.count; ++i)
      if (!s.files.count(i)) missing.push_back(i);
    if (missing.empty()) continue;
    const bool one_case_each =
        std::all_of(s.cases.begin(), s.cases.end(), [](const auto& c) { return c.second.size() == 1; });
    const bool empty_shards = missing.size() <= empty_inputs && one_case_each &&
                              missing.front() == static_cast<int>(s.files.size());  // the last shards
    if (!empty_shards) {
      std::string list;
      for (int i : missing) list += fmt::format("{}{}/{}", list.empty() ? "" : ", ", i, s.count);
      const bool one = missing.size() == 1;
      throw InputError(fmt::format("report merge: sweep {}: {} {} {} missing: no input holds {} rows ({} of the "
                                   "inputs {} no rows, as a shard without cases; merge the files of all {} shards)",
                                   name, one ? "shard" : "shards", list, one ? "is" : "are", one ? "its" : "their",
                                   empty_inputs, empty_inputs == 1 ? "has" : "have", s.count));
    }
  }
}

// The rows of each sweep in its own case order, in the places its rows take in `rows` (shards
// run cases in cost-balanced order across files); other rows stay where they are.
void order_sweep_rows(std::vector<ResultRow>& rows) {
  std::map<std::string, std::vector<size_t>> slots;
  for (size_t k = 0; k < rows.size(); ++k)
    if (!rows[k].sweep.empty()) slots[rows[k].sweep].push_back(k);
  for (const auto& [name, at] : slots) {
    std::vector<ResultRow> mine;
    for (size_t k : at) mine.push_back(std::move(rows[k]));
    std::stable_sort(mine.begin(), mine.end(),
                     [](const ResultRow& x, const ResultRow& y) { return x.case_index < y.case_index; });
    for (size_t j = 0; j < at.size(); ++j) rows[at[j]] = std::move(mine[j]);
  }
}

}  // namespace

std::vector<ResultRow> merge_results(const std::vector<MergeInput>& inputs, const MergeOptions& opts) {
  check_shards(inputs, opts);  // first: a repeated shard repeats every pair, and says more
  std::vector<ResultRow> out;
  std::map<std::pair<std::string, std::string>, std::pair<size_t, std::string>> seen;  // pair -> (index, file)
  std::string build, build_file, device, device_file;
  for (const MergeInput& in : inputs) {
    for (const ResultRow& r : in.rows) {
      if (!opts.allow_mixed) {
        if (build.empty()) {
          build = r.build;
          build_file = in.path;
        } else if (r.build != build) {
          throw InputError("report merge: " + in.path + " was written by \"" + r.build + "\" but " + build_file +
                           " by \"" + build + "\" (pass --allow-mixed to merge them anyway)");
        }
        if (!host_row(r)) {
          if (device.empty()) {
            device = r.device;
            device_file = in.path;
          } else if (r.device != device) {
            throw InputError("report merge: " + in.path + " ran on \"" + r.device + "\" but " + device_file +
                             " on \"" + device + "\" (pass --allow-mixed to merge them anyway)");
          }
        }
      }
      const auto key = std::make_pair(r.scenario, r.backend);
      const auto it = seen.find(key);
      if (it != seen.end()) {
        if (!opts.allow_duplicates)
          throw InputError("report merge: (" + r.scenario + ", " + r.backend + ") is in both " + it->second.second +
                           " and " + in.path + " (pass --allow-duplicates to keep the last one)");
        out[it->second.first] = r;
        it->second.second = in.path;
        continue;
      }
      seen.emplace(key, std::make_pair(out.size(), in.path));
      out.push_back(r);
    }
  }
  order_sweep_rows(out);
  return out;
}

}  // namespace attn
