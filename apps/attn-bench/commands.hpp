#pragma once
#include <CLI/CLI.hpp>
#include <functional>

namespace attn::cli {

// The verb chosen on the command line; its callback returns the exit code.
struct Commands {
  std::function<int()> selected;
  int run() const { return selected ? selected() : 2; }
};

void add_list(CLI::App& app, Commands& c);
void add_describe(CLI::App& app, Commands& c);
void add_run_and_validate(CLI::App& app, Commands& c);
void add_report(CLI::App& app, Commands& c);
void add_device(CLI::App& app, Commands& c);
void add_sweep(CLI::App& app, Commands& c);

inline void register_commands(CLI::App& app, Commands& c) {
  add_list(app, c);
  add_describe(app, c);
  add_run_and_validate(app, c);
  add_sweep(app, c);
  add_report(app, c);
  add_device(app, c);
}

}  // namespace attn::cli
