// Results files: CSV round trip and error paths, JSON escaping, the console table, atomic
// writes, JUnit and the compare gate.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "report/columns.hpp"
#include "report/compare.hpp"
#include "report/markdown.hpp"
#include "report/merge.hpp"
#include "report/results.hpp"
#include "report/side_by_side.hpp"

namespace attn {
namespace {

namespace fs = std::filesystem;

// A fresh folder per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            ("attn-report-" + std::string(info->name()) + "-" + std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::permissions(path_, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void spit(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary);
  out << content;
}

// A row with every field random, strings with the characters CSV and JSON must escape.
ResultRow random_row(std::mt19937_64& rng, int i) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::uniform_int_distribution<int64_t> big(0, int64_t{1} << 50);
  const std::vector<std::string> nasty = {
      "plain", "with, comma", "with \"quotes\"", "multi\nline\r\nreason", "back\\slash \\n literal",
      " leading and trailing ", "", "tab\there", "unicode \xc3\xa9\xe2\x9c\x93", "\"", ",,,", "a\"\",b"};
  ResultRow r;
  for (const ResultColumn& c : kResultColumns) {
    std::visit(
        [&](auto member) {
          auto& v = r.*member;
          using V = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<V, std::string>) {
            v = nasty[rng() % nasty.size()] + std::to_string(i);
          } else if constexpr (std::is_same_v<V, bool>) {
            v = rng() & 1;
          } else if constexpr (std::is_same_v<V, double>) {
            v = u(rng) * std::pow(10.0, static_cast<int>(rng() % 40) - 20);
          } else if constexpr (std::is_same_v<V, int64_t>) {
            v = big(rng);
          } else {
            v = static_cast<int>(rng() % 100000) - 10;
          }
        },
        c.field);
  }
  const char* statuses[] = {"pass", "fail", "skipped", "error"};
  r.status = statuses[i % 4];
  r.batch_invariance_checked = rng() & 1;
  // Times are never negative (read_csv refuses one).
  for (double* t : {&r.plan_us, &r.median_time_us, &r.min_time_us, &r.max_time_us, &r.stdev_time_us}) *t = std::abs(*t);
  return r;
}

void expect_same_rows(const std::vector<ResultRow>& a, const std::vector<ResultRow>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    for (const ResultColumn& c : kResultColumns) {
      EXPECT_EQ(field_applies(a[i], c), field_applies(b[i], c)) << "row " << i << " column " << c.name;
      if (field_applies(a[i], c))
        EXPECT_EQ(field_text(a[i], c), field_text(b[i], c)) << "row " << i << " column " << c.name;
    }
}

// ---- CSV ----------------------------------------------------------------------------------

TEST(ReportCsv, HeaderIsTheDocumentedColumnOrder) {
  const std::string csv = rows_to_csv({});
  const std::vector<std::string> names = result_column_names();
  ASSERT_EQ(names.size(), kResultColumns.size());
  std::string header;
  for (size_t i = 0; i < names.size(); ++i) header += (i ? "," : "") + names[i];
  EXPECT_EQ(csv, header + "\n");
  EXPECT_EQ(names.front(), "scenario");
  EXPECT_NE(std::find(names.begin(), names.end(), "median_time_us"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "tb_per_sec"), names.end());
  // The fp8 scales side by side: k, v, then the query's.
  const auto k = std::find(names.begin(), names.end(), "k_scale");
  ASSERT_NE(k, names.end());
  ASSERT_LT(k + 2, names.end());
  EXPECT_EQ(*(k + 1), "v_scale");
  EXPECT_EQ(*(k + 2), "q_scale");
}

TEST(ReportCsv, QueryScaleRoundTripsAndDefaultsToOff) {
  TempDir dir;
  ResultRow r;
  r.scenario = "fp8_query_prefill";
  r.backend = "cpu";
  r.kv_cache_dtype = "fp8_e4m3";
  r.k_scale = 0.125;
  r.q_scale = 4.0 / 448.0;
  write_csv(dir.file("q.csv"), {r});
  const std::vector<ResultRow> back = read_csv(dir.file("q.csv"));
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].q_scale, 4.0 / 448.0);
  EXPECT_EQ(back[0].k_scale, 0.125);
  EXPECT_EQ(ResultRow{}.q_scale, 0.0);
  // A file from before the column: the query was not quantized.
  spit(dir.file("old.csv"), "scenario,backend,status,k_scale,v_scale\nfp8_kv,cpu,pass,0.5,2\n");
  const std::vector<ResultRow> old = read_csv(dir.file("old.csv"));
  ASSERT_EQ(old.size(), 1u);
  EXPECT_EQ(old[0].q_scale, 0.0);
  EXPECT_EQ(old[0].v_scale, 2.0);
}

TEST(ReportCsv, RoundTripIsExact) {
  TempDir dir;
  std::mt19937_64 rng(1234);
  std::vector<ResultRow> rows;
  for (int i = 0; i < 40; ++i) rows.push_back(random_row(rng, i));
  rows[0].tflops = std::numeric_limits<double>::infinity();  // a time may not be (read_csv refuses it)
  rows[1].rel_l2 = std::numeric_limits<double>::quiet_NaN();
  rows[2].status = "pass";
  rows[2].max_abs_err = 0.1 + 0.2;  // needs 17 digits
  rows[3].tflops = 5e-324;          // the smallest subnormal
  const std::string path = dir.file("results.csv");
  write_csv(path, rows);
  EXPECT_EQ(slurp(path), rows_to_csv(rows));
  const std::vector<ResultRow> back = read_csv(path);
  expect_same_rows(rows, back);
  EXPECT_EQ(back[2].max_abs_err, 0.1 + 0.2);
  EXPECT_EQ(back[0].reason.find('\n') == std::string::npos, rows[0].reason.find('\n') == std::string::npos);
  // Every row is one physical line: header + 40.
  const std::string text = slurp(path);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 41);
}

