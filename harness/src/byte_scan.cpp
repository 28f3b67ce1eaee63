#include "byte_scan.h"

#include <algorithm>
#include <cstring>

namespace graphcheck::scan {
namespace {

// Note [Scans read four streams]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// One core reading one sequential stream keeps too few cache lines in flight to reach memcpy's
// speed here: the scan without an expected value read at 0.69x memcpy (256 MiB), and prefetching
// 32 KiB ahead of it reached 0.78-0.88x. glibc's memcpy of a large block copies four pages side
// by side. A count does not depend on the order it reads in, so the scans of kInterleaveFrom
// bytes and more split their range into four parts and read them side by side, 256 bytes to
// 1 KiB of each in turn, with no software prefetch (prefetching each part as well read slower):
// bench/harness_bench, alternated with the prefetching scan in one sitting, 256 MiB and 1 GiB,
// no expected value: 0.72-0.88x memcpy -> 1.15-1.3x; against an expected value, float32 and
// bfloat16: 0.90-0.98x -> 1.1-1.2x.
constexpr std::int64_t kStreams = 4;
constexpr std::int64_t kInterleaveFrom = std::int64_t{1} << 18;

// Calls count(from, to) over [0, n) and sums what it returns: in order below kInterleaveFrom
// bytes, in pieces of chunk_bytes of four parts side by side from there (Note [Scans read four
// streams]).
template <class Count>
std::int64_t count_streams(std::int64_t n, std::int64_t element_size, std::int64_t chunk_bytes, Count&& count) {
  if (n * element_size < kInterleaveFrom) return count(std::int64_t{0}, n);
  const std::int64_t part = n / kStreams;
  const std::int64_t chunk = std::max<std::int64_t>(1, chunk_bytes / element_size);
  std::int64_t total = 0;
  for (std::int64_t off = 0; off < part; off += chunk) {
    const std::int64_t len = std::min(chunk, part - off);
    for (std::int64_t s = 0; s < kStreams; ++s) total += count(s * part + off, s * part + off + len);
  }
  return total + count(kStreams * part, n);
}

template <class U>
U pattern_of(std::uint8_t byte) {
  U p;
  std::memset(&p, byte, sizeof(U));
  return p;
}

// Counts in runs with a counter as wide as the element, so that the compare-and-add loop
// vectorises without widening; a run fits the counter (255 for bytes).
template <class U>
std::int64_t count_typed(const U* a, std::int64_t n, U p) {
  constexpr std::int64_t kRun = sizeof(U) == 1 ? 255 : 1024;
  return count_streams(n, sizeof(U), sizeof(U) == 1 ? 4 * kRun : 256, [&](std::int64_t from, std::int64_t to) {
    std::int64_t total = 0;
    for (std::int64_t run = from; run < to; run += kRun) {
      const std::int64_t end = std::min(to, run + kRun);
      U c = 0;
      for (std::int64_t i = run; i < end; ++i) c += static_cast<U>(a[i] == p);
      total += c;
    }
    return total;
  });
}

// Against an expected value, wide elements: `a` four cache lines at a time, the expected value's
// lines read only where `a` holds the pattern somewhere in them. A refitted tensor rarely does, so
// the scan reads one array, not two (bench/harness_bench BM_PoisonScan: 0.5x memcpy reading both,
// 0.8x and up reading `e` on demand).
template <class U>
std::int64_t count_typed(const U* a, const U* e, std::int64_t n, U p) {
  constexpr std::int64_t kRun = 256 / static_cast<std::int64_t>(sizeof(U));
  return count_streams(n, sizeof(U), 256, [&](std::int64_t from, std::int64_t to) {
    std::int64_t total = 0;
    std::int64_t at = from;
    for (; at + kRun <= to; at += kRun) {
      U hits = 0;
      for (std::int64_t i = at; i < at + kRun; ++i) hits += static_cast<U>(a[i] == p);
      if (hits == 0) continue;
      U c = 0;  // as wide as the element: the loop vectorises without widening
      for (std::int64_t i = at; i < at + kRun; ++i) c += static_cast<U>((a[i] == p) & (e[i] != p));
      total += c;
    }
    for (std::int64_t i = at; i < to; ++i) total += (a[i] == p) & (e[i] != p);
    return total;
  });
}

// Bytes: both arrays, in full. Any byte of a weight holds the pattern with odds of 1 in 256, so
// about one cache line in five has a hit; reading `e` on demand then reads it at scattered lines,
// out of reach of the prefetcher (0.4x memcpy at 256 MiB), where two sequential streams run at
// memcpy's speed and above. Sixty-four byte-wide counters, emptied before they can wrap.
inline std::int64_t count_typed(const std::uint8_t* a, const std::uint8_t* e, std::int64_t n, std::uint8_t p) {
  constexpr std::int64_t kLanes = 64;
  constexpr std::int64_t kBlock = 255 * kLanes;
  return count_streams(n, 1, 1024, [&](std::int64_t from, std::int64_t to) {
    const std::int64_t whole = from + (to - from) / kLanes * kLanes;
    std::int64_t total = 0;
    for (std::int64_t at = from; at < whole; at += kBlock) {
      const std::int64_t end = std::min(whole, at + kBlock);
      std::uint8_t c[kLanes] = {};
      for (std::int64_t i = at; i < end; i += kLanes) {
        for (std::int64_t j = 0; j < kLanes; ++j) c[j] += static_cast<std::uint8_t>((a[i + j] == p) & (e[i + j] != p));
      }
      for (std::int64_t j = 0; j < kLanes; ++j) total += c[j];
    }
    for (std::int64_t i = whole; i < to; ++i) total += (a[i] == p) & (e[i] != p);
    return total;
  });
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
