#pragma once
// Request-trace replay: a CSV trace (TIMESTAMP,ContextTokens,GeneratedTokens) run through a
// chunked-prefill scheduler model like vLLM's, giving the batch of any scheduler step.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/scenario.hpp"

namespace attn {

struct TraceRequest {
  double arrival_s = 0;  // seconds since the first row
  int prompt_tokens = 0;
  int output_tokens = 0;
};

// Reads the CSV with fast-cpp-csv-parser. InputError names the file, line and column on an
// unreadable file or a malformed row.
std::vector<TraceRequest> load_trace_csv(const std::string& path);

struct SchedulerConfig {
  int max_num_batched_tokens = 8192;  // token budget of one step
  int max_num_seqs = 256;             // running requests at most
  double step_ms = 15.0;              // modelled step duration (advances the arrival clock)
};

// One scheduled step: the requests in it (running decodes first, then prefill chunks), as
// (context_len, query_len) shapes, with the trace row of each.
struct ScheduledStep {
  long step = 0;
  double clock_s = 0;
  std::vector<RequestShape> requests;
  std::vector<int> trace_rows;
};

// FCFS admission; each step first gives every running decode one token, then fills the rest
// of the token budget with prefill chunks (continuing partial prefills before admitting new
// requests); a request finishes after output_tokens decode steps. Calls on_step for every
// non-empty step numbered report_from or later until the trace drains, max_steps steps were
// made, or on_step returns false, and returns the number of steps made (counting the one whose
// on_step returned false). Steps below report_from are fast-forwarded where nothing finishes or
// is admitted for a stretch, so a late step of a trace with huge prompts or outputs is quick;
// the steps reported are exactly those of a step-by-step replay.
long replay_trace(const std::vector<TraceRequest>& trace, const SchedulerConfig& cfg,
                  const std::function<bool(const ScheduledStep&)>& on_step, long max_steps = 0,
                  long report_from = 0);

// clock with step_s added k times, one addition after another (each rounded), bit-identical to
// that loop but in time proportional to the binades crossed rather than to k. The replay's
// clock decides which arrivals a step sees, so a fast-forward must not round differently.
double advance_clock(double clock, double step_s, long k);

// The batch shapes a trace scenario asks for (one step, or every step).
std::vector<BatchShape> trace_shapes(const Scenario& s);

}  // namespace attn
