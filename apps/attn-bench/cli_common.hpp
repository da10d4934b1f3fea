#pragma once
// Pieces shared by the verbs: where scenarios come from, output formats, device ceilings.
#include <CLI/CLI.hpp>
#include <concepts>
#include <cstdint>
#include <string>
#include <vector>

#include "model/scenario.hpp"
#include "pipeline/pipeline.hpp"

namespace attn::cli {

// Scenario sources of describe/run/validate: files, or --model PRESET --batch SPEC.
struct ScenarioArgs {
  std::vector<std::string> files;
  std::string model;
  std::string batch;
  uint64_t seed = 0;
  bool seed_set = false;
  std::vector<std::string> sets;  // --set KEY=VALUE, each applied to every scenario (ScenarioOverride)
  void add_to(CLI::App& cmd);
  std::vector<Scenario> load() const;  // InputError on bad input or when none is given
  // InputError naming both arguments when two of load()'s scenarios have one name: their rows
  // would share a (scenario, backend) key, which compare and merge refuse.
  void check_distinct(const std::vector<Scenario>& loaded) const;
};

// An output path given with `flag` is checked before anything runs, so that a typo costs no
// benchmark time: its folder must exist, the path must not be a folder, and its name must end
// in one of `extensions` (none given: any name), the folder must be writable, and an existing
// file there must be writable too (a read-only one is not replaced). InputError otherwise.
void check_output_path(const char* flag, const std::string& path, const std::vector<std::string>& extensions = {});
// The same for an output folder that is created when missing (report plot --out): it, or the
// nearest folder above it that exists, must be a writable folder.
void check_output_folder(const char* flag, const std::string& dir);
// A path given on the command line, with the flag or argument that gave it ("--junit", "base").
struct PathArg {
  std::string flag, path;
};
// InputError when two outputs, or an output and an input, are one file (compared after
// normalising: ./a.csv, dir/../a.csv, a symlink or a hard link to it are a.csv).
void check_distinct_paths(const std::vector<PathArg>& outputs, const std::vector<PathArg>& inputs = {});
// "a,b" -> {"a", "b"}; InputError naming `flag` on an empty entry ("a,,b", "a,", "").
std::vector<std::string> split_list(const std::string& flag, const std::string& text);
bool ends_with(const std::string& s, const std::string& suffix);

// Integer flags' ranges with plain messages ("-1: must be >= 0"; CLI11's own number checks
// print their bounds as 300-digit doubles).
CLI::Validator at_least(long long min);

enum class Format { table, csv, json };
void add_format_option(CLI::App& cmd, Format& f);

// Measured once per process when a CUDA device is present: copy bandwidth (GB/s) and bf16
// tensor-core rate (TFLOP/s); zeros when unknown (no device, CUDA off, or measurement failed).
struct Ceilings {
  std::string device;
  double copy_gbs = 0;
  double bf16_tflops = 0;
  std::string note;  // why unknown
};
Ceilings device_ceilings();
// The measured ceilings (and device name) into the options of a timed pipeline run.
void apply_device_ceilings(PipelineOptions& opts);

}  // namespace attn::cli

namespace attn::cli {

// One cell of a Table: its text, and how JSON writes it. Text stays a JSON string; an integer,
// or a number already formatted (Cell::number), is a JSON number; Cell::yes_no is yes/no in the
// console table and true/false in CSV and JSON (as the results files write booleans).
struct Cell {
  enum class Kind { text, number, boolean };
  std::string text;
  Kind kind = Kind::text;
  Cell(std::string s) : text(std::move(s)) {}
  Cell(const char* s) : text(s) {}
  template <std::integral T>
    requires(!std::same_as<T, bool>)  // a bool is yes_no(b), never the number 0 or 1
  Cell(T n) : text(std::to_string(n)), kind(Kind::number) {}
  static Cell number(std::string formatted) { return {std::move(formatted), Kind::number}; }
  static Cell yes_no(bool b) { return {b ? "yes" : "no", Kind::boolean}; }

 private:
  Cell(std::string s, Kind k) : text(std::move(s)), kind(k) {}
};

// A small table rendered as aligned text, CSV or JSON (an array of objects).
struct Table {
  std::vector<std::string> columns;
  std::vector<std::vector<Cell>> rows;
  std::string render(Format f) const;
};

}  // namespace attn::cli
