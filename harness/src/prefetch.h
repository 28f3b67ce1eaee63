#pragma once
// Software prefetch of a byte range, a cache line at a time: the scans and the fingerprint request
// the memory they will read next while they work on what they have (Note [Scans prefetch ahead],
// byte_scan.cpp). Torch-free.

#include <algorithm>
#include <cstddef>

namespace graphcheck {

// Requests the lines of [base + from, base + min(to, size)) for reading.
inline void prefetch_lines(const void* base, std::size_t from, std::size_t to, std::size_t size) {
  const auto* p = static_cast<const char*>(base);
  for (std::size_t q = from; q < std::min(to, size); q += 64) __builtin_prefetch(p + q);
}

}  // namespace graphcheck
