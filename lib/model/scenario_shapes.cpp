// Scenario -> concrete batch shapes. Random batches are a pure function of the seed: lengths
// come from mix64 counters (no std:: distributions, whose output differs between standard
// libraries), so a seed names the same batch on every machine.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "core/values.hpp"
#include "model/batch.hpp"
#include "model/scenario.hpp"
#include "model/trace.hpp"

namespace attn {
namespace {

// Counter streams of the length draws; distinct from the value generator's tensors by using
// a different mixing path (seed ^ stream constant, then the index).
enum class LengthStream : uint64_t { context = 0x636f6e74657874ull, query = 0x7175657279ull };

// Uniform in [0, 1) with 53 random bits, from (seed, stream, index).
double unit_uniform(uint64_t seed, LengthStream stream, uint64_t index) {
  const uint64_t h = mix64(mix64(seed ^ static_cast<uint64_t>(stream)) + index);
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

// Length of request r under distribution d.
int draw_length(const LengthDist& d, uint64_t seed, LengthStream stream, int r) {
  const uint64_t i = static_cast<uint64_t>(r);
  switch (d.kind) {
    case LengthDist::Kind::fixed:
      return d.value;
    case LengthDist::Kind::uniform: {
      const int64_t span = static_cast<int64_t>(d.max) - d.min + 1;
      const int64_t k = static_cast<int64_t>(unit_uniform(seed, stream, i) * static_cast<double>(span));
      return d.min + static_cast<int>(std::min(k, span - 1));
    }
    case LengthDist::Kind::lognormal: {
      // Box-Muller on two counter uniforms; u1 in (0, 1] keeps the log finite.
      const double u1 = 1.0 - unit_uniform(seed, stream, 2 * i);
      const double u2 = unit_uniform(seed, stream, 2 * i + 1);
      const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
      // `mean` is the mean of the length itself: E[exp(mu + sigma z)] = exp(mu + sigma^2 / 2).
      const double mu = std::log(d.mean) - 0.5 * d.sigma * d.sigma;
      const double x = std::exp(mu + d.sigma * z);
      // An unbounded draw still has to fit a sequence length (context + query in int32).
      const double hi = d.max > 0 ? d.max : std::max<double>(d.min, kLognormalUnboundedMax);
      return static_cast<int>(std::clamp(std::nearbyint(x), static_cast<double>(d.min), hi));
    }
  }
  return d.value;
}

BatchShape base_shape(const Scenario& s) {
  BatchShape b;
  b.label = s.name;
  b.shared_prefix_len = s.batch.shared_prefix_len;
  b.local_attention_chunk = s.batch.local_attention_chunk;
  b.data = s.data;
  b.block_allocation = s.batch.block_allocation;
  b.num_blocks = s.batch.num_blocks;
  b.step = -1;
  b.origin = s.batch.origin;
  b.origin.file = s.file;
  return b;
}

// Blocks of one request of seq_len tokens beyond the shared prefix's.
int64_t own_blocks(int64_t seq_len, int block_size, int shared_prefix_len) {
  return (seq_len + block_size - 1) / block_size - shared_prefix_len / block_size;
}

}  // namespace

std::vector<BatchShape> expand_shapes(const Scenario& s) {
  switch (s.batch.source) {
    case BatchSource::groups: {
      BatchShape b = base_shape(s);
      const int bs = s.spec.block_size;
      if (bs > 0) {
        // The batch's sizes from the groups, checked before a request list is built: the error
        // names the group that makes the batch large.
        BatchSize z;
        z.used_blocks = s.batch.shared_prefix_len / bs;
        const bool named = !b.origin.size_key.empty();  // e.g. the CLI's --batch
        double largest = -1;
        for (std::size_t i = 0; i < s.batch.groups.size(); ++i) {
          const RequestGroup& g = s.batch.groups[i];
          const int64_t seq = static_cast<int64_t>(g.context_len) + g.query_len;
          const int64_t nb = own_blocks(seq, bs, s.batch.shared_prefix_len);
          z.num_reqs += g.count;
          z.num_tokens += static_cast<int64_t>(g.count) * g.query_len;
          z.used_blocks += static_cast<int64_t>(g.count) * nb;
          z.max_blocks_per_req = std::max(z.max_blocks_per_req, (seq + bs - 1) / bs);
          const double weight = static_cast<double>(g.count) * static_cast<double>(nb + g.query_len);
          if (!named && weight > largest) {  // a file: name the group's count
            largest = weight;
            b.origin.size_key = "batch.requests[" + std::to_string(i) + "].count";
            b.origin.size_value = std::to_string(g.count);
          }
        }
        check_batch_size(s.spec, b, z);
        b.requests.reserve(static_cast<std::size_t>(z.num_reqs));
      }
      for (const RequestGroup& g : s.batch.groups) {
        for (int i = 0; i < g.count; ++i) b.requests.push_back(RequestShape{g.context_len, g.query_len});
      }
      return {b};
    }
    case BatchSource::random: {
      BatchShape b = base_shape(s);
      const RandomBatchConfig& rc = s.batch.random;
      const int bs = s.spec.block_size;
      if (b.origin.size_key.empty()) {
        b.origin.size_key = "batch.random.num_requests";
        b.origin.size_value = std::to_string(rc.num_requests);
      }
      if (bs > 0) {
        const int prefix = s.batch.shared_prefix_len;
        // First the least the draws can make (cheap, before a pass over every request), then the
        // exact sizes: the draws are pure, so they are made twice rather than stored unchecked.
        const int64_t n = rc.num_requests;
        auto least = [](const LengthDist& d) -> int64_t { return d.kind == LengthDist::Kind::fixed ? d.value : d.min; };
        const int64_t min_q = least(rc.query_len), min_c = least(rc.context_len);
        BatchSize lo;
        lo.num_reqs = n;
        lo.num_tokens = n * min_q;
        lo.max_blocks_per_req = (min_c + min_q + bs - 1) / bs;
        lo.used_blocks = n * own_blocks(min_c + min_q, bs, prefix) + prefix / bs;
        check_batch_size(s.spec, b, lo);
        BatchSize z;
        z.num_reqs = n;
        z.used_blocks = prefix / bs;
        for (int r = 0; r < rc.num_requests; ++r) {
          const int64_t c = draw_length(rc.context_len, s.seed, LengthStream::context, r);
          const int64_t q = draw_length(rc.query_len, s.seed, LengthStream::query, r);
          z.num_tokens += q;
          z.used_blocks += own_blocks(c + q, bs, prefix);
          z.max_blocks_per_req = std::max(z.max_blocks_per_req, (c + q + bs - 1) / bs);
        }
        check_batch_size(s.spec, b, z);
      }
      b.requests.reserve(static_cast<std::size_t>(rc.num_requests));
      for (int r = 0; r < rc.num_requests; ++r) {
        RequestShape rs;
        rs.context_len = draw_length(rc.context_len, s.seed, LengthStream::context, r);
        rs.query_len = draw_length(rc.query_len, s.seed, LengthStream::query, r);
        b.requests.push_back(rs);
      }
      return {b};
    }
    case BatchSource::trace:
      return trace_shapes(s);
  }
  return {};
}

}  // namespace attn
