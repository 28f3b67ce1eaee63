// XXH3-64 of a column-major matrix, read in storage order (Note [Column-major fingerprints]).
// Torch-free.

#include "xxh3_columns.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <memory>
#include <span>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace graphcheck::detail {
namespace {

// Note [Column-major fingerprints]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A transposed weight's rows run down its storage's columns. Gathering them in row order reads a
// cache line or a few of every storage row (every 4 KiB page) per pass, and ran at 0.11-0.30x
// memcpy however the gather was blocked (bench/harness_bench BM_FingerprintTransposed).
//
// XXH3 over a long input lets the storage be read in its own order. Its state is eight 64-bit
// lanes. Each 1 KiB block of the input adds one pair of terms per 8-byte word w to them: for w at
// lane l of stripe s of the block, acc[l ^ 1] += w and acc[l] += lo32(x) * hi32(x), with
// x = w ^ key(s + l) (key: the default secret's 8 bytes at 8 * (s + l)). Only then does the block
// scramble the lanes. The terms of one block are summed, so their order does not matter; the
// blocks must come in order, and each block's sum can be formed apart from the lanes it is added
// to.
//
// When a row of the matrix is a whole number of blocks, the word at place q of block k of row r
// comes from the same 8 / width storage rows for every r, and takes the same key. So the sweep
// reads those storage rows, in storage order, and adds each word's terms into the sums of block
// k of every row at once (a vector loop over r). Then the rows' block sums run through the lanes
// in row order, each followed by the scramble, as XXH3 itself runs them.
//
// XXH3 runs the input's last block as a partial one: 15 stripes with their keys, then the input's
// last 64 bytes with another key (the secret from byte 121) and no scramble. So the last block
// is summed like the others and its last stripe's terms are swapped for those. The sums take 64
// bytes per block (1/16 of the input); rows are swept in strips that keep them under
// kSumBudget (the gather this replaced kept a buffer of up to 32 MiB). At 64 MiB to 1 GiB it runs
// at 0.6-0.8x memcpy, against 0.11-0.30x for the gather. Rows that are whole 64-byte stripes but
// not whole blocks: Note [Rows of whole stripes]. The digest is XXH3's (Fingerprint tests:
// against XXH3_64bits of the row-major copy, for every width and many shapes).

constexpr std::int64_t kSecretSize = XXH_SECRET_DEFAULT_SIZE;
constexpr std::int64_t kStripeBytes = XXH_STRIPE_LEN;
constexpr std::int64_t kStripesPerBlock = (kSecretSize - kStripeBytes) / XXH_SECRET_CONSUME_RATE;
constexpr std::int64_t kBlockBytes = kStripeBytes * kStripesPerBlock;  // 1 KiB
constexpr std::int64_t kLanes = XXH_ACC_NB;
static_assert(kBlockBytes == 1024 && kSecretSize == 192 && kLanes == 8);

// The block sums of one strip of rows stay under this many bytes (a 1 GiB matrix of 1,024 rows in
// one strip: a strip of fewer rows reads part of each storage row, and ran at 0.43 against 0.5x
// memcpy with 32 MiB); a strip is at most kMaxStrip rows, so that the sums of the blocks being
// swept (8 lanes of each row) stay in L2.
constexpr std::int64_t kSumBudget = std::int64_t{64} << 20;
constexpr std::int64_t kMaxStrip = 2048;
// Blocks whose sums are moved into row order together (a transpose in tiles: a run of
// kTile * 64 bytes per row, not a cache line on a page of its own per row per block).
constexpr std::int64_t kTile = 16;
// Rows of 4- and 8-byte elements shorter than this many stripes are gathered (Note [Rows of
// whole stripes]): the gather reads a cache line of each storage row a time, and ran faster than
// the sweep on rows of up to 4 stripes of float32 and 6 of float64 (128 MiB, 8.5 against 7.6 and
// 8.8 against 7.1 GB/s); the sweep of 1- and 2-byte elements ran faster at every length
// (bfloat16 rows of 3 stripes: 7.2 against 3.9 GB/s; uint8 rows of one: 3.0 against 1.5).
constexpr std::int64_t kMinWideStripes = 8;

#if defined(__SSE2__)
// Words of 1- and 2-byte elements are built from their storage rows by interleaving (unpack), 16
// bytes of each row at a time: the compiler's own loop for them widened every element to 64 bits
// first, and ran the 1-byte sweep at 2.6 GB/s and the 2-byte one at 6.3 (float32 8.2-8.8; 256
// MiB matrices of 1,024 columns seen transposed); interleaved, 4.7-5.4 and 6.7-7.3 GB/s.
// words[v] holds the words of elements i + 2v and i + 2v + 1 of the 8 / sizeof(U) rows in `rows`.
template <class U>
[[gnu::always_inline]] inline void interleave_words(const U* const* rows, std::int64_t i, __m128i* words) {
  auto load = [&](int m) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[m] + i)); };
  if constexpr (sizeof(U) == 1) {
    const __m128i a0 = load(0), a1 = load(1), a2 = load(2), a3 = load(3);
    const __m128i a4 = load(4), a5 = load(5), a6 = load(6), a7 = load(7);
    const __m128i t01l = _mm_unpacklo_epi8(a0, a1), t01h = _mm_unpackhi_epi8(a0, a1);
    const __m128i t23l = _mm_unpacklo_epi8(a2, a3), t23h = _mm_unpackhi_epi8(a2, a3);
    const __m128i t45l = _mm_unpacklo_epi8(a4, a5), t45h = _mm_unpackhi_epi8(a4, a5);
    const __m128i t67l = _mm_unpacklo_epi8(a6, a7), t67h = _mm_unpackhi_epi8(a6, a7);
    const __m128i q[4] = {_mm_unpacklo_epi16(t01l, t23l), _mm_unpackhi_epi16(t01l, t23l),
                          _mm_unpacklo_epi16(t01h, t23h), _mm_unpackhi_epi16(t01h, t23h)};
    const __m128i r[4] = {_mm_unpacklo_epi16(t45l, t67l), _mm_unpackhi_epi16(t45l, t67l),
                          _mm_unpacklo_epi16(t45h, t67h), _mm_unpackhi_epi16(t45h, t67h)};
    for (int v = 0; v < 4; ++v) {
      words[2 * v] = _mm_unpacklo_epi32(q[v], r[v]);
      words[2 * v + 1] = _mm_unpackhi_epi32(q[v], r[v]);
    }
  } else if constexpr (sizeof(U) == 4) {
    const __m128i a0 = load(0), a1 = load(1);
    words[0] = _mm_unpacklo_epi32(a0, a1);
    words[1] = _mm_unpackhi_epi32(a0, a1);
  } else if constexpr (sizeof(U) == 8) {
    words[0] = load(0);
  } else {
    const __m128i a0 = load(0), a1 = load(1), a2 = load(2), a3 = load(3);
    const __m128i t01l = _mm_unpacklo_epi16(a0, a1), t01h = _mm_unpackhi_epi16(a0, a1);
    const __m128i t23l = _mm_unpacklo_epi16(a2, a3), t23h = _mm_unpackhi_epi16(a2, a3);
    words[0] = _mm_unpacklo_epi32(t01l, t23l);
    words[1] = _mm_unpackhi_epi32(t01l, t23l);
    words[2] = _mm_unpacklo_epi32(t01h, t23h);
    words[3] = _mm_unpackhi_epi32(t01h, t23h);
  }
}