// A row that was not checked or not timed carries no errors or timings: its cells are empty
// (CSV) or null (JSON), never the defaults (cosine 1, deterministic true) that read as a pass;
// batch_invariant is empty wherever that check did not run. Empty cells read back as such.
TEST(ReportCsv, ColumnsOfChecksThatDidNotRunAreEmpty) {
  TempDir dir;
  ResultRow skipped;
  skipped.scenario = "s";
  skipped.backend = "flash_attn";
  skipped.status = "skipped";
  skipped.reason = "no GPU";
  skipped.flops = 1e9;
  ResultRow untimed;
  untimed.scenario = "s";
  untimed.backend = "cpu";
  untimed.status = "pass";
  untimed.rel_l2 = 1e-3;
  ResultRow timed = untimed;
  timed.backend = "cpu2";
  timed.samples = 3;
  timed.median_time_us = 7.5;
  timed.batch_invariance_checked = true;
  timed.batch_invariant = false;
  const std::string csv = rows_to_csv({skipped, untimed, timed});
  const auto cell = [&](int row, const std::string& name) {
    std::istringstream in(csv);
    std::string line;
    for (int i = 0; i <= row + 1; ++i) std::getline(in, line);
    const std::vector<std::string> names = result_column_names();
    const size_t col = static_cast<size_t>(std::find(names.begin(), names.end(), name) - names.begin());
    std::vector<std::string> cells;
    std::string c;
    std::istringstream cs(line);
    while (std::getline(cs, c, ',')) cells.push_back(c);
    if (!line.empty() && line.back() == ',') cells.push_back("");
    return col < cells.size() ? cells[col] : std::string("?");
  };
  for (const char* name : {"max_abs_err", "cosine", "checked_pairs", "deterministic", "batch_invariant",
                           "median_time_us", "samples", "tflops"})
    EXPECT_EQ(cell(0, name), "") << name;
  EXPECT_EQ(cell(0, "flops"), "1e+09");
  EXPECT_EQ(cell(1, "rel_l2"), "0.001");
  EXPECT_EQ(cell(1, "deterministic"), "true");
  EXPECT_EQ(cell(1, "batch_invariant"), "");
  EXPECT_EQ(cell(1, "median_time_us"), "");
  EXPECT_EQ(cell(2, "batch_invariant"), "false");
  EXPECT_EQ(cell(2, "median_time_us"), "7.5");

  const std::string j = rows_to_json({skipped});
  EXPECT_NE(j.find("\"cosine\": null"), std::string::npos) << j;
  EXPECT_NE(j.find("\"deterministic\": null"), std::string::npos) << j;

  write_csv(dir.file("r.csv"), {skipped, untimed, timed});
  const std::vector<ResultRow> back = read_csv(dir.file("r.csv"));
  ASSERT_EQ(back.size(), 3u);
  EXPECT_FALSE(back[1].batch_invariance_checked);
  EXPECT_TRUE(back[2].batch_invariance_checked);
  EXPECT_FALSE(back[2].batch_invariant);
  EXPECT_EQ(rows_to_csv(back), csv);
}

TEST(ReportCsv, ReasonsWithCommasAndQuotesAreQuoted) {
  ResultRow r;
  r.scenario = "s";
  r.backend = "b";
  r.reason = "head size 80 unsupported, needs \"64|128\"";
  const std::string csv = rows_to_csv({r});
  EXPECT_NE(csv.find("\"head size 80 unsupported, needs \"\"64|128\"\"\""), std::string::npos) << csv;
}

TEST(ReportCsv, ReadsReorderedOlderAndNewerFiles) {
  TempDir dir;
  const std::string path = dir.file("old.csv");
  spit(path,
       "backend, scenario ,status,median_time_us,future_column\n"
       "cpu,decode-1,pass,12.5,whatever\n"
       "\"fa,2\",\"x \"\"y\"\"\",skipped,0,\n");
  const std::vector<ResultRow> rows = read_csv(path);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].scenario, "decode-1");
  EXPECT_EQ(rows[0].backend, "cpu");
  EXPECT_EQ(rows[0].median_time_us, 12.5);
  EXPECT_EQ(rows[0].tflops, 0);  // missing column: the default
  EXPECT_EQ(rows[1].backend, "fa,2");
  EXPECT_EQ(rows[1].scenario, "x \"y\"");
  EXPECT_EQ(rows[1].status, "skipped");
}

void expect_input_error(const std::string& path, const std::vector<std::string>& needles) {
  try {
    read_csv(path);
    ADD_FAILURE() << "no InputError for " << path;
  } catch (const InputError& e) {
    const std::string m = e.what();
    for (const std::string& n : needles) EXPECT_NE(m.find(n), std::string::npos) << "'" << n << "' not in: " << m;
  }
}

TEST(ReportCsv, MalformedFilesNameFileAndLine) {
  TempDir dir;
  const std::string header = rows_to_csv({});
  ResultRow r;
  r.scenario = "s";
  r.backend = "cpu";
  const std::string good = rows_to_csv({r}).substr(header.size());

  const std::string missing = dir.file("missing.csv");
  expect_input_error(missing, {missing, "cannot open"});

  const std::string bad_number = dir.file("bad_number.csv");
  std::string line = good;
  line.replace(line.find(",0,"), 3, ",abc,");  // num_q_heads, the first number
  spit(bad_number, header + good + line);
  expect_input_error(bad_number, {bad_number + ":3", "num_q_heads = abc"});

  const std::string short_row = dir.file("short.csv");
  spit(short_row, header + good + good + "s,cpu,pass\n");
  expect_input_error(short_row, {short_row + ":4", "malformed CSV"});

  const std::string open_quote = dir.file("quote.csv");
  spit(open_quote, header + "\"s,cpu" + good.substr(good.find(",cpu") + 4));
  expect_input_error(open_quote, {open_quote + ":2"});

  const std::string no_status = dir.file("no_status.csv");
  spit(no_status, "scenario,backend,median_time_us\ns,cpu,1\n");
  expect_input_error(no_status, {no_status, "status", "missing column"});

  const std::string bad_status = dir.file("bad_status.csv");
  spit(bad_status, "scenario,backend,status\ns,cpu,pass\ns,fa,maybe\n");
  expect_input_error(bad_status, {bad_status + ":3", "maybe", "unknown status"});

  const std::string bad_bool = dir.file("bad_bool.csv");
  spit(bad_bool, "scenario,backend,status,causal\ns,cpu,pass,yes\n");
  expect_input_error(bad_bool, {bad_bool + ":2", "causal"});

  const std::string empty = dir.file("empty.csv");
  spit(empty, "");
  expect_input_error(empty, {empty});
}

// The cells of one CSV line (no quoted commas in it), `col` set to `value`.
std::string with_cell(const std::string& line, const std::string& col, const std::string& value) {
  const std::vector<std::string> names = result_column_names();
  const size_t at = static_cast<size_t>(std::find(names.begin(), names.end(), col) - names.begin());
  std::vector<std::string> cells;
  std::stringstream ss(line.substr(0, line.find('\n')));
  for (std::string c; std::getline(ss, c, ',');) cells.push_back(c);
  cells.resize(names.size());
  cells.at(at) = value;
  std::string out;
  for (size_t i = 0; i < cells.size(); ++i) out += (i ? "," : "") + cells[i];
  return out + "\n";
}

