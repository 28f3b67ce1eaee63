#pragma once
// Software prefetch of a byte range, a cache line at a time: the fingerprint requests the memory
// it will read next while it hashes what it has (fingerprint.cpp, xxh3_wide.cpp). Torch-free.

#include <algorithm>
#include <cstddef>

namespace graphcheck {

// Requests the lines of [base + from, base + min(to, size)) for reading.
inline void prefetch_lines(const void* base, std::size_t from, std::size_t to, std::size_t size) {
  const auto* p = static_cast<const char*>(base);
  for (std::size_t q = from; q < std::min(to, size); q += 64) __builtin_prefetch(p + q);
}

}  // namespace graphcheck
