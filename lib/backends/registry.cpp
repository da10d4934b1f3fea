// The backends of this build, in the selector's preference order: the CUDA backends first
// (compiled only with ATTN_CUDA), the portable cpu backend last so it is the fallback.
#include <algorithm>
#include <cctype>
#include <string>

#include "backends/backend.hpp"
#include "backends/cpu/cpu_backend.hpp"
#if defined(ATTN_WITH_CUDA)
#include "backends/flash_attn/flash_attn_backend.hpp"
#include "backends/flashinfer/flashinfer_backend.hpp"
#include "backends/flashmla/flashmla_backend.hpp"
#endif

namespace attn {

std::vector<std::unique_ptr<Backend>> make_registry() {
  std::vector<std::unique_ptr<Backend>> registry;
#if defined(ATTN_WITH_CUDA)
  registry.push_back(make_flash_attn_backend());
  registry.push_back(make_flashinfer_backend());
  registry.push_back(make_flashmla_backend());  // MLA layers (FLASH_ATTN refuses them)
#endif
  registry.push_back(make_cpu_backend());
  return registry;
}

bool runs_on_device(const Backend& backend) { return !same_backend_name(backend.name(), "cpu"); }

const Backend* select_backend(const std::vector<std::unique_ptr<Backend>>& registry, const AttentionSpec& spec,
                              const Batch& batch, std::string* why) {
  std::string reasons;
  for (const auto& backend : registry) {
    Support s = backend->available();
    if (s) s = backend->supports(spec, batch);
    if (s) {
      if (why) *why = reasons;  // the backends passed over, and why
      return backend.get();
    }
    if (!reasons.empty()) reasons += "; ";
    reasons += backend->name() + ": " + s.reason;
  }
  if (why) *why = registry.empty() ? std::string("no backend is compiled in") : "no backend supports this batch (" + reasons + ")";
  return nullptr;
}

}  // namespace attn