// Defect: a median of -5 or nan read as "not timed" (compare showed "-" and "same", the gate
// passed), a stdev of -1 was taken; an empty scenario read as a row of its own; a folder given
// as the file said "Header missing". Each is an input error naming file, line, column, value.
TEST(ReportCsv, InvalidTimesEmptyNamesAndFoldersAreRefused) {
  TempDir dir;
  const std::string header = rows_to_csv({});
  ResultRow r;
  r.scenario = "s";
  r.backend = "cpu";
  r.samples = 3;
  r.median_time_us = r.min_time_us = r.max_time_us = 10;
  r.stdev_time_us = 1;
  const std::string good = rows_to_csv({r}).substr(header.size());
  const struct {
    const char* col;
    const char* value;
  } bad[] = {{"median_time_us", "-5"}, {"median_time_us", "nan"},  {"median_time_us", "inf"},
             {"stdev_time_us", "-1"},  {"min_time_us", "-0.5"},    {"max_time_us", "-nan"},
             {"plan_us", "-1"},        {"stdev_time_us", "nan"}};
  for (const auto& b : bad) {
    const std::string path = dir.file("bad.csv");
    spit(path, header + good + with_cell(good, b.col, b.value));
    expect_input_error(path, {path + ":3", std::string(b.col) + " = " + b.value, "not a valid time"});
  }
  // Legitimate: a row that was not timed leaves its times empty; -1 is "unknown" in the
  // percent-of-peak and read-floor columns; 0 is a time.
  ResultRow skipped = r;
  skipped.status = "skipped";
  std::string ok = with_cell(good, "pct_peak_bw", "-1");
  ok = with_cell(ok, "read_floor_us", "-1");
  ok = with_cell(ok, "plan_us", "0");
  spit(dir.file("ok.csv"), header + rows_to_csv({skipped}).substr(header.size()) + ok);
  const std::vector<ResultRow> back = read_csv(dir.file("ok.csv"));
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].median_time_us, 0);
  EXPECT_EQ(back[1].pct_peak_bw, -1);

  for (const char* key : {"scenario", "backend"}) {
    const std::string path = dir.file(std::string("no_") + key + ".csv");
    spit(path, header + good + with_cell(good, key, ""));
    expect_input_error(path, {path + ":3", key, "must not be empty"});
  }
  expect_input_error(dir.path().string(), {dir.path().string(), "is a folder, not a results file"});
}

// ---- JSON ---------------------------------------------------------------------------------

TEST(ReportJson, SchemaEscapingAndNonFinite) {
  ResultRow r;
  r.scenario = "quote\" back\\ nl\n tab\t ctl\x01 \xc3\xa9";
  r.backend = "cpu";
  r.median_time_us = 12.25;
  r.samples = 5;
  r.rel_l2 = std::numeric_limits<double>::quiet_NaN();
  r.tflops = std::numeric_limits<double>::infinity();
  r.causal = true;
  r.alibi = false;
  r.num_tokens = int64_t{1} << 40;
  const std::string j = rows_to_json({r, r});
  EXPECT_EQ(j.rfind("{\n  \"schema\": \"attn-bench-results/1\",\n  \"rows\": [", 0), 0u) << j;
  EXPECT_NE(j.find("\"scenario\": \"quote\\\" back\\\\ nl\\n tab\\t ctl\\u0001 \xc3\xa9\""), std::string::npos) << j;
  EXPECT_NE(j.find("\"median_time_us\": 12.25"), std::string::npos);
  EXPECT_NE(j.find("\"rel_l2\": null"), std::string::npos);
  EXPECT_NE(j.find("\"tflops\": null"), std::string::npos);
  EXPECT_NE(j.find("\"causal\": true"), std::string::npos);
  EXPECT_NE(j.find("\"alibi\": false"), std::string::npos);
  EXPECT_NE(j.find("\"num_tokens\": 1099511627776"), std::string::npos);
  EXPECT_NE(j.find("\"v_scale\": 1, \"q_scale\": 0,"), std::string::npos) << j;
  // No raw control character survives.
  for (char ch : j) EXPECT_TRUE(ch == '\n' || static_cast<unsigned char>(ch) >= 0x20);
  // Two rows, one per line, separated by a comma.
  EXPECT_NE(j.find("},\n    {"), std::string::npos);
  EXPECT_EQ(rows_to_json({}), "{\n  \"schema\": \"attn-bench-results/1\",\n  \"rows\": []\n}\n");

  TempDir dir;
  write_json(dir.file("r.json"), {r});
  EXPECT_EQ(slurp(dir.file("r.json")), rows_to_json({r}));
}

// ---- console table ------------------------------------------------------------------------

TEST(ReportTable, AlignedColumnsAndDashesForSkipped) {
  ResultRow a;
  a.scenario = "llama3-8b-decode";
  a.backend = "cpu";
  a.num_reqs = 48;
  a.num_tokens = 48;
  a.max_abs_err = 3.1e-3;
  a.rel_l2 = 2e-4;
  a.median_time_us = 1234.5678;
  a.samples = 10;
  a.tflops = 1.25;
  a.tb_per_sec = 0.0421;
  a.pct_peak_bw = 37.2;
  ResultRow s = a;
  s.backend = "FLASH_ATTN";
  s.status = "skipped";
  s.reason = std::string(100, 'x');
  const std::string t = format_table({a, s});
  std::vector<std::string> lines;
  std::stringstream ss(t);
  for (std::string l; std::getline(ss, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].rfind("scenario", 0), 0u);
  for (const char* h : {"backend", "status", "reqs", "tokens", "max_abs_err", "rel_l2", "median_us", "TFLOP/s", "GB/s",
                        "%peak", "reason"})
    EXPECT_NE(lines[0].find(h), std::string::npos) << h;
  // Columns line up: "status" starts where each row's status does.
  const size_t col = lines[0].find("status");
  EXPECT_EQ(lines[1].substr(col, 4), "pass");
  EXPECT_EQ(lines[2].substr(col, 7), "skipped");
  EXPECT_NE(lines[1].find("1234.57"), std::string::npos);
  EXPECT_NE(lines[1].find(" 42 "), std::string::npos);  // GB/s
  EXPECT_NE(lines[1].find("37%"), std::string::npos);
  EXPECT_NE(lines[2].find(" - "), std::string::npos);
  EXPECT_NE(lines[2].find("xxx..."), std::string::npos);  // long reasons are cut
  EXPECT_EQ(lines[2].find(std::string(100, 'x')), std::string::npos);
  // A reason of words is cut at a word's end, never in half a word.
  s.reason = "no NVIDIA GPU or driver on this machine (cudaErrorInsufficientDriver: CUDA driver version is insufficient)";
  const std::string w = format_table({s});
  EXPECT_NE(w.find("on this machine..."), std::string::npos) << w;
  EXPECT_EQ(w.find("cudaErrorI"), std::string::npos) << w;
}

