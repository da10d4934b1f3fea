#pragma once
// Backends side by side: on each batch that two or more backends timed and passed, every backend's
// median time over the fastest one's, so that "how fast against the alternatives" reads in one
// line per batch (the console after `run`'s table, and `report markdown`).
#include <string>
#include <vector>

#include "report/results.hpp"

namespace attn {

struct SideBySide {
  std::vector<std::string> backends;  // the columns: backends with a ratio on some line, in the rows' order
  struct Line {
    std::string batch;                // the rows' `scenario` (a sweep case's without its :BACKEND)
    std::string fastest;              // its fastest backend ...
    double fastest_us = 0;            // ... and that backend's median time
    std::vector<std::string> cells;   // per backend: "1.00", "1.37", "~1.01" (within the two rows'
                                      // noise); else why there is no ratio: the row's status where it
                                      // did not pass, "untimed", "other work" (its spec or batch shape
                                      // differs from the others'), "2 rows" (the file repeats it), "-" (no row)
  };
  std::vector<Line> lines;
};

// The batches with at least two passing timed rows of one backend each that measured the same work;
// none: no lines.
SideBySide side_by_side(const std::vector<ResultRow>& rows);
// Aligned text: a header line, then one line per batch ("" when there are no lines).
std::string side_by_side_text(const SideBySide& s);

}  // namespace attn
