#pragma once
// The names of attn-bench's backends, as scenarios, sweeps and --backend spell them. Plain strings,
// so that a scenario's [run] backends is checked where the file loads, whatever this build compiled.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace attn {

// Every backend attn-bench has, compiled into this build or not (a CPU-only build lacks the CUDA
// ones), in the selector's order: a sweep or scenario for a GPU still loads on a CPU machine.
const std::vector<std::string>& all_backend_names();
// Backend names match case-insensitively, so vLLM's spelling (FLASH_ATTN) names flash_attn.
bool same_backend_name(std::string_view a, std::string_view b);
// A name of all_backend_names as the results spell it; nullopt when no backend has that name
// ("auto" and "all" are not names).
std::optional<std::string> canonical_backend_name(std::string_view name);
// An entry of a backend list (--backend, [run] backends, a sweep's backend axis): "auto", "all",
// or a backend name in the spelling the results use; nullopt for anything else.
std::optional<std::string> backend_choice(std::string_view entry);
// "flash_attn, flashinfer, flashmla, cpu, auto, all": what a backend list may hold, for messages.
std::string backend_choices();

}  // namespace attn