// ---- atomic writes ------------------------------------------------------------------------

TEST(ReportAtomic, WritesAndReplaces) {
  TempDir dir;
  const std::string path = dir.file("out.txt");
  write_file_atomic(path, "first");
  fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
  write_file_atomic(path, std::string(100000, 'z'));
  EXPECT_EQ(slurp(path), std::string(100000, 'z'));
  EXPECT_EQ(fs::status(path).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
  // Only the target remains: no temp file left behind.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);
}

TEST(ReportAtomic, FailureLeavesNoFile) {
  TempDir dir;
  // A folder that does not exist.
  const std::string nowhere = dir.file("no/such/folder/out.csv");
  try {
    write_file_atomic(nowhere, "x");
    ADD_FAILURE() << "no error";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find(nowhere), std::string::npos) << e.what();
  }
  // The target is a folder: the rename fails after the temp file was written, and is removed.
  const std::string folder = dir.file("a-folder");
  fs::create_directory(folder);
  EXPECT_THROW(write_csv(folder, {}), RuntimeError);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);
  // An unwritable folder (permissions do not bind root, which the check above covers).
  if (::geteuid() != 0) {
    const std::string ro = dir.file("ro");
    fs::create_directory(ro);
    fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
    EXPECT_THROW(write_json(ro + "/r.json", {}), RuntimeError);
    fs::permissions(ro, fs::perms::owner_all);
    EXPECT_TRUE(fs::is_empty(ro));
  }
}

// Defect: `run -o a.csv -o b.json --junit j.xml` wrote a.csv, then failed on b.json and never
// wrote j.xml. A set is written all or none: a target that cannot be written (a folder, a
// folder that is a file: both fail as root too) leaves every other target as it was and no
// temp file behind.
TEST(ReportAtomic, SetOfFilesIsWrittenAllOrNone) {
  TempDir dir;
  const std::string a = dir.file("a.csv"), b = dir.file("b.json"), folder = dir.file("c.xml");
  spit(a, "old");
  fs::create_directory(folder);
  spit(dir.file("blocker"), "x");
  for (const std::string& bad : {folder, dir.file("blocker") + "/j.xml"}) {
    try {
      write_files_atomic({{a, "new"}, {b, "new"}, {bad, "new"}});
      ADD_FAILURE() << "no error for " << bad;
    } catch (const RuntimeError& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
    EXPECT_EQ(slurp(a), "old") << bad;
    EXPECT_FALSE(fs::exists(b)) << bad;
    EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 3) << bad;
    EXPECT_TRUE(fs::is_empty(folder));
  }
  write_files_atomic({{a, "new a"}, {b, "new b"}});
  EXPECT_EQ(slurp(a), "new a");
  EXPECT_EQ(slurp(b), "new b");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 4);
}

// ---- JUnit --------------------------------------------------------------------------------

TEST(ReportJunit, SuitesCasesFailuresAndSkips) {
  std::vector<ResultRow> rows(4);
  rows[0].scenario = rows[1].scenario = "decode";
  rows[2].scenario = rows[3].scenario = "prefill <&>";
  rows[0].backend = rows[2].backend = "cpu";
  rows[1].backend = rows[3].backend = "FLASH_ATTN";
  rows[1].status = "fail";
  rows[1].reason = "rel_l2 0.5 > 0.01 & \"worse\"";
  rows[2].status = "skipped";
  rows[2].reason = "head size 80 <unsupported>";
  rows[3].status = "error";
  rows[3].reason = "CUDA error";
  const std::string x = rows_to_junit(rows);
  EXPECT_EQ(x.rfind("<?xml", 0), 0u);
  EXPECT_NE(x.find("<testsuites name=\"attn-bench\" tests=\"4\" failures=\"1\" errors=\"1\" skipped=\"1\">"),
            std::string::npos)
      << x;
  EXPECT_NE(x.find("<testsuite name=\"decode\" tests=\"2\" failures=\"1\" errors=\"0\" skipped=\"0\">"),
            std::string::npos);
  EXPECT_NE(x.find("<testsuite name=\"prefill &lt;&amp;&gt;\" tests=\"2\""), std::string::npos);
  EXPECT_NE(x.find("<failure message=\"rel_l2 0.5 &gt; 0.01 &amp; &quot;worse&quot;\">"), std::string::npos) << x;
  EXPECT_NE(x.find("<skipped message=\"head size 80 &lt;unsupported&gt;\"/>"), std::string::npos);
  EXPECT_NE(x.find("<error message=\"CUDA error\">"), std::string::npos);
  EXPECT_NE(x.find("name=\"cpu\" time=\"0\"/>"), std::string::npos);  // a pass is an empty testcase
  EXPECT_EQ(std::count(x.begin(), x.end(), '<') - std::count(x.begin(), x.end(), '>'), 0);

  TempDir dir;
  write_junit(dir.file("j.xml"), rows);
  EXPECT_EQ(slurp(dir.file("j.xml")), x);

  // A pass whose data does not exercise a declared feature says so in the testcase (it passed
  // with no mark, though a bug of that feature would pass too).
  rows[0].not_exercised = "window";
  rows[0].sensitivity = "causal=210 window=0.002";
  const std::string y = rows_to_junit(rows);
  EXPECT_NE(y.find("name=\"cpu\" time=\"0\">\n      <system-out>note: not exercised by the data (a bug there "
                   "would move the output by &lt; 4 budgets): window [sensitivity causal=210 window=0.002]"
                   "</system-out>\n    </testcase>"),
            std::string::npos)
      << y;
  EXPECT_EQ(std::count(y.begin(), y.end(), '<') - std::count(y.begin(), y.end(), '>'), 0);
}

// ---- compare gate -------------------------------------------------------------------------

ResultRow timed(const std::string& scenario, const std::string& backend, double us, const std::string& status = "pass") {
  ResultRow r;
  r.scenario = scenario;
  r.backend = backend;
  r.status = status;
  r.median_time_us = us;
  r.samples = us > 0 ? 10 : 0;
  return r;
}

TEST(ReportCompare, ParseSlowdown) {
  EXPECT_DOUBLE_EQ(parse_slowdown("5%"), 0.05);
  EXPECT_DOUBLE_EQ(parse_slowdown("0.05"), 0.05);
  EXPECT_DOUBLE_EQ(parse_slowdown(" 12.5% "), 0.125);
  EXPECT_DOUBLE_EQ(parse_slowdown("0"), 0.0);
  for (const char* bad : {"", "%", "abc", "-1%", "5%%", "0.05x", "nan", "inf"}) {
    EXPECT_THROW(parse_slowdown(bad), InputError) << bad;
  }
  try {
    parse_slowdown("fast", "--max-slowdown");
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--max-slowdown = fast"), std::string::npos) << e.what();
  }
}

