#include "byte_scan.h"

#include <algorithm>
#include <cstring>
#if defined(__SSE2__) && defined(__x86_64__)
#include <immintrin.h>
#endif

#include "four_streams.h"

namespace graphcheck::scan {
namespace {

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
  return streams::over_four_streams(n, sizeof(U), sizeof(U) == 1 ? 4 * kRun : 256, [&](std::int64_t from, std::int64_t to) {
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
  return streams::over_four_streams(n, sizeof(U), 256, [&](std::int64_t from, std::int64_t to) {
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

#if defined(__SSE2__) && defined(__x86_64__)
// count_typed's (bytes against an expected value) lines of 64 bytes in [from, whole), with
// byte-wide counters in registers (-1 per match, from the compares' masks) summed by psadbw before
// they can wrap. The compiler's loop over an array of 64 counters ran at 7.6-7.9 GB/s (64 MiB) and
// 4.9 GB/s (256 MiB); these (AVX2 where the CPU has it) at 11.2 and 6.4-6.5 GB/s, what reading
// both arrays alone takes (BM_ReadTwo: 10.4-11.2 and 6.4-6.6 GB/s; memcpy 12.4-13.2 and 10.2-10.5).
constexpr std::int64_t kByteLine = 64;
constexpr std::int64_t kByteBlock = 255 * kByteLine;  // lines before a byte counter can wrap

std::int64_t count_byte_lines_sse2(const std::uint8_t* a, const std::uint8_t* e, std::int64_t from,
                                   std::int64_t whole, std::uint8_t p) {
  const __m128i pat = _mm_set1_epi8(static_cast<char>(p));
  const __m128i z = _mm_setzero_si128();
  std::int64_t total = 0;
  for (std::int64_t at = from; at < whole; at += kByteBlock) {
    const std::int64_t end = std::min(whole, at + kByteBlock);
    __m128i c[4] = {z, z, z, z};
    for (std::int64_t i = at; i < end; i += kByteLine) {
      for (int k = 0; k < 4; ++k) {
        const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i + 16 * k));
        const __m128i y = _mm_loadu_si128(reinterpret_cast<const __m128i*>(e + i + 16 * k));
        c[k] = _mm_sub_epi8(c[k], _mm_andnot_si128(_mm_cmpeq_epi8(y, pat), _mm_cmpeq_epi8(x, pat)));
      }
    }
    const __m128i s = _mm_add_epi64(_mm_add_epi64(_mm_sad_epu8(c[0], z), _mm_sad_epu8(c[1], z)),
                                    _mm_add_epi64(_mm_sad_epu8(c[2], z), _mm_sad_epu8(c[3], z)));
    total += _mm_cvtsi128_si64(s) + _mm_cvtsi128_si64(_mm_unpackhi_epi64(s, s));
  }
  return total;
}

#if defined(__x86_64__) && defined(__GNUC__)
[[gnu::target("avx2")]] std::int64_t count_byte_lines_avx2(const std::uint8_t* a, const std::uint8_t* e,
                                                          std::int64_t from, std::int64_t whole, std::uint8_t p) {
  const __m256i pat = _mm256_set1_epi8(static_cast<char>(p));
  const __m256i z = _mm256_setzero_si256();
  std::int64_t total = 0;
  for (std::int64_t at = from; at < whole; at += kByteBlock) {
    const std::int64_t end = std::min(whole, at + kByteBlock);
    __m256i c0 = z, c1 = z;
    for (std::int64_t i = at; i < end; i += kByteLine) {
      const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i));
      const __m256i y0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(e + i));
      const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i + 32));
      const __m256i y1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(e + i + 32));
      c0 = _mm256_sub_epi8(c0, _mm256_andnot_si256(_mm256_cmpeq_epi8(y0, pat), _mm256_cmpeq_epi8(x0, pat)));
      c1 = _mm256_sub_epi8(c1, _mm256_andnot_si256(_mm256_cmpeq_epi8(y1, pat), _mm256_cmpeq_epi8(x1, pat)));
    }
    const __m256i s = _mm256_add_epi64(_mm256_sad_epu8(c0, z), _mm256_sad_epu8(c1, z));
    alignas(32) std::int64_t lanes[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), s);
    total += lanes[0] + lanes[1] + lanes[2] + lanes[3];
  }
  return total;
}
#endif
#endif

// Bytes: both arrays, in full. Any byte of a weight holds the pattern with odds of 1 in 256, so
// about one cache line in five has a hit; reading `e` on demand then reads it at scattered lines,
// out of reach of the prefetcher (0.4x memcpy at 256 MiB), where two sequential streams run at
// memcpy's speed and above. Lines of 64 bytes by count_byte_lines_* on x86-64; elsewhere
// sixty-four byte-wide counters, emptied before they can wrap.
inline std::int64_t count_typed(const std::uint8_t* a, const std::uint8_t* e, std::int64_t n, std::uint8_t p,
                                bool wide = true) {
  constexpr std::int64_t kLanes = 64;
  (void)wide;  // where there is no AVX2 loop to pick
#if defined(__SSE2__) && defined(__x86_64__)
  auto lines = count_byte_lines_sse2;
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2 && wide) lines = count_byte_lines_avx2;
#endif
#else
  auto lines = [](const std::uint8_t* a, const std::uint8_t* e, std::int64_t from, std::int64_t whole,
                  std::uint8_t p) {
    constexpr std::int64_t kBlock = 255 * kLanes;
    std::int64_t total = 0;
    for (std::int64_t at = from; at < whole; at += kBlock) {
      const std::int64_t end = std::min(whole, at + kBlock);
      std::uint8_t c[kLanes] = {};
      for (std::int64_t i = at; i < end; i += kLanes) {
        for (std::int64_t j = 0; j < kLanes; ++j) c[j] += static_cast<std::uint8_t>((a[i + j] == p) & (e[i + j] != p));
      }
      for (std::int64_t j = 0; j < kLanes; ++j) total += c[j];
    }
    return total;
  };
#endif
  return streams::over_four_streams(n, 1, 1024, [&](std::int64_t from, std::int64_t to) {
    const std::int64_t whole = from + (to - from) / kLanes * kLanes;
    std::int64_t total = lines(a, e, from, whole, p);
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

namespace detail {
std::int64_t count_bytes(const std::uint8_t* data, const std::uint8_t* expected, std::int64_t n, std::uint8_t byte,
                         bool wide) {
  return n > 0 ? count_typed(data, expected, n, byte, wide) : 0;
}
}  // namespace detail

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