// The pair loop of add_stripe_impl for 1- and 2-byte elements, 16 bytes of each row at a time;
// returns how many of the n elements it took (the caller adds the rest one at a time).
template <class U>
[[gnu::always_inline]] inline std::int64_t add_pair_interleaved(const U* const* rows, std::int64_t n,
                                                                std::uint64_t key0, std::uint64_t key1,
                                                                std::uint64_t* even, std::uint64_t* odd) {
  constexpr int kParts = 8 / static_cast<int>(sizeof(U));
  constexpr std::int64_t kStep = 16 / static_cast<std::int64_t>(sizeof(U));
  const __m128i k0 = _mm_set1_epi64x(static_cast<long long>(key0));
  const __m128i k1 = _mm_set1_epi64x(static_cast<long long>(key1));
  auto product = [](__m128i w, __m128i k) {
    const __m128i x = _mm_xor_si128(w, k);
    return _mm_mul_epu32(x, _mm_srli_epi64(x, 32));
  };
  std::int64_t i = 0;
  for (; i + kStep <= n; i += kStep) {
    __m128i w0[kStep / 2], w1[kStep / 2];
    interleave_words<U>(rows, i, w0);
    interleave_words<U>(rows + kParts, i, w1);
    for (std::int64_t v = 0; v < kStep / 2; ++v) {
      auto* e = reinterpret_cast<__m128i*>(even + i + 2 * v);
      auto* o = reinterpret_cast<__m128i*>(odd + i + 2 * v);
      _mm_storeu_si128(e, _mm_add_epi64(_mm_loadu_si128(e), _mm_add_epi64(w1[v], product(w0[v], k0))));
      _mm_storeu_si128(o, _mm_add_epi64(_mm_loadu_si128(o), _mm_add_epi64(w0[v], product(w1[v], k1))));
    }
  }
  return i;
}

