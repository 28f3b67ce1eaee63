#pragma once
// The device fingerprint's arithmetic (fingerprint.cu), for the device and the host alike, and the
// host's side of a fingerprint taken in pieces (Note [Device fingerprints in pieces]). No torch, no
// CUDA runtime: the CPU tests check the pieces against the whole.

#include <algorithm>
#include <cstdint>

#if defined(__CUDACC__)
#define GRAPHCHECK_HOST_DEVICE __host__ __device__
#else
#define GRAPHCHECK_HOST_DEVICE
#endif

namespace graphcheck::kernels::lanes {

// A splitmix64-style finaliser.
GRAPHCHECK_HOST_DEVICE inline unsigned long long mix(unsigned long long x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// A lane is 8 bytes of the data (little-endian; past the end, zero) at lane index `i`. The
// fingerprint is the sum of the lanes' hashes and the xor of their second mixes, finished with the
// byte count: order-free, so lanes may be added in any order, by any thread, in any piece.
struct Sums {
  unsigned long long sum = 0, xr = 0;

  GRAPHCHECK_HOST_DEVICE void add(unsigned long long v, std::uint64_t i) {
    const unsigned long long h = mix(v ^ mix(i + 0x9e3779b97f4a7c15ULL));
    sum += h;
    xr ^= mix(h + i);
  }
};

GRAPHCHECK_HOST_DEVICE inline unsigned long long finish(unsigned long long sum, unsigned long long xr,
                                                         std::uint64_t bytes) {
  return mix(sum ^ mix(xr ^ bytes));
}

// Note [Device fingerprints in pieces]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A CUDA view that is not contiguous (a stack of MoE experts seen transposed after PWAL) was
// copied whole on the device to be fingerprinted: a second tensor of its size in device memory,
// beside models A and B, for as long as the kernel ran. Now it is copied a piece at a time (Note
// [Pieces in logical order]) into one buffer of bounded size, and each piece is a segment of the
// contiguous copy's bytes: the kernel hashes the lanes that lie whole in the segment, at their
// index in the whole; a lane that a segment boundary splits (a piece need not be whole lanes: rows
// of three float16) is put together here, on the host, from the few bytes on either side, and
// hashed here with the same arithmetic. The sums add up to the contiguous copy's, and so does the
// digest.
class LaneAssembler {
 public:
  // A segment of `bytes` bytes, after those added before. whole(offset, bytes, first_lane) hashes
  // `bytes` bytes (a multiple of 8) at `offset` in the segment as the lanes from first_lane on;
  // read(offset, bytes, out) copies `bytes` bytes (fewer than 8) at `offset` in the segment to `out`.
  template <class Whole, class Read>
  void add(std::uint64_t bytes, Whole&& whole, Read&& read) {
    if (bytes == 0) return;
    std::uint64_t off = 0;
    if (m_at % 8 != 0) {  // the rest of a lane the last segment began
      const std::uint64_t head = std::min<std::uint64_t>(8 - m_at % 8, bytes);
      take(read, off, head);
      off += head;
    }
    const std::uint64_t body = (bytes - off) / 8 * 8;
    if (body > 0) {
      whole(off, body, m_at / 8);
      m_at += body;
      off += body;
    }
    if (off < bytes) take(read, off, bytes - off);  // the start of a lane the next segment ends
  }

  // The digest, given the sums of the lanes that `whole` hashed.
  [[nodiscard]] std::uint64_t finish(Sums device) const {
    Sums host = m_sums;
    if (m_at % 8 != 0) host.add(m_pending, m_at / 8);  // the last lane, zero past the end
    return lanes::finish(device.sum + host.sum, device.xr ^ host.xr, m_at);
  }

  [[nodiscard]] std::uint64_t bytes() const { return m_at; }

 private:
  template <class Read>
  void take(Read& read, std::uint64_t off, std::uint64_t n) {
    unsigned char buffer[8] = {};
    read(off, n, buffer);
    for (std::uint64_t k = 0; k < n; ++k, ++m_at) {
      m_pending |= static_cast<unsigned long long>(buffer[k]) << (8 * (m_at % 8));
    }
    if (m_at % 8 == 0) {
      m_sums.add(m_pending, m_at / 8 - 1);
      m_pending = 0;
    }
  }

  std::uint64_t m_at = 0;              // bytes added
  unsigned long long m_pending = 0;    // the bytes of the lane in progress
  Sums m_sums;                         // the lanes put together here
};

}  // namespace graphcheck::kernels::lanes
