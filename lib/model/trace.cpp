// Request traces: CSV loading and a chunked-prefill scheduler model that turns arrivals into
// the per-step batches a serving engine hands to its attention backend.
#include "model/trace.hpp"

// fccp's error types copy file names with strncpy, which GCC flags where they get inlined.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstringop-truncation"
#include <libfccp/csv.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <limits>
#include <string>
#include <string_view>

#include "core/error.hpp"
#include "core/host_memory.hpp"

namespace attn {
namespace {

// Days since 1970-01-01 of a proleptic Gregorian date (era-based civil calendar arithmetic).
int64_t days_from_civil(int64_t y, int m, int d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;                                      // [0, 399]
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;     // [0, 365]
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;              // [0, 146096]
  return era * 146097 + doe - 719468;
}

// Days of month m (1-12) of year y, leap years included: 2023-02-30 is no date, and
// days_from_civil would quietly read it as 2023-03-02.
int days_in_month(int64_t y, int m) {
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return m == 2 && leap ? 29 : kDays[m - 1];
}

bool parse_int(std::string_view s, int64_t& out) {
  if (s.empty()) return false;
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, out);
  return ec == std::errc() && p == end;
}

// A timestamp as whole seconds + fraction. Accepts "YYYY-MM-DD HH:MM:SS[.fraction]" (a 'T'
// separator too), or a plain number of seconds.
struct Timestamp {
  int64_t whole = 0;
  double frac = 0;
};

bool parse_timestamp(std::string_view s, Timestamp& t) {
  auto digits = [&](size_t at, size_t n, int64_t& v) {
    if (at + n > s.size()) return false;
    v = 0;
    for (size_t i = at; i < at + n; ++i) {
      if (s[i] < '0' || s[i] > '9') return false;
      v = v * 10 + (s[i] - '0');
    }
    return true;
  };
  int64_t Y, M, D, h, m, sec;
  if (s.size() >= 19 && s[4] == '-' && s[7] == '-' && (s[10] == ' ' || s[10] == 'T') && s[13] == ':' &&
      s[16] == ':') {
    if (!digits(0, 4, Y) || !digits(5, 2, M) || !digits(8, 2, D) || !digits(11, 2, h) || !digits(14, 2, m) ||
        !digits(17, 2, sec))
      return false;
    if (M < 1 || M > 12 || D < 1 || D > days_in_month(Y, static_cast<int>(M)) || h > 23 || m > 59 || sec > 60)
      return false;
    t.whole = days_from_civil(Y, static_cast<int>(M), static_cast<int>(D)) * 86400 + h * 3600 + m * 60 + sec;
    t.frac = 0;
    if (s.size() > 19) {
      if (s[19] != '.' || s.size() == 20) return false;
      double scale = 0.1;
      for (size_t i = 20; i < s.size(); ++i, scale *= 0.1) {
        if (s[i] < '0' || s[i] > '9') return false;
        t.frac += (s[i] - '0') * scale;
      }
    }
    return true;
  }
  // Plain seconds.
  std::string copy(s);
  char* end = nullptr;
  const double v = std::strtod(copy.c_str(), &end);
  if (copy.empty() || end != copy.c_str() + copy.size() || !(v == v) || v < 0 || v > 1e15) return false;
  t.whole = static_cast<int64_t>(v);
  t.frac = v - static_cast<double>(t.whole);
  return true;
}

}  // namespace