// add_pair_interleaved for rows whose keys and blocks vary (Note [Rows of whole stripes]): row
// i's words take key0[i % 16] and key1[i % 16], and go to the `hi` sums where mask[i % 16] is
// set, to the `lo` sums where it is clear. Returns how many of the n rows it took, a multiple of
// its step (the caller adds the rest one at a time).
template <class U>
[[gnu::always_inline]] inline std::int64_t add_pair_interleaved_shifted(
    const U* const* rows, std::int64_t n, const std::uint64_t* key0, const std::uint64_t* key1,
    const std::uint64_t* mask, std::uint64_t* even_lo, std::uint64_t* odd_lo, std::uint64_t* even_hi,
    std::uint64_t* odd_hi) {
  constexpr int kParts = 8 / static_cast<int>(sizeof(U));
  constexpr std::int64_t kStep = 16 / static_cast<std::int64_t>(sizeof(U));
  auto product = [](__m128i w, __m128i k) {
    const __m128i x = _mm_xor_si128(w, k);
    return _mm_mul_epu32(x, _mm_srli_epi64(x, 32));
  };
  auto at = [](const std::uint64_t* p, std::int64_t i) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i)); };
  auto add_to = [&](std::uint64_t* p, std::int64_t i, __m128i v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p + i), _mm_add_epi64(at(p, i), v));
  };
  std::int64_t i = 0;
  for (; i + kStep <= n; i += kStep) {
    __m128i w0[kStep / 2], w1[kStep / 2];
    interleave_words<U>(rows, i, w0);
    interleave_words<U>(rows + kParts, i, w1);
    for (std::int64_t v = 0; v < kStep / 2; ++v) {
      const std::int64_t u = (i + 2 * v) & 15;
      const __m128i m = at(mask, u);
      const __m128i e = _mm_add_epi64(w1[v], product(w0[v], at(key0, u)));
      const __m128i o = _mm_add_epi64(w0[v], product(w1[v], at(key1, u)));
      add_to(even_lo, i + 2 * v, _mm_andnot_si128(m, e));
      add_to(even_hi, i + 2 * v, _mm_and_si128(m, e));
      add_to(odd_lo, i + 2 * v, _mm_andnot_si128(m, o));
      add_to(odd_hi, i + 2 * v, _mm_and_si128(m, o));
    }
  }
  return i;
}
#endif

// Adds the terms of one stripe's eight words for each of n rows to the sums of their block:
// word l of row i has its bytes from part[l * kParts][i] (lowest) to part[l * kParts + kParts -
// 1][i], each part a storage row, and takes keys[l]. The lanes are summed in
// pairs (lane l takes its own word's product and its partner's word, l ^ 1), so that each lane's
// band[lane * n + i] is read and written once a stripe, not once a word (0.6 -> 0.7-0.8x memcpy).
template <class U>
[[gnu::always_inline]] inline void add_stripe_impl(const void* const* part, std::int64_t n, const std::uint64_t* keys,
                                                   std::uint64_t* __restrict band) {
  constexpr int kParts = 8 / static_cast<int>(sizeof(U));
  const U* p[kLanes * kParts];
  std::uint64_t key[kLanes];
  for (int m = 0; m < kLanes * kParts; ++m) p[m] = static_cast<const U*>(part[m]);
  for (int l = 0; l < kLanes; ++l) key[l] = keys[l];
  auto word = [&](int l, std::int64_t i) {
    std::uint64_t w = 0;
    for (int m = 0; m < kParts; ++m) w |= static_cast<std::uint64_t>(p[l * kParts + m][i]) << (8 * sizeof(U) * m);
    return w;
  };
  auto product = [&](std::uint64_t w, int l) {
    const std::uint64_t x = w ^ key[l];
    return (x & 0xFFFFFFFFu) * (x >> 32);
  };
  // Lanes in pairs: lane l takes its own word's product and its partner's (l ^ 1) word.
  for (int l = 0; l < kLanes; l += 2) {
    std::uint64_t* __restrict even = band + l * n;
    std::uint64_t* __restrict odd = band + (l + 1) * n;
    std::int64_t i = 0;
#if defined(__SSE2__)
    if constexpr (sizeof(U) <= 2) i = add_pair_interleaved<U>(p + l * kParts, n, key[l], key[l + 1], even, odd);
#endif
    for (; i < n; ++i) {
      const std::uint64_t w0 = word(l, i), w1 = word(l + 1, i);
      even[i] += w1 + product(w0, l);
      odd[i] += w0 + product(w1, l + 1);
    }
  }
}

