#include "report/merge.hpp"

#include <map>
#include <utility>

#include "core/error.hpp"

namespace attn {

namespace {

// Host-only rows (the cpu backend) carry "host cpu" as their device in every shard.
bool host_row(const ResultRow& r) { return r.device == "host cpu"; }

}  // namespace

std::vector<ResultRow> merge_results(const std::vector<MergeInput>& inputs, const MergeOptions& opts) {
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
  return out;
}

}  // namespace attn
