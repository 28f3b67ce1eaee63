// XXH3-64 of contiguous bytes with XXH3's AVX2 kernel, for CPUs that have it (fingerprint.cpp
// asks at run time). The digest is XXH3's whatever the kernel: the same bytes hash the same on
// any CPU. Compiled with -mavx2 (harness/CMakeLists.txt); nothing here runs unless the CPU says
// it has AVX2. Torch-free.

#include "xxh3_wide.h"

#if GRAPHCHECK_XXH3_AVX2
#define XXH_INLINE_ALL
#define XXH_VECTOR XXH_AVX2
#include <xxhash.h>

#include <algorithm>
#endif

namespace graphcheck::detail {

#if GRAPHCHECK_XXH3_AVX2

bool xxh3_avx2_available() {
  static const bool available = __builtin_cpu_supports("avx2");
  return available;
}

namespace {

// Note [Hashing four streams]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// One core reading one stream keeps too few lines in flight to reach memcpy's speed (Note [Scans
// read four streams], four_streams.h), and XXH3 reads its input in order. But each 1 KiB block
// only adds terms to XXH3's lanes before the block's scramble (Note [Column-major fingerprints],
// xxh3_columns.cpp), so a block's sum can be formed apart from the lanes. The input is hashed a
// window of up to 4 x kSpan blocks at a time: the window's four quarters are read side by side,
// a stripe of each in turn, each block summed into lanes of its own; then the window's sums run
// through the lanes and scrambles in order. The input's last block (a partial one in XXH3: its
// stripes, then the last 64 bytes with another key, no scramble) and the merge are XXH3's own
// code. Same digest (Fingerprint tests, against XXH3_64bits, lengths on and around block and
// window edges). bench/harness_bench BM_Fingerprint, alternated with the one-stream hash (64 KiB
// at a time, the next prefetched) in one sitting, 64 MiB to 1 GiB: 8.7-9.4 GB/s (0.79-0.92x
// memcpy) before, 11.3-11.9 GB/s (1.04-1.25x) after. A round of four blocks keeps its four sums
// in registers: with them in memory, hashing data already in cache ran 25-30% under XXH3's one
// call; with them in registers, 3-18% under it (640 MiB in 16 KiB-1 MiB pieces: 12.6-13.9
// against 9.5-10.6 GB/s from memory; a few pieces hashed again and again: 24-36 against 26-40
// GB/s in cache).
constexpr std::size_t kStripe = XXH_STRIPE_LEN;
constexpr std::size_t kSecretSize = XXH_SECRET_DEFAULT_SIZE;
constexpr std::size_t kStripesPerBlock = (kSecretSize - kStripe) / XXH_SECRET_CONSUME_RATE;
constexpr std::size_t kBlock = kStripe * kStripesPerBlock;
constexpr std::size_t kSpan = 64;  // blocks of each quarter of a window: 64 KiB
constexpr std::size_t kQuarters = 4;
constexpr std::size_t kFourStreamsFrom = std::size_t{16} << 10;

std::uint64_t xxh3_four_streams(const std::uint8_t* input, std::size_t len) {
  const xxh_u8* const secret = XXH3_kSecret;
  XXH_ALIGN(XXH_ACC_ALIGN) xxh_u64 acc[XXH_ACC_NB] = XXH3_INIT_ACC;
  XXH_ALIGN(XXH_ACC_ALIGN) xxh_u64 sums[kQuarters * kSpan][XXH_ACC_NB];
  const std::size_t blocks = (len - 1) / kBlock;  // the whole blocks XXH3 scrambles after
  for (std::size_t w0 = 0; w0 < blocks; w0 += kQuarters * kSpan) {
    const std::size_t wn = std::min(kQuarters * kSpan, blocks - w0);
    const std::size_t span = (wn + kQuarters - 1) / kQuarters;
    // Rounds in which every quarter has its block (the last quarter is the first to run out),
    // with the four sums in registers; then the other quarters' remaining blocks one at a time.
    const std::size_t rounds = std::min(span, wn > 3 * span ? wn - 3 * span : 0);
    for (std::size_t j = 0; j < rounds; ++j) {
      XXH_ALIGN(XXH_ACC_ALIGN) xxh_u64 a0[XXH_ACC_NB] = {}, a1[XXH_ACC_NB] = {}, a2[XXH_ACC_NB] = {},
                                       a3[XXH_ACC_NB] = {};
      const xxh_u8* const p0 = input + (w0 + j) * kBlock;
      const std::size_t quarter = span * kBlock;
      for (std::size_t s = 0; s < kStripesPerBlock; ++s) {
        const xxh_u8* const key = secret + s * XXH_SECRET_CONSUME_RATE;
        const std::size_t at = s * kStripe;
        XXH3_accumulate_512_avx2(a0, p0 + at, key);
        XXH3_accumulate_512_avx2(a1, p0 + quarter + at, key);
        XXH3_accumulate_512_avx2(a2, p0 + 2 * quarter + at, key);
        XXH3_accumulate_512_avx2(a3, p0 + 3 * quarter + at, key);
      }
      std::copy_n(a0, XXH_ACC_NB, sums[j]);
      std::copy_n(a1, XXH_ACC_NB, sums[span + j]);
      std::copy_n(a2, XXH_ACC_NB, sums[2 * span + j]);
      std::copy_n(a3, XXH_ACC_NB, sums[3 * span + j]);
    }
    for (std::size_t q = 0; q < kQuarters; ++q) {
      for (std::size_t j = rounds; j < span; ++j) {
        const std::size_t b = q * span + j;
        if (b >= wn) continue;
        std::fill_n(sums[b], XXH_ACC_NB, xxh_u64{0});
        for (std::size_t s = 0; s < kStripesPerBlock; ++s) {
          XXH3_accumulate_512_avx2(sums[b], input + (w0 + b) * kBlock + s * kStripe, secret + s * XXH_SECRET_CONSUME_RATE);
        }
      }
    }
    for (std::size_t b = 0; b < wn; ++b) {
      for (std::size_t l = 0; l < XXH_ACC_NB; ++l) acc[l] += sums[b][l];
      XXH3_scrambleAcc_avx2(acc, secret + kSecretSize - kStripe);
    }
  }
  // The last, partial block, as XXH3_hashLong_internal_loop runs it.
  const std::size_t stripes = ((len - 1) - blocks * kBlock) / kStripe;
  for (std::size_t s = 0; s < stripes; ++s) {
    XXH3_accumulate_512_avx2(acc, input + blocks * kBlock + s * kStripe, secret + s * XXH_SECRET_CONSUME_RATE);
  }
  XXH3_accumulate_512_avx2(acc, input + len - kStripe, secret + kSecretSize - kStripe - XXH_SECRET_LASTACC_START);
  return XXH3_mergeAccs(acc, secret + XXH_SECRET_MERGEACCS_START, static_cast<xxh_u64>(len) * XXH_PRIME64_1);
}

}  // namespace

std::uint64_t xxh3_avx2(const void* data, std::size_t bytes) {
  // Under 16 KiB in one call; from there, four streams (Note [Hashing four streams]). Hashing
  // 640 MiB a piece at a time, in one call against four streams: 4 KiB pieces 9.7 against 7.5
  // GB/s, 8 KiB 8.4-9.0 against 6.4-7.9, 16 KiB 10.0-10.2 against 13.0, 64 KiB 8.7-9.4 against
  // 11.6-12.7.
  if (bytes < kFourStreamsFrom) return XXH3_64bits(data, bytes);
  return xxh3_four_streams(static_cast<const std::uint8_t*>(data), bytes);
}

#else

bool xxh3_avx2_available() { return false; }
std::uint64_t xxh3_avx2(const void*, std::size_t) { return 0; }

#endif

}  // namespace graphcheck::detail