TEST(ReportCompare, SlowdownThreshold) {
  const std::vector<ResultRow> base = {timed("a", "cpu", 100), timed("b", "cpu", 200), timed("c", "cpu", 50)};
  CompareOptions opts;
  opts.max_slowdown = parse_slowdown("5%");

  CompareReport r = compare_results(base, {timed("a", "cpu", 104), timed("b", "cpu", 210), timed("c", "cpu", 40)}, opts);
  EXPECT_TRUE(r.pass) << r.verdict;  // +4%, exactly +5%, -20%
  EXPECT_EQ(r.slowdowns, 0);
  EXPECT_EQ(r.rows[2].change, CompareChange::faster);
  EXPECT_NEAR(r.rows[0].ratio, 1.04, 1e-12);
  EXPECT_NEAR(r.rows[0].slowdown, 0.04, 1e-12);
  EXPECT_EQ(r.verdict.rfind("PASS", 0), 0u);

  r = compare_results(base, {timed("a", "cpu", 106), timed("b", "cpu", 200), timed("c", "cpu", 50)}, opts);
  EXPECT_FALSE(r.pass);
  EXPECT_EQ(r.slowdowns, 1);
  EXPECT_EQ(r.rows[0].change, CompareChange::slower);
  EXPECT_TRUE(r.rows[0].regression);
  EXPECT_EQ(r.verdict.rfind("FAIL", 0), 0u);
  const std::string table = format_compare(r);
  EXPECT_NE(table.find("+6.0%"), std::string::npos) << table;
  EXPECT_NE(table.find("REGRESSION"), std::string::npos);
  EXPECT_NE(table.find(r.verdict), std::string::npos);

  opts.max_slowdown = 0.10;  // the same data under a looser gate
  EXPECT_TRUE(compare_results(base, {timed("a", "cpu", 106), timed("b", "cpu", 200), timed("c", "cpu", 50)}, opts).pass);
}

// A change no larger than the rows' noise (the smaller stdev / median of the two sides) is not a
// slowdown, as nvbench's compare judges it; --ignore-noise gates on the threshold alone.
TEST(ReportCompare, SlowdownsWithinTheNoiseDoNotFailTheGate) {
  auto noisy = [](const std::string& s, double us, double stdev) {
    ResultRow r = timed(s, "cpu", us);
    r.stdev_time_us = stdev;
    return r;
  };
  // a: +8% with 10% / 12% noise: within. b: +8% with 3% / 20%: beyond the smaller. c: +8%, one
  // side untimed for noise (1 sample): its known side's 10% holds it. d: -20% within 25%: same.
  std::vector<ResultRow> base = {noisy("a", 100, 10), noisy("b", 100, 3), noisy("c", 100, 10), noisy("d", 100, 25)};
  std::vector<ResultRow> next = {noisy("a", 108, 13), noisy("b", 108, 21.6), noisy("c", 108, 0), noisy("d", 80, 20)};
  next[2].samples = 1;
  CompareReport r = compare_results(base, next);
  EXPECT_FALSE(r.pass) << r.verdict;
  EXPECT_EQ(r.slowdowns, 1);
  EXPECT_EQ(r.within_noise, 2);
  EXPECT_EQ(r.rows[0].change, CompareChange::within_noise);
  EXPECT_NEAR(r.rows[0].noise, 0.10, 1e-12);
  EXPECT_EQ(r.rows[1].change, CompareChange::slower);
  EXPECT_NEAR(r.rows[1].noise, 0.03, 1e-12);
  EXPECT_EQ(r.rows[2].change, CompareChange::within_noise);
  EXPECT_EQ(r.rows[3].change, CompareChange::same);
  EXPECT_NE(r.verdict.find("beyond its noise"), std::string::npos) << r.verdict;
  EXPECT_NE(r.verdict.find("2 slower than the threshold within their noise"), std::string::npos) << r.verdict;
  const std::string table = format_compare(r);
  EXPECT_NE(table.find("slower, within noise"), std::string::npos) << table;
  EXPECT_NE(table.find("10.0%"), std::string::npos) << table;

  CompareOptions plain;
  plain.noise_aware = false;
  r = compare_results(base, next, plain);
  EXPECT_EQ(r.slowdowns, 3);
  EXPECT_EQ(r.within_noise, 0);
  EXPECT_EQ(r.rows[3].change, CompareChange::faster);
}

// The error against the precision floor is shown base -> new: a drift a budget still passes is
// seen in review, never gated (the status is the accuracy gate).
TEST(ReportCompare, AccuracyDriftIsShownNotGated) {
  ResultRow b = timed("a", "fa", 100), n = timed("a", "fa", 100), u = timed("u", "fa", 0, "skipped");
  b.err_over_floor = 1.21;
  n.err_over_floor = 1.52;
  const CompareReport r = compare_results({b, u}, {n, u});
  EXPECT_TRUE(r.pass) << r.verdict;
  EXPECT_NEAR(r.rows[0].base_x_floor, 1.21, 1e-12);
  EXPECT_NEAR(r.rows[0].new_x_floor, 1.52, 1e-12);
  const std::vector<std::vector<std::string>> cells = compare_cells(r);
  const auto headers = compare_headers();
  const size_t col = static_cast<size_t>(std::find(headers.begin(), headers.end(), "x_floor") - headers.begin());
  ASSERT_LT(col, headers.size());
  EXPECT_EQ(cells[0][col], "1.21 -> 1.52");
  EXPECT_EQ(cells[1][col], "-");
  EXPECT_EQ(compare_numeric_columns().size(), headers.size());
}

TEST(ReportCompare, StatusRegressionsFailTheGate) {
  const std::vector<ResultRow> base = {timed("a", "cpu", 100), timed("b", "cpu", 100), timed("c", "fa", 0, "skipped"),
                                       timed("d", "fa", 100, "fail")};
  const std::vector<ResultRow> next = {timed("a", "cpu", 100, "fail"), timed("b", "cpu", 0, "skipped"),
                                       timed("c", "fa", 100, "error"), timed("d", "fa", 300, "pass")};
  const CompareReport r = compare_results(base, next);
  EXPECT_FALSE(r.pass);
  EXPECT_EQ(r.status_regressions, 3);
  EXPECT_EQ(r.rows[0].change, CompareChange::status_worse);
  EXPECT_EQ(r.rows[1].change, CompareChange::status_worse);
  EXPECT_EQ(r.rows[2].change, CompareChange::status_worse);
  EXPECT_EQ(r.rows[3].change, CompareChange::status_better);  // fixed: its slower time is not gated
  EXPECT_FALSE(r.rows[3].regression);
  EXPECT_NE(format_compare(r).find("pass -> fail"), std::string::npos);
}