using AddStripe = void (*)(const void* const*, std::int64_t, const std::uint64_t*, std::uint64_t*);

template <class U>
void add_stripe(const void* const* part, std::int64_t n, const std::uint64_t* keys, std::uint64_t* band) {
  add_stripe_impl<U>(part, n, keys, band);
}

#if defined(__x86_64__) && defined(__GNUC__)
// The same loop built for AVX2 (four rows a vector, vpmuludq for the products), run where the CPU
// has it.
template <class U>
[[gnu::target("avx2")]] void add_stripe_avx2(const void* const* part, std::int64_t n, const std::uint64_t* keys,
                                             std::uint64_t* band) {
  add_stripe_impl<U>(part, n, keys, band);
}
#endif

template <class U>
AddStripe pick_add_stripe(bool wide) {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (wide && avx2) return add_stripe_avx2<U>;
#endif
  (void)wide;
  return add_stripe<U>;
}

// add_stripe_impl for rows whose keys and blocks vary with the row (Note [Rows of whole
// stripes]): word l of row i takes keys[l * 16 + i % 16], and its terms go to the sums of the
// block in `hi` where mask[i % 16] is set, in `lo` where it is clear (lane-major, as `band`).
// One build: its interleaved SSE2 loop takes every row but the last few of each call, so an AVX2
// build of it would change only those.
template <class U>
void add_shifted(const void* const* part, std::int64_t n, const std::uint64_t* keys, const std::uint64_t* mask,
                 std::uint64_t* __restrict lo, std::uint64_t* __restrict hi) {
  constexpr int kParts = 8 / static_cast<int>(sizeof(U));
  const U* p[kLanes * kParts];
  for (int m = 0; m < kLanes * kParts; ++m) p[m] = static_cast<const U*>(part[m]);
  auto word = [&](int l, std::int64_t i) {
    std::uint64_t w = 0;
    for (int m = 0; m < kParts; ++m) w |= static_cast<std::uint64_t>(p[l * kParts + m][i]) << (8 * sizeof(U) * m);
    return w;
  };
  auto product = [](std::uint64_t w, std::uint64_t key) {
    const std::uint64_t x = w ^ key;
    return (x & 0xFFFFFFFFu) * (x >> 32);
  };
  for (int l = 0; l < kLanes; l += 2) {
    std::uint64_t* __restrict even_lo = lo + l * n;
    std::uint64_t* __restrict odd_lo = lo + (l + 1) * n;
    std::uint64_t* __restrict even_hi = hi + l * n;
    std::uint64_t* __restrict odd_hi = hi + (l + 1) * n;
    const std::uint64_t* k0 = keys + l * 16;
    const std::uint64_t* k1 = keys + (l + 1) * 16;
    auto one = [&](std::int64_t i, std::int64_t u) {
      const std::uint64_t w0 = word(l, i), w1 = word(l + 1, i);
      const std::uint64_t e = w1 + product(w0, k0[u]), o = w0 + product(w1, k1[u]);
      even_lo[i] += e & ~mask[u];
      even_hi[i] += e & mask[u];
      odd_lo[i] += o & ~mask[u];
      odd_hi[i] += o & mask[u];
    };
    std::int64_t i = 0;
#if defined(__SSE2__)
    i = add_pair_interleaved_shifted<U>(p + l * kParts, n, k0, k1, mask, even_lo, odd_lo, even_hi, odd_hi);
#endif
    for (; i < n && (i & 15) != 0; ++i) one(i, i & 15);
    for (; i + 16 <= n; i += 16) {
      for (std::int64_t u = 0; u < 16; ++u) one(i + u, u);
    }
    for (; i < n; ++i) one(i, i & 15);
  }
}

