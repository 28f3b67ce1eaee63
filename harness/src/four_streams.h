#pragma once
// Loops over large arrays at memory speed on one core: four parts side by side. Torch-free.

#include <algorithm>
#include <cstdint>

namespace graphcheck::streams {

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
// Nor does an elementwise rewrite in place (the coverage perturbation, perturb_bits.cpp): binary32,
// 512 MiB, one stream 0.075-0.079 s, four of 256 bytes 0.046 s (1 KiB: 0.057 s, 4 KiB: 0.072 s),
// memcpy 0.049-0.051 s.
constexpr std::int64_t kStreams = 4;
constexpr std::int64_t kInterleaveFrom = std::int64_t{1} << 18;

// Calls visit(from, to) over [0, n) and sums what it returns: in order below kInterleaveFrom
// bytes, in pieces of chunk_bytes of four parts side by side from there.
template <class Visit>
std::int64_t over_four_streams(std::int64_t n, std::int64_t element_size, std::int64_t chunk_bytes, Visit&& visit) {
  if (n * element_size < kInterleaveFrom) return visit(std::int64_t{0}, n);
  const std::int64_t part = n / kStreams;
  const std::int64_t chunk = std::max<std::int64_t>(1, chunk_bytes / element_size);
  std::int64_t total = 0;
  for (std::int64_t off = 0; off < part; off += chunk) {
    const std::int64_t len = std::min(chunk, part - off);
    for (std::int64_t s = 0; s < kStreams; ++s) total += visit(s * part + off, s * part + off + len);
  }
  return total + visit(kStreams * part, n);
}

}  // namespace graphcheck::streams
