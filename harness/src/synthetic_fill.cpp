#include "synthetic_fill.h"

namespace graphcheck::synth {
namespace {

constexpr std::uint64_t kGamma = 0x9e3779b97f4a7c15ULL;

// SplitMix64's output function (Steele, Lea, Flood 2014): a bijective mix of the counter.
inline std::uint64_t mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

std::uint64_t stream_key(std::uint64_t seed, std::uint64_t index) {
  return mix(mix(seed + kGamma) ^ (index * kGamma + 1));
}

void fill_uniform(float* out, std::size_t n, std::uint64_t key, float half_width, std::size_t first) {
  // Two floats per 64-bit draw, 24 bits each: u in [0, 2^24), x = (u - 2^23) * half_width / 2^23.
  // Element j of the stream is half of draw j / 2: a fill from an even `first` continues one.
  const float scale = half_width / 8388608.0f;
  key += first / 2 * kGamma;
  const std::size_t pairs = n / 2;
  for (std::size_t i = 0; i < pairs; ++i) {
    const std::uint64_t h = mix(key + (i + 1) * kGamma);
    out[2 * i] = static_cast<float>(static_cast<std::int32_t>(h >> 40) - 8388608) * scale;
    out[2 * i + 1] =
        static_cast<float>(static_cast<std::int32_t>((h >> 8) & 0xffffffu) - 8388608) * scale;
  }
  if (n % 2) {
    const std::uint64_t h = mix(key + (pairs + 1) * kGamma);
    out[n - 1] = static_cast<float>(static_cast<std::int32_t>(h >> 40) - 8388608) * scale;
  }
}

void fill_masked_bytes(std::uint8_t* out, std::size_t n, std::uint64_t key, std::uint8_t mask) {
  // Eight bytes per draw.
  const std::size_t words = n / 8;
  for (std::size_t i = 0; i < words; ++i) {
    std::uint64_t h = mix(key + (i + 1) * kGamma);
    for (std::size_t b = 0; b < 8; ++b, h >>= 8) out[8 * i + b] = static_cast<std::uint8_t>(h) & mask;
  }
  std::uint64_t h = mix(key + (words + 1) * kGamma);
  for (std::size_t j = 8 * words; j < n; ++j, h >>= 8) out[j] = static_cast<std::uint8_t>(h) & mask;
}

}  // namespace graphcheck::synth