// The digest from the lanes of a sweep that summed every stripe with its place's key, the
// input's last (the last 64 bytes of the last row, at `place` in its block) included: XXH3 runs
// that one with another key (the secret from byte 121), so its terms are swapped for those.
template <class U>
std::uint64_t finish(xxh_u64* acc, const U* base, std::int64_t rows, std::int64_t cols, std::int64_t col_stride,
                     std::int64_t place, std::uint64_t len) {
  const xxh_u8* const secret = XXH3_kSecret;
  constexpr std::int64_t kStripeElements = kStripeBytes / static_cast<std::int64_t>(sizeof(U));
  U last[kStripeElements];
  for (std::int64_t j = 0; j < kStripeElements; ++j) last[j] = base[(rows - 1) + (cols - kStripeElements + j) * col_stride];
  XXH_ALIGN(XXH_ACC_ALIGN) xxh_u64 as_summed[kLanes] = {}, as_last[kLanes] = {};
  XXH3_accumulate_512_scalar(as_summed, last, secret + XXH_SECRET_CONSUME_RATE * place);
  XXH3_accumulate_512_scalar(as_last, last, secret + kSecretSize - kStripeBytes - XXH_SECRET_LASTACC_START);
  for (std::int64_t l = 0; l < kLanes; ++l) acc[l] += as_last[l] - as_summed[l];
  return XXH3_mergeAccs(acc, secret + XXH_SECRET_MERGEACCS_START, len * XXH_PRIME64_1);
}

template <class U>
std::uint64_t hash_columns(const U* base, std::span<const std::int64_t> matrices, std::int64_t rows, std::int64_t cols,
                           std::int64_t col_stride, bool wide) {
  constexpr std::int64_t kParts = 8 / static_cast<std::int64_t>(sizeof(U));
  constexpr std::int64_t kStorageRowsPerBlock = kBlockBytes / static_cast<std::int64_t>(sizeof(U));
  const AddStripe add = pick_add_stripe<U>(wide);
  const std::int64_t blocks_per_row = cols * static_cast<std::int64_t>(sizeof(U)) / kBlockBytes;
  const std::int64_t strip = std::min({rows, kMaxStrip, std::max<std::int64_t>(1, kSumBudget / (blocks_per_row * 64))});
  // The sums of the last kTile blocks swept, lane-major for the sweep's vector loop, moved into
  // `sums` (row-major, for the chain) a tile at a time: kTile records of each row in a run.
  // Neither is zeroed here: every record is written before it is read, and a vector's zeroing
  // was a pass of its own over up to kSumBudget bytes.
  const auto bands = std::make_unique_for_overwrite<std::uint64_t[]>(static_cast<std::size_t>(kTile * kLanes * strip));
  const auto sums =
      std::make_unique_for_overwrite<std::uint64_t[]>(static_cast<std::size_t>(kLanes * strip * blocks_per_row));
  const xxh_u8* const secret = XXH3_kSecret;
  XXH_ALIGN(XXH_ACC_ALIGN) xxh_u64 acc[kLanes] = XXH3_INIT_ACC;
  const auto count = static_cast<std::int64_t>(matrices.size());
  const std::int64_t last_block = count * rows * blocks_per_row - 1;

  for (std::int64_t b = 0; b < count; ++b) {
    const U* const matrix = base + matrices[b];
    for (std::int64_t r0 = 0; r0 < rows; r0 += strip) {
      const std::int64_t n = std::min(strip, rows - r0);
      for (std::int64_t k0 = 0; k0 < blocks_per_row; k0 += kTile) {
        const std::int64_t tile = std::min(kTile, blocks_per_row - k0);
        for (std::int64_t t = 0; t < tile; ++t) {
          const std::int64_t k = k0 + t;
          std::uint64_t* band = bands.get() + t * kLanes * n;
          std::fill_n(band, kLanes * n, std::uint64_t{0});
          for (std::int64_t stripe = 0; stripe < kStripesPerBlock; ++stripe) {
            const void* part[kLanes * kParts];
            std::uint64_t keys[kLanes];
            for (std::int64_t l = 0; l < kLanes; ++l) {
              const std::int64_t q = stripe * kLanes + l;
              for (std::int64_t m = 0; m < kParts; ++m) {
                part[l * kParts + m] = matrix + (k * kStorageRowsPerBlock + q * kParts + m) * col_stride + r0;
              }
              keys[l] = XXH_readLE64(secret + XXH_SECRET_CONSUME_RATE * (stripe + l));
            }
            add(part, n, keys, band);
          }
        }
        for (std::int64_t i = 0; i < n; ++i) {
          std::uint64_t* to = sums.get() + (i * blocks_per_row + k0) * kLanes;
          for (std::int64_t t = 0; t < tile; ++t) {
            for (std::int64_t l = 0; l < kLanes; ++l) to[t * kLanes + l] = bands[(t * kLanes + l) * n + i];
          }
        }
      }
      for (std::int64_t i = 0; i < n; ++i) {
        for (std::int64_t k = 0; k < blocks_per_row; ++k) {
          const std::uint64_t* s = sums.get() + (i * blocks_per_row + k) * kLanes;
          for (std::int64_t l = 0; l < kLanes; ++l) acc[l] += s[l];
          if ((b * rows + r0 + i) * blocks_per_row + k != last_block) {
            XXH3_scrambleAcc_scalar(acc, secret + kSecretSize - kStripeBytes);
          }
        }
      }
    }
  }

  const auto len = static_cast<std::uint64_t>(count * rows * cols) * sizeof(U);
  return finish(acc, base + matrices.back(), rows, cols, col_stride, kStripesPerBlock - 1, len);
}