std::vector<TraceRequest> load_trace_csv(const std::string& path) {
  std::vector<TraceRequest> out;
  try {
    io::CSVReader<3> in(path);
    in.read_header(io::ignore_extra_column, "TIMESTAMP", "ContextTokens", "GeneratedTokens");
    char *ts_field = nullptr, *ctx_field = nullptr, *gen_field = nullptr;
    Timestamp first, prev;
    double prev_s = 0;
    while (in.read_row(ts_field, ctx_field, gen_field)) {
      const long line = static_cast<long>(in.get_file_line());
      auto bad = [&](const char* column, std::string_view value, const std::string& what, const std::string& hint) {
        return InputError(InputSite{path, line, column, std::string(value), what, hint});
      };
      Timestamp ts;
      if (!parse_timestamp(ts_field, ts))
        throw bad("TIMESTAMP", ts_field, "not a timestamp", "expected \"YYYY-MM-DD HH:MM:SS[.fraction]\" or seconds");
      auto count = [&](const char* column, const char* field, int64_t min) {
        int64_t v;
        if (!parse_int(field, v)) throw bad(column, field, "not an integer token count", "");
        if (v < min)
          throw bad(column, field, "must be >= " + std::to_string(min), min > 0 ? "a request needs a prompt" : "");
        if (v > std::numeric_limits<int32_t>::max()) throw bad(column, field, "too large", "at most 2^31 - 1 tokens");
        return static_cast<int>(v);
      };
      TraceRequest r;
      r.prompt_tokens = count("ContextTokens", ctx_field, 1);
      r.output_tokens = count("GeneratedTokens", gen_field, 0);
      // The last decode step's sequence holds the prompt and every output token but the last.
      const int64_t last_seq = static_cast<int64_t>(r.prompt_tokens) + std::max(r.output_tokens, 1) - 1;
      if (last_seq > std::numeric_limits<int32_t>::max())
        throw bad("GeneratedTokens", gen_field,
                  "ContextTokens + GeneratedTokens - 1 = " + std::to_string(last_seq) +
                      " (the last decode's sequence) does not fit a 32-bit sequence length",
                  "at most 2^31 - 1 tokens in all");
      if (out.empty()) first = ts;
      r.arrival_s = static_cast<double>(ts.whole - first.whole) + (ts.frac - first.frac);
      if (!out.empty() && (ts.whole < prev.whole || (ts.whole == prev.whole && ts.frac < prev.frac)))
        throw bad("TIMESTAMP", ts_field, "earlier than the previous row",
                  "rows must be sorted by arrival; the previous row is at +" + std::to_string(prev_s) + " s");
      prev = ts;
      prev_s = r.arrival_s;
      out.push_back(r);
    }
  } catch (const io::error::can_not_open_file& e) {
    throw InputError(InputSite{path, 0, "", "", e.what(),
                                         "a relative trace path is resolved from the scenario file's folder"});
  } catch (const io::error::base& e) {
    // Unreadable file, missing header column, too few/many columns: fccp's message names them.
    throw InputError(InputSite{path, 0, "", "", e.what(),
                                         "expected a CSV with columns TIMESTAMP,ContextTokens,GeneratedTokens"});
  }
  if (out.empty())
    throw InputError(InputSite{path, 0, "", "", "the trace has no requests"});
  return out;
}

// ---- clock fast-forward ------------------------------------------------------------------------
//
// Inside one binade [2^(e-1), 2^e) the doubles are the multiples of u = 2^(e-53), so clock +
// step_s rounds to clock + D*u with D = round(step_s / u) whatever clock is, while the exact sum
// stays below 2^e. A tie (step_s / u ending in .5) rounds to the even multiple instead; once clock
// is an even multiple, D is even too and stays put. So each binade takes O(1) steps; the first
// addition that leaves it is made as is.
double advance_clock(double clock, double step_s, long k) {
  while (k > 0) {
    const double next = clock + step_s;
    if (!std::isfinite(next) || next == clock) return next;  // stuck at inf, or step_s below half an ulp
    double top, u;  // clock's binade ends at top; u spaces its doubles
    if (clock >= std::numeric_limits<double>::min()) {
      int e = 0;
      std::frexp(clock, &e);
      top = std::ldexp(1.0, e);
      u = std::ldexp(1.0, e - 53);
    } else {  // zero or subnormal: multiples of the smallest subnormal below the smallest normal
      top = std::numeric_limits<double>::min();
      u = std::numeric_limits<double>::denorm_min();
    }
    const int64_t C = static_cast<int64_t>(clock / u);  // exact: clock is a multiple of u below 2^53 u
    const double S = step_s / u, floor_S = std::floor(S);
    if (!(next < top) || (S - floor_S == 0.5 && C % 2 != 0)) {  // leaves the binade, or a tie from odd
      clock = next;
      --k;
      continue;
    }
    const int64_t D = static_cast<int64_t>((next - clock) / u);  // >= 1; exact (both in the binade)
    // Addition j (from 0) stays in the binade while C + j*D + S < top/u, i.e. j*D <= room.
    const int64_t room = static_cast<int64_t>(top / u) - C - static_cast<int64_t>(floor_S) - 1;
    const int64_t t = std::min<int64_t>(k, room / D + 1);
    clock = static_cast<double>(C + t * D) * u;
    k -= t;
  }
  return clock;
}

