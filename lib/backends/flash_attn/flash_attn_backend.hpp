#pragma once
// FLASH_ATTN: paged varlen attention (prefills and decodes in one launch), split-KV for
// decode-heavy batches with few CTAs, and cascade attention over a shared prefix.
#include <memory>

#include "backends/backend.hpp"

namespace attn {

std::unique_ptr<Backend> make_flash_attn_backend();

}  // namespace attn