TEST(ReportCompare, AddedAndRemovedAreReportedNotGated) {
  const std::vector<ResultRow> base = {timed("a", "cpu", 100), timed("gone", "cpu", 100)};
  const std::vector<ResultRow> next = {timed("new", "fa", 10), timed("a", "cpu", 101), timed("new", "cpu", 0, "skipped")};
  const CompareReport r = compare_results(base, next);
  EXPECT_TRUE(r.pass) << r.verdict;
  EXPECT_EQ(r.added, 2);
  EXPECT_EQ(r.removed, 1);
  EXPECT_EQ(r.compared, 1);
  ASSERT_EQ(r.rows.size(), 4u);
  EXPECT_EQ(r.rows[1].change, CompareChange::removed);
  EXPECT_EQ(r.rows[2].change, CompareChange::added);
  EXPECT_EQ(r.rows[2].scenario, "new");
  EXPECT_EQ(r.rows[2].backend, "fa");
  EXPECT_NE(r.verdict.find("2 added, 1 removed"), std::string::npos) << r.verdict;
}

TEST(ReportCompare, DuplicateKeysAreAnInputError) {
  EXPECT_THROW(compare_results({timed("a", "cpu", 1), timed("a", "cpu", 2)}, {}), InputError);
  EXPECT_THROW(compare_results({}, {timed("a", "cpu", 1), timed("a", "cpu", 2)}), InputError);
  CompareOptions bad;
  bad.max_slowdown = -0.1;
  EXPECT_THROW(compare_results({}, {}, bad), InputError);
  // The message names the file the duplicate came from.
  CompareOptions named;
  named.base_name = "base.csv";
  named.new_name = "runs/new.csv";
  try {
    compare_results({}, {timed("a", "cpu", 1), timed("a", "cpu", 2)}, named);
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("runs/new.csv: scenario 'a' backend 'cpu' appears twice"), std::string::npos)
        << e.what();
  }
}

TEST(ReportCompare, WorksOnFilesReadBack) {
  TempDir dir;
  write_csv(dir.file("base.csv"), {timed("a, with comma", "cpu", 100)});
  write_csv(dir.file("new.csv"), {timed("a, with comma", "cpu", 130)});
  const CompareReport r = compare_results(read_csv(dir.file("base.csv")), read_csv(dir.file("new.csv")));
  EXPECT_FALSE(r.pass);
  EXPECT_NEAR(r.rows[0].slowdown, 0.30, 1e-12);
}

TEST(ReportStatus, NamesRoundTrip) {
  for (RowStatus s : {RowStatus::pass, RowStatus::fail, RowStatus::skipped, RowStatus::error})
    EXPECT_EQ(parse_row_status(to_string(s)), s);
  EXPECT_FALSE(parse_row_status("PASS"));
  EXPECT_FALSE(parse_row_status(""));
}

// ---- markdown ------------------------------------------------------------------------------

TEST(ReportMarkdown, CountsTablesPerBackendAndRankings) {
  ResultRow a = timed("decode_64x4k", "flash_attn", 398.0);
  a.rel_l2 = 2.0e-3;
  a.floor_rel_l2 = 1.66e-3;
  a.err_over_floor = 1.2;
  ResultRow b = timed("prefill_2x4k", "flash_attn", 860.0, "fail");
  b.rel_l2 = 9e-3;
  b.floor_rel_l2 = 1.6e-3;
  b.err_over_floor = 5.6;
  b.reason = "rel_l2 9e-3 > 1.6 x floor | see worst";
  ResultRow c = timed("prefill_2x4k", "cpu", 0, "skipped");
  c.reason = "too slow";
  ResultRow d = timed("decode_64x4k", "cpu", 52.5);
  const std::string md = results_markdown({a, b, c, d}, 1);
  EXPECT_NE(md.find("**4 rows: 2 pass, 1 fail, 1 skipped, 0 error**"), std::string::npos) << md;
  EXPECT_NE(md.find("### flash_attn"), std::string::npos);
  EXPECT_NE(md.find("### cpu"), std::string::npos);
  EXPECT_NE(md.find("\\| see worst"), std::string::npos) << "a | in a reason must not split the cell";
  EXPECT_NE(md.find("| prefill_2x4k | flash_attn | 860.00 us |"), std::string::npos) << md;  // slowest, top 1
  EXPECT_NE(md.find("| prefill_2x4k | flash_attn | 5.60 x floor |"), std::string::npos) << md;  // least accurate
  EXPECT_EQ(md.find("| decode_64x4k | flash_attn | 398.00 us |"), std::string::npos) << "only the top 1";
  // Without a measured floor the ranking falls back to rel_l2.
  a.floor_rel_l2 = 0;
  EXPECT_NE(results_markdown({a}).find("rel_l2 2.00e-03"), std::string::npos);
}

TEST(ReportMarkdown, CpuThroughputKeepsThreeSignificantDigits) {
  ResultRow cpu = timed("llama3-8b:1x1@128:cpu", "cpu", 1875.0);
  cpu.tflops = 0.00905;
  cpu.tb_per_sec = 0.00226;  // 2.26 GB/s
  cpu.pct_peak_bw = cpu.pct_peak_flops = -1;
  ResultRow gpu = timed("decode_64x4k", "flash_attn", 3.456);
  gpu.tflops = 571.14;
  gpu.tb_per_sec = 4.2853;
  gpu.pct_peak_bw = 91.2;
  const std::string md = results_markdown({cpu, gpu});
  // Rounded to fixed places these read 0.0 TFLOP/s and 2 GB/s, as if nothing had run.
  EXPECT_NE(md.find("| 1875.00 | 0.00905 | 2.26 | - |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 3.46 | 571.1 | 4285 | 91% |"), std::string::npos) << md;
  // Each timed row's spread and sample count, so two rows' difference can be judged against it.
  gpu.stdev_time_us = 0.045;
  EXPECT_NE(results_markdown({gpu}).find("| 91% | ±1.3% of 10 |"), std::string::npos) << results_markdown({gpu});
  // A row timed as the attention alone says so, in its cell and in the header.
  gpu.timed = "attention";
  EXPECT_NE(results_markdown({gpu}).find("| 3.46 (attention) | 571.1 |"), std::string::npos) << results_markdown({gpu});
  EXPECT_NE(results_markdown({gpu}).find(" · 1 row timed as the attention alone"), std::string::npos);
  EXPECT_EQ(figure_text(0.0123, 1), "0.0123");
  EXPECT_EQ(figure_text(12.345, 1), "12.3");
  EXPECT_EQ(figure_text(0, 0), "0");
}