// ---- scheduler model ---------------------------------------------------------------------------
//
// Per step, in the order vLLM v1's scheduler fills its token budget:
//   1. every running request whose prompt is complete gets one decode token (context_len =
//      tokens in its cache, query_len = 1), in running order;
//   2. running requests with a partial prompt continue: chunk = min(remaining prompt, budget);
//   3. waiting requests (FCFS by arrival) are admitted while fewer than max_num_seqs run and
//      budget remains, each with chunk = min(prompt, budget).
// The step that completes a prompt also samples the first output token (as in vLLM), so a
// request makes output_tokens - 1 decode steps after its prefill and then leaves; one with
// output_tokens <= 1 leaves right after its prefill. A decode step's context_len counts the
// prompt and the previously decoded tokens (prompt + generated - 1).
// The clock starts at the first arrival and advances step_ms per step; a request joins the
// waiting queue once clock >= its arrival. When nothing runs or waits, the clock jumps to the
// next arrival, and such idle time is not a step.
//
// Fast-forward (steps below report_from only): a step that admits nobody repeats with the same
// chunks for k steps while no running request finishes or completes its prompt and no admission
// becomes possible. Then the k steps are applied at once: decodes gain k tokens, a budget-limited
// prefill k chunks, and the clock k additions of step_s (advance_clock, bit-identical). Arrivals in
// the stretch while admission is blocked (budget spent or max_num_seqs running) just queue, and the
// next loop top queues them in the same FCFS order; when admission is open, the stretch ends
// before the step whose clock reaches the next arrival.
long replay_trace(const std::vector<TraceRequest>& trace, const SchedulerConfig& cfg,
                  const std::function<bool(const ScheduledStep&)>& on_step, long max_steps, long report_from) {
  struct Running {
    int row;
    int computed;   // tokens in the cache
    int generated;  // output tokens sampled so far
  };
  if (cfg.max_num_batched_tokens < 1 || cfg.max_num_seqs < 1 || !(cfg.step_ms > 0))
    throw InputError(InputSite{"<scheduler>", 0, "max_num_batched_tokens/max_num_seqs/step_ms",
                                         std::to_string(cfg.max_num_batched_tokens) + "/" +
                                             std::to_string(cfg.max_num_seqs) + "/" + std::to_string(cfg.step_ms),
                                         "must all be positive"});
  const double step_s = cfg.step_ms / 1000.0;
  const size_t n = trace.size();
  size_t next_arrival = 0;
  std::deque<int> waiting;       // trace rows, FCFS
  std::vector<Running> running;  // admission order
  std::vector<Running> still;    // scratch for the next step's running list
  // At most max_num_seqs run, and never more than the trace has rows (max_num_seqs may be 2^31 - 1).
  const size_t most_running = std::min(static_cast<size_t>(cfg.max_num_seqs), n);
  running.reserve(most_running);
  still.reserve(most_running);
  std::vector<int> chunk_of;  // [running.size()] tokens scheduled this step per running entry
  ScheduledStep st;
  double clock = n ? trace[0].arrival_s : 0;
  long step = 0;

  // How many steps, from this one (step < report_from, nobody admitted), repeat it exactly:
  // 1 unless a stretch of k > 1 steps, within report_from and max_steps, has no running request
  // finish or complete its prompt and no admission. budget: what this step left unscheduled.
  auto quiet_steps = [&](long budget) {
    long k = report_from - step;
    if (max_steps > 0) k = std::min(k, max_steps - step);
    for (size_t i = 0; i < running.size() && k > 1; ++i) {
      if (chunk_of[i] == 0) continue;  // starved by the budget: unchanged while the others are
      const Running& r = running[i];
      const TraceRequest& tr = trace[r.row];
      if (r.computed >= tr.prompt_tokens)  // a decode finishes once generated reaches max(1, output_tokens)
        k = std::min<long>(k, std::max(1, tr.output_tokens) - 1L - r.generated);
      else  // a budget-limited chunk of c tokens repeats, the prompt staying partial, while left > k*c
        k = std::min<long>(k, (tr.prompt_tokens - r.computed - 1L) / chunk_of[i]);
    }
    // With budget left and a free slot the waiting queue is empty (else this step would have
    // admitted): stop before the first step whose clock reaches the next arrival.
    if (k > 1 && budget > 0 && static_cast<int>(running.size()) < cfg.max_num_seqs && next_arrival < n) {
      // The most steps j < k after which the clock is still < arrival: gallop up from 1 (stretches
      // between dense arrivals are short), then bisect.
      const double arrival = trace[next_arrival].arrival_s;
      long lo = 0, hi = 1;  // the clock after lo steps is < arrival
      while (hi < k && advance_clock(clock, step_s, hi) < arrival) {
        lo = hi;
        hi *= 2;
      }
      hi = std::min(hi - 1, k - 1);
      while (lo < hi) {
        const long mid = lo + (hi - lo + 1) / 2;
        if (advance_clock(clock, step_s, mid) < arrival)
          lo = mid;
        else
          hi = mid - 1;
      }
      k = lo + 1;
    }
    return k;
  };

  while (true) {
    if (max_steps > 0 && step >= max_steps) return step;
    if (running.empty() && waiting.empty()) {
      if (next_arrival == n) return step;  // drained
      clock = std::max(clock, trace[next_arrival].arrival_s);
    }
    while (next_arrival < n && trace[next_arrival].arrival_s <= clock) waiting.push_back(static_cast<int>(next_arrival++));

    st.step = step;
    st.clock_s = clock;
    st.requests.clear();
    st.trace_rows.clear();
    long budget = cfg.max_num_batched_tokens;
    chunk_of.assign(running.size(), 0);

    // 1. Decodes.
    for (size_t i = 0; i < running.size() && budget > 0; ++i) {
      const Running& r = running[i];
      if (r.computed < trace[r.row].prompt_tokens) continue;
      chunk_of[i] = 1;
      --budget;
      st.requests.push_back({r.computed, 1});
      st.trace_rows.push_back(r.row);
    }
    // 2. Partial prefills.
    for (size_t i = 0; i < running.size() && budget > 0; ++i) {
      const Running& r = running[i];
      const int left = trace[r.row].prompt_tokens - r.computed;
      if (left <= 0) continue;
      const int chunk = static_cast<int>(std::min<long>(left, budget));
      chunk_of[i] = chunk;
      budget -= chunk;
      st.requests.push_back({r.computed, chunk});
      st.trace_rows.push_back(r.row);
    }
    // 3. Admissions.
    const size_t admitted_from = running.size();
    while (!waiting.empty() && budget > 0 && static_cast<int>(running.size()) < cfg.max_num_seqs) {
      const int row = waiting.front();
      waiting.pop_front();
      const int chunk = static_cast<int>(std::min<long>(trace[row].prompt_tokens, budget));
      budget -= chunk;
      running.push_back({row, 0, 0});
      chunk_of.push_back(chunk);
      st.requests.push_back({0, chunk});
      st.trace_rows.push_back(row);
    }

    if (!st.requests.empty()) {
      if (step >= report_from) {
        if (!on_step(st)) return step + 1;
      } else if (running.size() == admitted_from) {  // nobody admitted: maybe a quiet stretch
        const long k = quiet_steps(budget);
        if (k > 1) {
          for (size_t i = 0; i < running.size(); ++i) {
            Running& r = running[i];
            if (chunk_of[i] == 0) continue;
            if (r.computed >= trace[r.row].prompt_tokens) {
              r.computed += static_cast<int>(k);
              r.generated += static_cast<int>(k);
            } else {
              r.computed += static_cast<int>(k * chunk_of[i]);
            }
          }
          step += k;
          clock = advance_clock(clock, step_s, k);
          continue;
        }
      }
      ++step;
    }

    // Advance every scheduled request; drop the finished ones (order kept).
    still.clear();
    for (size_t i = 0; i < running.size(); ++i) {
      Running r = running[i];
      const int prompt = trace[r.row].prompt_tokens;
      if (chunk_of[i] > 0) {
        const bool was_decode = r.computed >= prompt;
        r.computed += chunk_of[i];
        if (was_decode || r.computed == prompt) ++r.generated;  // the step that ends a prompt samples a token
      }
      if (r.computed >= prompt && r.generated >= std::max(1, trace[r.row].output_tokens)) continue;
      still.push_back(r);
    }
    running.swap(still);
    clock += step_s;
  }
}

