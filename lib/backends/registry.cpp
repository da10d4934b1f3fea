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

const std::vector<std::string>& all_backend_names() {
  static const std::vector<std::string> names = {"flash_attn", "flashinfer", "flashmla", "cpu"};
  return names;
}

bool same_backend_name(std::string_view a, std::string_view b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](char x, char y) {
    return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
  });
}

std::optional<std::string> canonical_backend_name(std::string_view name) {
  for (const std::string& b : all_backend_names())
    if (same_backend_name(b, name)) return b;
  return std::nullopt;
}

bool runs_on_device(const Backend& backend) { return !same_backend_name(backend.name(), "cpu"); }

const Backend* select_backend(const std::vector<std::unique_ptr<Backend>>& registry, const AttentionSpec& spec,
                              const Batch& batch, std::string* why) {
  std::string reasons;
  for (const auto& backend : registry) {
    Support s = backend->available();
    if (s) s = backend->supports(spec, batch);
    if (s) return backend.get();
    if (!reasons.empty()) reasons += "; ";
    reasons += backend->name() + ": " + s.reason;
  }
  if (why) *why = registry.empty() ? std::string("no backend is compiled in") : "no backend supports this batch (" + reasons + ")";
  return nullptr;
}

}  // namespace attn
