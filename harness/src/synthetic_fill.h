#pragma once
// Fills for synthesized checkpoints (LifecycleModel::synthesize_checkpoint's default). Issue 13:
// one thread, 64-256 MiB, this fill 2.7 GB/s against 0.68-0.87 GB/s for torch's normal_ alone
// (harness_bench BM_SynthFill, BM_RandnFill; memcpy 3.6-7.0 GB/s). Counter-based: element i of a stream depends only on the
// stream's key and i (SplitMix64), so a fill needs no generator state, two fills with one key are
// identical on every machine, and tensors keyed by their index do not depend on each other.
// Torch-free, compiled at -O3.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace graphcheck::synth {

// The key of the stream for tensor `index` of the checkpoint synthesized for `seed`.
[[nodiscard]] std::uint64_t stream_key(std::uint64_t seed, std::uint64_t index);

// `n` floats uniform in [-half_width, half_width) (standard deviation half_width / sqrt(3)):
// elements [first, first + n) of the stream, `first` even (a draw makes two).
void fill_uniform(float* out, std::size_t n, std::uint64_t key, float half_width, std::size_t first = 0);

// The instruction sets fill_uniform can draw with on this CPU, the one it uses first ("avx512",
// "avx2", "baseline"): each draws the same values. For tests, with fill_uniform_with (which
// throws std::invalid_argument for an instruction set this CPU lacks).
[[nodiscard]] std::vector<std::string> fill_uniform_isas();
void fill_uniform_with(const std::string& isa, float* out, std::size_t n, std::uint64_t key, float half_width,
                       std::size_t first = 0);

// `n` bytes uniform in [0, mask] for a mask of the form 2^k - 1 (1: booleans, 7: small integers).
void fill_masked_bytes(std::uint8_t* out, std::size_t n, std::uint64_t key, std::uint8_t mask);

}  // namespace graphcheck::synth