// Backends side by side: on each batch that two or more backends timed and passed, each one's
// median over the fastest one's; a difference within the quieter row's noise is marked, a row that
// did not pass shows its status, and a batch with one timed row is left out.
TEST(ReportSideBySide, RatiosToTheFastestBackendPerBatch) {
  ResultRow fa = timed("mixed", "flash_attn", 100.0);
  ResultRow fi = timed("mixed", "flashinfer", 137.0);
  ResultRow cpu = timed("mixed", "cpu", 25000.0);
  ResultRow fa2 = timed("decode", "flash_attn", 50.5);
  fa2.stdev_time_us = 1.0;  // 2 % noise
  ResultRow fi2 = timed("decode", "flashinfer", 50.0);
  fi2.stdev_time_us = 1.5;
  ResultRow fa3 = timed("alone", "flash_attn", 10.0);
  ResultRow fi3 = timed("alone", "flashinfer", 0, "skipped");
  ResultRow fa4 = timed("wrong", "flash_attn", 5.0, "fail");
  ResultRow fi4 = timed("wrong", "flashinfer", 9.0);
  ResultRow cpu4 = timed("wrong", "cpu", 900.0);
  const SideBySide s = side_by_side({fa, fi, cpu, fa2, fi2, fa3, fi3, fa4, fi4, cpu4});
  EXPECT_EQ(s.backends, (std::vector<std::string>{"flash_attn", "flashinfer", "cpu"}));
  ASSERT_EQ(s.lines.size(), 3u);  // "alone" has one timed row
  EXPECT_EQ(s.lines[0].batch, "mixed");
  EXPECT_EQ(s.lines[0].fastest, "flash_attn");
  EXPECT_DOUBLE_EQ(s.lines[0].fastest_us, 100.0);
  EXPECT_EQ(s.lines[0].cells, (std::vector<std::string>{"1.00", "1.37", "250"}));
  EXPECT_EQ(s.lines[1].fastest, "flashinfer");
  EXPECT_EQ(s.lines[1].cells, (std::vector<std::string>{"~1.01", "1.00", "-"}));  // 1 % < min(2 %, 3 %)
  // The failing row's 5 us is not a speed: the fastest that passed is flashinfer's.
  EXPECT_EQ(s.lines[2].fastest, "flashinfer");
  EXPECT_EQ(s.lines[2].cells, (std::vector<std::string>{"fail", "1.00", "100"}));
  const std::string text = side_by_side_text(s);
  EXPECT_NE(text.find("batch   fastest     median_us  flash_attn  flashinfer  cpu"), std::string::npos) << text;
  EXPECT_NE(text.find("mixed   flash_attn     100.00        1.00        1.37  250"), std::string::npos) << text;
  EXPECT_TRUE(side_by_side({fa3, fi3}).lines.empty());
  // A sweep's case names end in their backend: its rows of one batch pair on the name without it.
  auto swept = [](ResultRow r) {
    r.sweep = "sw";
    return r;
  };
  const SideBySide sw = side_by_side({swept(timed("sw:llama3-8b:4x1@1024:flash_attn", "flash_attn", 20.0)),
                                      swept(timed("sw:llama3-8b:4x1@1024:FlashInfer", "flashinfer", 30.0)),
                                      swept(timed("sw:llama3-8b:4x1@1024:cpu", "flash_attn", 99.0))});
  ASSERT_EQ(sw.lines.size(), 1u);
  EXPECT_EQ(sw.lines[0].batch, "sw:llama3-8b:4x1@1024");
  EXPECT_EQ(sw.lines[0].cells, (std::vector<std::string>{"1.00", "1.50"}));
  // A name that is not a sweep's keeps its suffix: `x:cpu` on two backends is one batch.
  EXPECT_EQ(side_by_side({timed("x:cpu", "cpu", 10.0), timed("x:cpu", "flash_attn", 5.0)}).lines.size(), 1u);
  // No ratio where it would mislead: a backend with two rows of the batch, a passing row that was not
  // timed, a row of other work (another spec or batch shape under the same name), each said; a
  // backend without a ratio anywhere gets no column; a huge ratio stays short.
  ResultRow w1 = timed("b", "flash_attn", 10.0), w2 = timed("b", "flashinfer", 20.0), w3 = timed("b", "cpu", 1e9);
  w1.num_q_heads = w2.num_q_heads = w3.num_q_heads = 32;
  ResultRow dup = timed("b", "flashmla", 1.0), dup2 = timed("b", "flashmla", 2.0);
  ResultRow other = timed("c", "flashinfer", 20.0), other0 = timed("c", "flash_attn", 10.0), other1 = timed("c", "cpu", 30.0);
  other0.num_q_heads = other1.num_q_heads = 32;
  other.num_q_heads = 16;
  ResultRow untimed = timed("c", "flashmla", 0.0);
  const SideBySide m = side_by_side({w1, w2, w3, dup, dup2, other0, other, other1, untimed, fi3});
  EXPECT_EQ(m.backends, (std::vector<std::string>{"flash_attn", "flashinfer", "cpu"}));  // flashmla: no ratio
  ASSERT_EQ(m.lines.size(), 2u);
  EXPECT_EQ(m.lines[0].cells, (std::vector<std::string>{"1.00", "2.00", "1e+08"}));
  EXPECT_EQ(m.lines[1].cells, (std::vector<std::string>{"1.00", "other work", "3.00"}));
  const SideBySide d = side_by_side({w1, w2, dup, dup2, untimed});
  EXPECT_EQ(d.backends, (std::vector<std::string>{"flash_attn", "flashinfer"}));
  const SideBySide u = side_by_side({timed("e", "flash_attn", 1.0), timed("e", "flashinfer", 2.0), timed("e", "cpu", 0.0),
                                     timed("e", "flashmla", 3.0), timed("e", "flashmla", 4.0)});
  ASSERT_EQ(u.lines.size(), 1u);
  EXPECT_EQ(u.backends, (std::vector<std::string>{"flash_attn", "flashinfer"}));
  const SideBySide u2 = side_by_side({timed("e", "flash_attn", 1.0), timed("e", "flashinfer", 2.0), timed("e", "cpu", 0.0),
                                      timed("e", "flashmla", 3.0), timed("e", "flashmla", 4.0), timed("f", "cpu", 5.0),
                                      timed("f", "flashmla", 6.0)});
  ASSERT_EQ(u2.lines.size(), 2u);
  EXPECT_EQ(u2.backends, (std::vector<std::string>{"flash_attn", "flashinfer", "cpu", "flashmla"}));
  EXPECT_EQ(u2.lines[0].cells, (std::vector<std::string>{"1.00", "2.00", "untimed", "2 rows"}));
  EXPECT_EQ(side_by_side_text(side_by_side({fa3, fi3})), "");
  const std::string md = results_markdown({fa, fi, cpu});
  EXPECT_NE(md.find("### Backends side by side"), std::string::npos) << md;
  EXPECT_NE(md.find("| mixed | flash_attn | 100.00 | 1.00 | 1.37 | 250 |"), std::string::npos) << md;
  EXPECT_EQ(results_markdown({fa3, fi3}).find("side by side"), std::string::npos);
}

