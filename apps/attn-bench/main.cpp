// attn-bench: a thin CLI over the attn library. Each verb lives in cmd_<verb>.cpp.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <new>
#include <string>
#include <vector>
#include <fmt/format.h>

#include "commands.hpp"
#include "core/error.hpp"
#include "pipeline/pipeline.hpp"

int main(int argc, char** argv) {
  CLI::App app{"attn-bench: correctness and speed of paged-KV attention backends.\n"
               "Exit codes: 0 ok, 1 a check or gate failed, 2 usage or input error, 3 runtime or device error,\n"
               "4 run or validate checked nothing (every row skipped, or every row of a backend named in\n"
               "--backend), or report compare compared no row."};
  app.set_version_flag("--version", attn::build_info());
  app.require_subcommand(1);
  attn::cli::Commands cmds;
  attn::cli::register_commands(app, cmds);
  // An unknown verb names itself and the verbs (CLI11 would only say a subcommand is required).
  const std::vector<CLI::App*> subs = app.get_subcommands({});
  if (argc > 1 && argv[1][0] != '-' &&
      std::none_of(subs.begin(), subs.end(), [&](const CLI::App* sub) { return sub->check_name(argv[1]); })) {
    std::string verbs;
    for (const CLI::App* sub : subs) verbs += (verbs.empty() ? "" : ", ") + sub->get_name();
    std::fprintf(stderr, "attn-bench: error: unknown verb '%s' (verbs: %s; attn-bench --help)\n", argv[1], verbs.c_str());
    return attn::kExitInput;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    // A flag's error reads as every other input error does: one line, the tool's prefix.
    std::fprintf(stderr, "attn-bench: error: %s (attn-bench %s--help)\n", e.what(),
                 argc > 1 && argv[1][0] != '-' ? (std::string(argv[1]) + " ").c_str() : "");
    return attn::kExitInput;
  }
  try {
    return cmds.run();
  } catch (const attn::InputError& e) {
    std::fprintf(stderr, "attn-bench: error: %s\n", e.what());
    return attn::kExitInput;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "attn-bench: runtime error: out of host memory (a batch too large for this machine?)\n");
    return attn::kExitRuntime;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attn-bench: runtime error: %s\n", e.what());
    return attn::kExitRuntime;
  }
}
