#pragma once
// XXH3-64 with XXH3's AVX2 kernel (xxh3_wide.cpp), where the CPU has AVX2: the fingerprint of a
// contiguous tensor from memory runs at 0.75x memcpy with the SSE2 kernel, and at memcpy's speed
// with this one, which reads 16 KiB and more as four streams (Note [Hashing four streams];
// bench/harness_bench BM_Fingerprint). Torch-free.

#include <cstddef>
#include <cstdint>

namespace graphcheck::detail {

// Whether xxh3_avx2() may be called: built for x86-64 and the CPU has AVX2.
[[nodiscard]] bool xxh3_avx2_available();
// The same digest as XXH3_64bits(data, bytes).
[[nodiscard]] std::uint64_t xxh3_avx2(const void* data, std::size_t bytes);

}  // namespace graphcheck::detail
