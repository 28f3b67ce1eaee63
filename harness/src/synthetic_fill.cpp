#include "synthetic_fill.h"

#include <stdexcept>

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

namespace {

// Pairs [0, pairs) of fill_uniform's stream, from `key` (already moved to `first`). One body,
// compiled for several instruction sets below: the values are the same integer arithmetic and
// the same int-to-float conversions in each, so every build and CPU draws the same bits.
inline void uniform_pairs(float* out, std::size_t pairs, std::uint64_t key, float scale) {
  for (std::size_t i = 0; i < pairs; ++i) {
    const std::uint64_t h = mix(key + (i + 1) * kGamma);
    out[2 * i] = static_cast<float>(static_cast<std::int32_t>(h >> 40) - 8388608) * scale;
    out[2 * i + 1] = static_cast<float>(static_cast<std::int32_t>((h >> 8) & 0xffffffu) - 8388608) * scale;
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
// SplitMix64's two 64-bit multiplies have no SSE2 vector form: the baseline build draws one pair
// at a time. AVX-512DQ multiplies eight lanes at once (vpmullq), AVX2 four (from 32-bit
// products): issue 26, a synthesis of the 512 MiB model spent half its time here.
[[gnu::target("avx512f,avx512dq,avx512vl")]] void uniform_pairs_avx512(float* out, std::size_t pairs,
                                                                      std::uint64_t key, float scale) {
  uniform_pairs(out, pairs, key, scale);
}
[[gnu::target("avx2")]] void uniform_pairs_avx2(float* out, std::size_t pairs, std::uint64_t key, float scale) {
  uniform_pairs(out, pairs, key, scale);
}
#endif

using PairsFn = void (*)(float*, std::size_t, std::uint64_t, float);

struct Isa {
  const char* name;
  PairsFn fn;
};

// What this CPU can run, the fastest first; the baseline always.
std::vector<Isa> usable_isas() {
  std::vector<Isa> out;
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")) {
    out.push_back({"avx512", uniform_pairs_avx512});
  }
  if (__builtin_cpu_supports("avx2")) out.push_back({"avx2", uniform_pairs_avx2});
#endif
  out.push_back({"baseline", uniform_pairs});
  return out;
}

void fill_with(PairsFn pairs_fn, float* out, std::size_t n, std::uint64_t key, float half_width, std::size_t first) {
  // Two floats per 64-bit draw, 24 bits each: u in [0, 2^24), x = (u - 2^23) * half_width / 2^23.
  // Element j of the stream is half of draw j / 2: a fill from an even `first` continues one.
  const float scale = half_width / 8388608.0f;
  key += first / 2 * kGamma;
  const std::size_t pairs = n / 2;
  pairs_fn(out, pairs, key, scale);
  if (n % 2) {
    const std::uint64_t h = mix(key + (pairs + 1) * kGamma);
    out[n - 1] = static_cast<float>(static_cast<std::int32_t>(h >> 40) - 8388608) * scale;
  }
}

}  // namespace

void fill_uniform(float* out, std::size_t n, std::uint64_t key, float half_width, std::size_t first) {
  static const PairsFn best = usable_isas().front().fn;
  fill_with(best, out, n, key, half_width, first);
}

std::vector<std::string> fill_uniform_isas() {
  std::vector<std::string> out;
  for (const Isa& isa : usable_isas()) out.emplace_back(isa.name);
  return out;
}

void fill_uniform_with(const std::string& isa, float* out, std::size_t n, std::uint64_t key, float half_width,
                       std::size_t first) {
  for (const Isa& i : usable_isas()) {
    if (isa == i.name) return fill_with(i.fn, out, n, key, half_width, first);
  }
  throw std::invalid_argument("fill_uniform_with: '" + isa + "' is not usable on this CPU");
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
