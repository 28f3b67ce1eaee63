#include "byte_scan.h"

#include "prefetch.h"

#include <algorithm>
#include <cstring>

namespace graphcheck::scan {
namespace {

// Note [Scans prefetch ahead]: one core's own prefetcher keeps too few lines in flight for a
// read-only stream to reach memcpy's speed here (bench/harness_bench, 256 MiB: the scan without
// an expected value read at 0.69x memcpy, the float32 scan against one at 0.70x; prefetching
// 32 KiB ahead, 0.84x and 0.98x). As each 4 KiB block starts, the block 32 KiB past it is
// requested. Not for a scan of two arrays in full (the uint8 one): two prefetched streams read
// slower than two plain ones (BM_ReadTwo, 4.4 against 4.8 GB/s).
constexpr std::int64_t kPrefetchBlock = 4096;
constexpr std::int64_t kPrefetchAhead = 1 << 15;

inline void prefetch_block(const void* base, std::int64_t at_bytes, std::int64_t total_bytes) {
  const auto from = static_cast<std::size_t>(at_bytes + kPrefetchAhead);
  prefetch_lines(base, from, from + kPrefetchBlock, static_cast<std::size_t>(total_bytes));
}

template <class U>
U pattern_of(std::uint8_t byte) {
  U p;
  std::memset(&p, byte, sizeof(U));
  return p;
}

// Counts in blocks with a counter as wide as the element, so that the compare-and-add loop
// vectorises without widening; the block fits the counter (255 for bytes).
template <class U>
std::int64_t count_typed(const U* a, std::int64_t n, U p) {
  // Note [Scans prefetch ahead]; a run of counts fits the counter (255 for bytes).
  constexpr std::int64_t kPer = kPrefetchBlock / static_cast<std::int64_t>(sizeof(U));
  constexpr std::int64_t kRun = sizeof(U) == 1 ? 255 : kPer;
  const std::int64_t bytes = n * static_cast<std::int64_t>(sizeof(U));
  std::int64_t total = 0;
  for (std::int64_t at = 0; at < n; at += kPer) {
    prefetch_block(a, at * static_cast<std::int64_t>(sizeof(U)), bytes);
    const std::int64_t stop = std::min(n, at + kPer);
    for (std::int64_t run = at; run < stop; run += kRun) {
      const std::int64_t end = std::min(stop, run + kRun);
      U c = 0;
      for (std::int64_t i = run; i < end; ++i) c += static_cast<U>(a[i] == p);
      total += c;
    }
  }
  return total;
}

// Against an expected value, wide elements: `a` four cache lines at a time, the expected value's
// lines read only where `a` holds the pattern somewhere in them. A refitted tensor rarely does, so
// the scan reads one array, not two (bench/harness_bench BM_PoisonScan: 0.5x memcpy reading both,
// 0.8x and up reading `e` on demand).
template <class U>
std::int64_t count_typed(const U* a, const U* e, std::int64_t n, U p) {
  constexpr std::int64_t kRun = 256 / static_cast<std::int64_t>(sizeof(U));
  std::int64_t total = 0;
  std::int64_t at = 0;
  constexpr std::int64_t kPer = kPrefetchBlock / static_cast<std::int64_t>(sizeof(U));
  const std::int64_t bytes = n * static_cast<std::int64_t>(sizeof(U));
  for (; at + kRun <= n; at += kRun) {
    if (at % kPer == 0) prefetch_block(a, at * static_cast<std::int64_t>(sizeof(U)), bytes);  // Note [Scans prefetch ahead]
    U hits = 0;
    for (std::int64_t i = at; i < at + kRun; ++i) hits += static_cast<U>(a[i] == p);
    if (hits == 0) continue;
    U c = 0;  // as wide as the element: the loop vectorises without widening
    for (std::int64_t i = at; i < at + kRun; ++i) c += static_cast<U>((a[i] == p) & (e[i] != p));
    total += c;
  }
  for (std::int64_t i = at; i < n; ++i) total += (a[i] == p) & (e[i] != p);
  return total;
}

// Bytes: both arrays, in full. Any byte of a weight holds the pattern with odds of 1 in 256, so
// about one cache line in five has a hit; reading `e` on demand then reads it at scattered lines,
// out of reach of the prefetcher (0.4x memcpy at 256 MiB), where two sequential streams run at
// memcpy's speed and above. Sixty-four byte-wide counters, emptied before they can wrap.
inline std::int64_t count_typed(const std::uint8_t* a, const std::uint8_t* e, std::int64_t n, std::uint8_t p) {
  constexpr std::int64_t kLanes = 64;
  constexpr std::int64_t kBlock = 255 * kLanes;
  const std::int64_t whole = n / kLanes * kLanes;
  std::int64_t total = 0;
  for (std::int64_t at = 0; at < whole; at += kBlock) {
    const std::int64_t end = std::min(whole, at + kBlock);
    std::uint8_t c[kLanes] = {};
    for (std::int64_t i = at; i < end; i += kLanes) {
      for (std::int64_t j = 0; j < kLanes; ++j) c[j] += static_cast<std::uint8_t>((a[i + j] == p) & (e[i + j] != p));
    }
    for (std::int64_t j = 0; j < kLanes; ++j) total += c[j];
  }
  for (std::int64_t i = whole; i < n; ++i) total += (a[i] == p) & (e[i] != p);
  return total;
}

template <class U>
std::int64_t first_typed(const U* a, const U* e, std::int64_t n, U p) {
  for (std::int64_t i = 0; i < n; ++i) {
    if (a[i] == p && (e == nullptr || e[i] != p)) return i;
  }
  return -1;
}

template <class U>
void mask_typed(const U* a, const U* e, std::int64_t n, U p, bool* out) {
  if (e != nullptr) {
    for (std::int64_t i = 0; i < n; ++i) out[i] = (a[i] == p) & (e[i] != p);
  } else {
    for (std::int64_t i = 0; i < n; ++i) out[i] = a[i] == p;
  }
}

// Elements of another width (complex, 16 bytes): byte by byte.
bool all_bytes(const std::uint8_t* p, std::size_t bytes, std::uint8_t byte) {
  for (std::size_t i = 0; i < bytes; ++i) {
    if (p[i] != byte) return false;
  }
  return true;
}

bool generic_match(const std::uint8_t* a, const std::uint8_t* e, std::int64_t i, std::size_t size,
                   std::uint8_t byte) {
  const std::size_t at = static_cast<std::size_t>(i) * size;
  return all_bytes(a + at, size, byte) && (e == nullptr || !all_bytes(e + at, size, byte));
}

template <class F>
auto dispatch(std::size_t element_size, F&& f) {
  switch (element_size) {
    case 1: return f(std::uint8_t{});
    case 2: return f(std::uint16_t{});
    case 4: return f(std::uint32_t{});
    case 8: return f(std::uint64_t{});
    default: return f(nullptr);
  }
}

}  // namespace

std::int64_t count_pattern(const void* data, const void* expected, std::int64_t n, std::size_t element_size,
                           std::uint8_t byte, std::int64_t* first) {
  if (first != nullptr) *first = -1;
  if (n <= 0) return 0;
  return dispatch(element_size, [&](auto tag) -> std::int64_t {
    using U = decltype(tag);
    if constexpr (std::is_same_v<U, std::nullptr_t>) {
      const auto* a = static_cast<const std::uint8_t*>(data);
      const auto* e = static_cast<const std::uint8_t*>(expected);
      std::int64_t count = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        if (!generic_match(a, e, i, element_size, byte)) continue;
        if (count++ == 0 && first != nullptr) *first = i;
      }
      return count;
    } else {
      const U* a = static_cast<const U*>(data);
      const U* e = static_cast<const U*>(expected);
      const U p = pattern_of<U>(byte);
      const std::int64_t count = e != nullptr ? count_typed(a, e, n, p) : count_typed(a, n, p);
      if (count > 0 && first != nullptr) *first = first_typed(a, e, n, p);
      return count;
    }
  });
}

void mask_pattern(const void* data, const void* expected, std::int64_t n, std::size_t element_size,
                  std::uint8_t byte, bool* out) {
  if (n <= 0) return;
  dispatch(element_size, [&](auto tag) {
    using U = decltype(tag);
    if constexpr (std::is_same_v<U, std::nullptr_t>) {
      const auto* a = static_cast<const std::uint8_t*>(data);
      const auto* e = static_cast<const std::uint8_t*>(expected);
      for (std::int64_t i = 0; i < n; ++i) out[i] = generic_match(a, e, i, element_size, byte);
    } else {
      mask_typed(static_cast<const U*>(data), static_cast<const U*>(expected), n, pattern_of<U>(byte), out);
    }
    return 0;
  });
}

}  // namespace graphcheck::scan
