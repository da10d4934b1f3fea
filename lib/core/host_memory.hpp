#pragma once
// How much host memory a step may take, checked before the large allocations (the float64
// reference's K/V spans, the cpu backend's caches), so that a batch too large for this machine
// fails with what it needs and what there is, not with std::bad_alloc halfway through.
#include <cstddef>
#include <string>

namespace attn {

// Bytes of host memory available to a new allocation without swapping (Linux: MemAvailable of
// /proc/meminfo); 0 when unknown. ATTN_HOST_MEMORY_MB overrides it (tests, shared machines).
std::size_t available_host_bytes();

// "12.3 GB", "512.0 MB": sizes in messages.
std::string format_bytes(double bytes);

// Throws RuntimeError "<what> needs <bytes> of host memory; <available> available" when
// `bytes` exceeds what is available (nothing when that is unknown). Returns the available
// bytes it read (0: unknown), for a caller that sizes its work by them.
std::size_t require_host_bytes(double bytes, const std::string& what);

}  // namespace attn