TEST(ReportMarkdown, HeaderNamesOnlyTheBuildAndDeviceThatAreKnown) {
  ResultRow r = timed("s", "cpu", 10);
  r.build = "attn-bench 1.0 (Release)";
  auto header = [](const std::vector<ResultRow>& rows) {
    const std::string md = results_markdown(rows);
    const size_t at = md.find("**");
    return md.substr(at, md.find('\n', at) - at);
  };
  // A CPU row has no device: no separator with nothing after it.
  EXPECT_EQ(header({r}), "**1 row: 1 pass, 0 fail, 0 skipped, 0 error** · attn-bench 1.0 (Release)");
  ResultRow g = timed("s", "flash_attn", 0, "skipped");
  g.build = r.build;
  EXPECT_EQ(header({g, r}), "**2 rows: 1 pass, 0 fail, 1 skipped, 0 error** · attn-bench 1.0 (Release)");
  ResultRow gpu = r;
  gpu.backend = "flash_attn";
  gpu.device = "NVIDIA H100";
  EXPECT_EQ(header({r, gpu}),
            "**2 rows: 2 pass, 0 fail, 0 skipped, 0 error** · attn-bench 1.0 (Release) · NVIDIA H100");
  EXPECT_EQ(header({timed("s", "cpu", 0, "skipped")}), "**1 row: 0 pass, 0 fail, 1 skipped, 0 error**");
}

TEST(ReportMarkdown, BackendSkippedEverywhereForOneReasonIsOneLine) {
  const std::string no_gpu = "no NVIDIA GPU: the flash_attn backend needs a CUDA device";
  std::vector<ResultRow> rows;
  for (const char* s : {"a:1x1@128", "a:1x1@256", "a:4x1@128"}) {
    rows.push_back(timed(s, "cpu", 100));
    for (const char* be : {"flash_attn", "flashinfer", "flashmla"}) {
      rows.push_back(timed(s, be, 0, "skipped"));
      rows.back().reason = no_gpu;
    }
    // Skipped for reasons that differ per scenario: those stay rows, they say something each.
    rows.push_back(timed(s, "triton", 0, "skipped"));
    rows.back().reason = std::string("too large: ") + s;
  }
  rows.push_back(timed("b", "xformers", 0, "skipped"));  // one reason, but not everywhere skipped
  rows.back().reason = no_gpu;
  rows.push_back(timed("c", "xformers", 50));
  const std::string md = results_markdown(rows);
  EXPECT_NE(md.find("\nflash_attn, flashinfer, flashmla: skipped on every scenario: " + no_gpu + "\n"),
            std::string::npos)
      << md;
  for (const char* gone : {"### flash_attn", "### flashinfer", "### flashmla"})
    EXPECT_EQ(md.find(gone), std::string::npos) << gone << " in\n" << md;
  EXPECT_NE(md.find("### triton"), std::string::npos) << md;
  EXPECT_NE(md.find("too large: a:4x1@128"), std::string::npos) << md;
  EXPECT_NE(md.find("### xformers"), std::string::npos) << md;
  EXPECT_NE(md.find("### cpu"), std::string::npos) << md;
  // The one collapsed line is said once, and the counts still count every row.
  EXPECT_EQ(md.find("skipped on every scenario"), md.rfind("skipped on every scenario")) << md;
  EXPECT_NE(md.find("**17 rows: 4 pass, 0 fail, 13 skipped, 0 error**"), std::string::npos) << md;
}

TEST(ReportMarkdown, CompareVerdictThenChangedRows) {
  const CompareReport r = compare_results({timed("s", "fa", 100), timed("t", "fa", 100)},
                                          {timed("s", "fa", 120), timed("t", "fa", 101)});
  const std::string md = compare_markdown(r);
  EXPECT_EQ(md.rfind("**FAIL", 0), 0u) << md;
  EXPECT_NE(md.find("| s | fa | 100.00 | 120.00 |"), std::string::npos) << md;
  EXPECT_EQ(md.find("| t | fa |"), std::string::npos) << "unchanged rows are left out";
  EXPECT_NE(compare_markdown(r, true).find("| t | fa |"), std::string::npos);
}

// ---- merge -----------------------------------------------------------------------------------

TEST(ReportMerge, ShardsInOrderRefusingMixesAndDuplicates) {
  auto row = [](const std::string& s, const std::string& be, const std::string& dev, const std::string& build) {
    ResultRow r = timed(s, be, 10);
    r.device = dev;
    r.build = build;
    return r;
  };
  const MergeInput a{"a.csv", {row("s1", "flash_attn", "H100", "b1"), row("s1", "cpu", "host cpu", "b1")}};
  const MergeInput b{"b.csv", {row("s2", "flash_attn", "H100", "b1")}};
  const std::vector<ResultRow> merged = merge_results({a, b});
  ASSERT_EQ(merged.size(), 3u);
  EXPECT_EQ(merged[2].scenario, "s2");

  const MergeInput other_gpu{"c.csv", {row("s3", "flash_attn", "H200", "b1")}};
  try {
    merge_results({a, other_gpu});
    ADD_FAILURE() << "mixed devices merged";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("c.csv"), std::string::npos) << m;
    EXPECT_NE(m.find("H200"), std::string::npos) << m;
    EXPECT_NE(m.find("--allow-mixed"), std::string::npos) << m;
  }
  EXPECT_THROW(merge_results({a, {"d.csv", {row("s4", "cpu", "host cpu", "b2")}}}), InputError);  // other build
  MergeOptions mixed;
  mixed.allow_mixed = true;
  EXPECT_EQ(merge_results({a, other_gpu}, mixed).size(), 3u);

  MergeInput again{"e.csv", {row("s1", "flash_attn", "H100", "b1")}};
  again.rows[0].median_time_us = 99;
  EXPECT_THROW(merge_results({a, again}), InputError);
  MergeOptions dup;
  dup.allow_duplicates = true;
  const std::vector<ResultRow> last = merge_results({a, again}, dup);
  ASSERT_EQ(last.size(), 2u);
  EXPECT_EQ(last[0].median_time_us, 99);  // the last one wins, in the first one's place
}

}  // namespace
}  // namespace attn