// Note [Rows of whole stripes]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A row of S stripes (64 bytes each) that is not a whole number of blocks (S % 16 != 0: a
// bfloat16 weight of 11,008 columns, 344 stripes) starts at place o(r) = r * S % 16 of a block,
// so its stripe j takes the key of place (o(r) + j) % 16 and goes to the block that starts
// (o(r) + j) / 16 blocks after the row's first one: both vary with the row, with a period that
// divides 16. The sweep of Note [Column-major fingerprints] still reads the storage in order and
// sums every row at once: strips start at multiples of 16 rows, so row i of a strip takes its
// keys from a table of 16 (by i % 16), and each row keeps one set of sums per block it touches
// (its "slots", one more than its whole blocks). Stripe j of a row goes to slot j / 16 or to the
// next one, chosen by a mask (same table), so the vector loop adds each term to two sums, one of
// them with a zero. A block that a row ends in the middle is completed by the next row's first
// slot; the chain adds each row's slots in order and scrambles where a block ends. The words of
// every width are built by interleaving (SSE2): float32 words built element by element ran at 6
// GB/s, interleaved at 10. bench/harness_bench BM_FingerprintTransposedStripes, bfloat16 rows of
// 11,008 elements at 64 and 256 MiB: 2.4-2.5 GB/s (0.19-0.22x memcpy) gathered, 7.4-10.4 GB/s
// (0.68-0.77x) swept; uint8 rows of 17 stripes, 1.6 against 7.6-8.1 GB/s.

