// JUnit XML for CI systems: a <testsuite> per scenario (in first-seen order), a <testcase>
// per backend; fail rows carry <failure>, error rows <error>, skipped rows <skipped>, each
// with the row's reason. The details (errors, worst element) go in the element's text; a row
// whose data left a declared feature unexercised carries that note as <system-out>.
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "report/columns.hpp"
#include "report/results.hpp"

namespace attn {

namespace {

// Escapes for attribute values and text. Control characters other than tab/LF/CR are not
// allowed in XML 1.0 at all (not even as references): they become a space.
std::string xml_escape(std::string_view s) {
  std::string e;
  e.reserve(s.size());
  for (char ch : s) {
    switch (ch) {
      case '&': e += "&amp;"; break;
      case '<': e += "&lt;"; break;
      case '>': e += "&gt;"; break;
      case '"': e += "&quot;"; break;
      case '\'': e += "&apos;"; break;
      case '\n': e += "&#10;"; break;  // kept through attribute normalization
      case '\r': e += "&#13;"; break;
      case '\t': e += "&#9;"; break;
      default: e += static_cast<unsigned char>(ch) < 0x20 ? ' ' : ch;
    }
  }
  return e;
}

struct Suite {
  std::string name;
  std::vector<const ResultRow*> rows;
  int failures = 0, errors = 0, skipped = 0;
};

std::string details(const ResultRow& r) {
  return fmt::format("max_abs_err={} rel_l2={} cosine={} nan_mismatches={} unwritten={} worst: {}",
                     format_double(r.max_abs_err), format_double(r.rel_l2), format_double(r.cosine),
                     r.nan_mismatches, r.unwritten, r.worst);
}

}  // namespace

std::string rows_to_junit(const std::vector<ResultRow>& rows) {
  std::vector<Suite> suites;
  for (const ResultRow& r : rows) {
    auto it = std::find_if(suites.begin(), suites.end(), [&](const Suite& s) { return s.name == r.scenario; });
    if (it == suites.end()) it = suites.insert(suites.end(), Suite{r.scenario, {}, 0, 0, 0});
    it->rows.push_back(&r);
    it->errors += r.status == "error";
    it->skipped += r.status == "skipped";
    it->failures += r.status != "pass" && r.status != "error" && r.status != "skipped";
  }
  int failures = 0, errors = 0, skipped = 0;
  for (const Suite& s : suites) {
    failures += s.failures;
    errors += s.errors;
    skipped += s.skipped;
  }

  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out += fmt::format("<testsuites name=\"attn-bench\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\">\n",
                     rows.size(), failures, errors, skipped);
  for (const Suite& s : suites) {
    out += fmt::format("  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\">\n",
                       xml_escape(s.name), s.rows.size(), s.failures, s.errors, s.skipped);
    for (const ResultRow* r : s.rows) {
      // time: the measured median of one call (0 when the row was not timed).
      out += fmt::format("    <testcase classname=\"{}\" name=\"{}\" time=\"{}\"", xml_escape(s.name),
                         xml_escape(r->backend), format_double(r->median_time_us * 1e-6));
      // A pass whose data leaves a declared feature unexercised passes a bug of that feature too:
      // the note travels with the testcase, where a CI page shows it.
      const std::string note =
          r->not_exercised.empty()
              ? std::string()
              : fmt::format("      <system-out>note: not exercised by the data (a bug there would move the output "
                            "by &lt; 4 budgets): {} [sensitivity {}]</system-out>\n",
                            xml_escape(r->not_exercised), xml_escape(r->sensitivity));
      if (r->status == "pass" && note.empty()) {
        out += "/>\n";
        continue;
      }
      out += ">\n" + note;
      if (r->status == "pass") {
        out += "    </testcase>\n";
        continue;
      }
      const std::string reason = xml_escape(r->reason);
      if (r->status == "skipped") {
        out += fmt::format("      <skipped message=\"{}\"/>\n", reason);
      } else if (r->status == "error") {
        out += fmt::format("      <error message=\"{}\">{}</error>\n", reason, reason);
      } else {  // fail, or a status this writer does not know: never report it as passing
        out += fmt::format("      <failure message=\"{}\">{}</failure>\n", reason, xml_escape(details(*r)));
      }
      out += "    </testcase>\n";
    }
    out += "  </testsuite>\n";
  }
  out += "</testsuites>\n";
  return out;
}

void write_junit(const std::string& path, const std::vector<ResultRow>& rows) {
  write_file_atomic(path, rows_to_junit(rows));
}

}  // namespace attn