std::vector<BatchShape> trace_shapes(const Scenario& s) {
  const TraceConfig& tc = s.batch.trace;
  const std::vector<TraceRequest> trace = load_trace_csv(tc.file);
  SchedulerConfig cfg;
  cfg.max_num_batched_tokens = tc.max_num_batched_tokens;
  cfg.max_num_seqs = tc.max_num_seqs;
  cfg.step_ms = tc.step_ms;
  const BatchOrigin& origin = s.batch.origin;
  // Messages about the trace keys: the scenario file, the key's line (the [batch.trace] table's
  // when the key was left out) and the full key.
  auto key_error = [&](const std::string& key, const std::string& value, const std::string& what,
                       const std::string& hint) {
    const long line = origin.line(key) != 0 ? origin.line(key) : origin.line("batch.trace");
    return InputError(InputSite{s.file, line, key, value, what, hint});
  };

  std::vector<BatchShape> shapes;
  auto shape_of = [&](const ScheduledStep& st) {
    BatchShape b;
    b.label = s.name + "@" + std::to_string(st.step);
    b.requests = st.requests;
    b.shared_prefix_len = s.batch.shared_prefix_len;
    b.local_attention_chunk = s.batch.local_attention_chunk;
    b.data = s.data;
    b.block_allocation = s.batch.block_allocation;
    b.num_blocks = s.batch.num_blocks;
    b.step = st.step;
    b.origin = origin;
    b.origin.file = s.file;
    if (b.origin.lines.count("batch.trace.step") == 0) b.origin.lines["batch.trace.step"] = origin.line("batch.trace");
    b.origin.size_key = "batch.trace.step";
    b.origin.size_value = tc.all_steps ? "\"all\" (step " + std::to_string(st.step) + ")" : std::to_string(st.step);
    return b;
  };
  if (tc.all_steps) {
    // Every step's request list is kept: check host memory as the list grows (each time it doubles).
    double bytes = 0, next_check = 64e6;
    replay_trace(trace, cfg, [&](const ScheduledStep& st) {
      shapes.push_back(shape_of(st));
      bytes += static_cast<double>(sizeof(BatchShape) + origin.lines.size() * 96 /* map nodes */ +
                                   st.requests.size() * sizeof(RequestShape));
      if (bytes >= next_check) {
        require_host_bytes(2 * bytes, input_error_message(s.file, origin.line("batch.trace.step"), "batch.trace.step",
                                                          "\"all\"", "keeping the batches of the first " +
                                                              std::to_string(shapes.size()) + " steps"));
        next_check = 2 * bytes;
      }
      return true;
    }, tc.max_steps);
    return shapes;
  }
  if (tc.step < 0) throw key_error("batch.trace.step", std::to_string(tc.step), "must be >= 0", "");
  // Only step tc.step is reported: replay_trace fast-forwards through the steps before it.
  const long steps = replay_trace(trace, cfg, [&](const ScheduledStep& st) {
    shapes.push_back(shape_of(st));
    return false;
  }, 0, tc.step);
  if (shapes.empty())
    throw key_error("batch.trace.step", std::to_string(tc.step),
                    "the trace drains after " + std::to_string(steps) + " steps",
                    "choose a step below " + std::to_string(steps));
  return shapes;
}

}  // namespace attn