template <class U>
std::uint64_t hash_column_stripes(const U* base, std::span<const std::int64_t> matrices, std::int64_t rows,
                                  std::int64_t cols, std::int64_t col_stride, std::int64_t budget) {
  constexpr std::int64_t kParts = 8 / static_cast<std::int64_t>(sizeof(U));
  constexpr std::int64_t kStorageRowsPerStripe = kStripeBytes / static_cast<std::int64_t>(sizeof(U));
  constexpr std::int64_t kPeriod = kStripesPerBlock;  // rows after which the places repeat
  const std::int64_t stripes = cols * static_cast<std::int64_t>(sizeof(U)) / kStripeBytes;  // a row's
  const std::int64_t block_columns = (stripes + kStripesPerBlock - 1) / kStripesPerBlock;
  const std::int64_t slots = block_columns + 1;  // a row's sums
  std::int64_t strip = std::min({rows, kMaxStrip, std::max(kPeriod, budget / (slots * 64))});
  if (strip < rows) strip -= strip % kPeriod;

  // By the stripe's place j % 16 in its block column, then by lane and the row's i % 16: the key,
  // and whether the stripe falls in the row's next slot.
  std::uint64_t keys[kStripesPerBlock][kLanes * kPeriod];
  std::uint64_t masks[kStripesPerBlock][kPeriod];
  const xxh_u8* const secret = XXH3_kSecret;
  for (std::int64_t jj = 0; jj < kStripesPerBlock; ++jj) {
    for (std::int64_t u = 0; u < kPeriod; ++u) {
      const std::int64_t at = u * stripes % kStripesPerBlock + jj;
      masks[jj][u] = at >= kStripesPerBlock ? ~std::uint64_t{0} : 0;
      for (std::int64_t l = 0; l < kLanes; ++l) {
        keys[jj][l * kPeriod + u] = XXH_readLE64(secret + XXH_SECRET_CONSUME_RATE * (at % kStripesPerBlock + l));
      }
    }
  }

  // kTile + 1 slots' sums, lane-major: the tile's, and the one after it, which the tile's last
  // block column spills into and the next tile starts with.
  const auto bands = std::make_unique_for_overwrite<std::uint64_t[]>(static_cast<std::size_t>((kTile + 1) * kLanes * strip));
  const auto sums = std::make_unique_for_overwrite<std::uint64_t[]>(static_cast<std::size_t>(kLanes * strip * slots));
  XXH_ALIGN(XXH_ACC_ALIGN) xxh_u64 acc[kLanes] = XXH3_INIT_ACC;
  const auto count = static_cast<std::int64_t>(matrices.size());
  const std::int64_t total = count * rows * stripes;
  const std::int64_t last_block = (total - 1) / kStripesPerBlock;

  for (std::int64_t b = 0; b < count; ++b) {
    const U* const matrix = base + matrices[b];
    for (std::int64_t r0 = 0; r0 < rows; r0 += strip) {
      const std::int64_t n = std::min(strip, rows - r0);
      const std::int64_t band_size = kLanes * n;
      auto band = [&](std::int64_t s) { return bands.get() + s * band_size; };
      auto move_out = [&](std::int64_t first_slot, std::int64_t slot_count) {
        for (std::int64_t i = 0; i < n; ++i) {
          std::uint64_t* to = sums.get() + (i * slots + first_slot) * kLanes;
          for (std::int64_t s = 0; s < slot_count; ++s) {
            for (std::int64_t l = 0; l < kLanes; ++l) to[s * kLanes + l] = band(s)[l * n + i];
          }
        }
      };
      std::fill_n(band(0), band_size, std::uint64_t{0});
      for (std::int64_t k0 = 0; k0 < block_columns; k0 += kTile) {
        const std::int64_t tile = std::min(kTile, block_columns - k0);
        std::fill_n(band(1), tile * band_size, std::uint64_t{0});
        for (std::int64_t t = 0; t < tile; ++t) {
          const std::int64_t k = k0 + t;
          const std::int64_t end = std::min((k + 1) * kStripesPerBlock, stripes);
          for (std::int64_t j = k * kStripesPerBlock; j < end; ++j) {
            const void* part[kLanes * kParts];
            for (std::int64_t l = 0; l < kLanes; ++l) {
              for (std::int64_t m = 0; m < kParts; ++m) {
                part[l * kParts + m] = matrix + (j * kStorageRowsPerStripe + l * kParts + m) * col_stride + r0;
              }
            }
            const std::int64_t jj = j % kStripesPerBlock;
            add_shifted<U>(part, n, keys[jj], masks[jj], band(t), band(t + 1));
          }
        }
        move_out(k0, tile);
        std::copy_n(band(tile), band_size, band(0));
      }
      move_out(block_columns, 1);
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t first = (b * rows + r0 + i) * stripes;  // the row's first stripe in the input
        const std::int64_t place = first % kStripesPerBlock;
        for (std::int64_t s = 0; s < slots; ++s) {
          // Slot s holds the row's stripes [s * 16 - place, (s + 1) * 16 - place).
          const std::int64_t from = std::max<std::int64_t>(0, s * kStripesPerBlock - place);
          const std::int64_t to = (s + 1) * kStripesPerBlock - place;
          if (from >= std::min(to, stripes)) continue;  // the row ends before it
          const std::uint64_t* sum = sums.get() + (i * slots + s) * kLanes;
          for (std::int64_t l = 0; l < kLanes; ++l) acc[l] += sum[l];
          // The block ends in this row (else the next row's first slot completes it).
          if (to <= stripes && first / kStripesPerBlock + s != last_block) {
            XXH3_scrambleAcc_scalar(acc, secret + kSecretSize - kStripeBytes);
          }
        }
      }
    }
  }
  const auto len = static_cast<std::uint64_t>(total) * kStripeBytes;
  return finish(acc, base + matrices.back(), rows, cols, col_stride, (total - 1) % kStripesPerBlock, len);
}

}  // namespace

std::optional<std::uint64_t> xxh3_column_batch(const void* base, std::span<const std::int64_t> matrices,
                                               std::int64_t rows, std::int64_t cols, std::int64_t col_stride,
                                               std::size_t width, bool wide, std::int64_t strip_budget) {
  if (matrices.empty() || rows < 2 || cols <= 0 || col_stride < rows) return std::nullopt;
  if (width != 1 && width != 2 && width != 4 && width != 8) return std::nullopt;
  const auto count = static_cast<std::int64_t>(matrices.size());
  const std::int64_t row_bytes = cols * static_cast<std::int64_t>(width);
  // XXH3 hashes inputs of up to XXH3_MIDSIZE_MAX (240) bytes without its stripes and blocks (two
  // or three rows of one stripe of bytes or bfloat16 reach here): gathered.
  if (count * rows * row_bytes <= XXH3_MIDSIZE_MAX) return std::nullopt;
  if (row_bytes % kBlockBytes == 0) {
    // One row's sums past the budget (a row over 1 GiB): the gather's buffer stays bounded.
    if (row_bytes / kBlockBytes * 64 > kSumBudget) return std::nullopt;
    switch (width) {
      case 1: return hash_columns(static_cast<const std::uint8_t*>(base), matrices, rows, cols, col_stride, wide);
      case 2: return hash_columns(static_cast<const std::uint16_t*>(base), matrices, rows, cols, col_stride, wide);
      case 4: return hash_columns(static_cast<const std::uint32_t*>(base), matrices, rows, cols, col_stride, wide);
      default: return hash_columns(static_cast<const std::uint64_t*>(base), matrices, rows, cols, col_stride, wide);
    }
  }
  // Note [Rows of whole stripes]: rows of whole stripes (of 4- and 8-byte elements, at least
  // kMinWideStripes), whose 16 rows' slots stay within the budget (a row under 64 MiB).
  if (row_bytes % kStripeBytes != 0) return std::nullopt;
  if (width >= 4 && row_bytes / kStripeBytes < kMinWideStripes) return std::nullopt;
  // Rows take their places in a block from a table by their row in the matrix: where a matrix
  // is not whole blocks, the next one would start elsewhere in a block (gathered).
  if (count > 1 && rows * (row_bytes / kStripeBytes) % kStripesPerBlock != 0) return std::nullopt;
  const std::int64_t budget = strip_budget > 0 ? strip_budget : kSumBudget;
  if ((row_bytes / kBlockBytes + 2) * 64 * kStripesPerBlock > budget) return std::nullopt;
  switch (width) {
    case 1: return hash_column_stripes(static_cast<const std::uint8_t*>(base), matrices, rows, cols, col_stride, budget);
    case 2: return hash_column_stripes(static_cast<const std::uint16_t*>(base), matrices, rows, cols, col_stride, budget);
    case 4: return hash_column_stripes(static_cast<const std::uint32_t*>(base), matrices, rows, cols, col_stride, budget);
    default: return hash_column_stripes(static_cast<const std::uint64_t*>(base), matrices, rows, cols, col_stride, budget);
  }
}

std::optional<std::uint64_t> xxh3_columns(const void* base, std::int64_t rows, std::int64_t cols,
                                          std::int64_t col_stride, std::size_t width, bool wide,
                                          std::int64_t strip_budget) {
  const std::int64_t at_base = 0;
  return xxh3_column_batch(base, std::span(&at_base, 1), rows, cols, col_stride, width, wide, strip_budget);
}

}  // namespace graphcheck::detail
