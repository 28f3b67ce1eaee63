// XXH3-64 of contiguous bytes with XXH3's AVX2 kernel, for CPUs that have it (fingerprint.cpp
// asks at run time). The digest is XXH3's whatever the kernel: the same bytes hash the same on
// any CPU. Compiled with -mavx2 (harness/CMakeLists.txt); nothing here runs unless the CPU says
// it has AVX2. Torch-free.

#include "xxh3_wide.h"

#include "prefetch.h"

#if GRAPHCHECK_XXH3_AVX2
#define XXH_INLINE_ALL
#define XXH_VECTOR XXH_AVX2
#include <xxhash.h>

#include <algorithm>
#include <memory>
#include <new>
#endif

namespace graphcheck::detail {

#if GRAPHCHECK_XXH3_AVX2

bool xxh3_avx2_available() {
  static const bool available = __builtin_cpu_supports("avx2");
  return available;
}

std::uint64_t xxh3_avx2(const void* data, std::size_t bytes) {
  // As fingerprint.cpp's hash_contiguous: blocks of 64 KiB, the next prefetched while this one
  // is hashed.
  constexpr std::size_t kBlock = std::size_t{1} << 16;
  if (bytes <= 4 * kBlock) return XXH3_64bits(data, bytes);
  struct Deleter {
    void operator()(XXH3_state_t* s) const { XXH3_freeState(s); }
  };
  std::unique_ptr<XXH3_state_t, Deleter> state(XXH3_createState());
  if (!state || XXH3_64bits_reset(state.get()) != XXH_OK) throw std::bad_alloc();
  const auto* p = static_cast<const std::byte*>(data);
  for (std::size_t at = 0; at < bytes; at += kBlock) {
    const std::size_t next = at + kBlock;
    prefetch_lines(p, next, next + kBlock, bytes);
    XXH3_64bits_update(state.get(), p + at, std::min(kBlock, bytes - at));
  }
  return XXH3_64bits_digest(state.get());
}

#else

bool xxh3_avx2_available() { return false; }
std::uint64_t xxh3_avx2(const void*, std::size_t) { return 0; }

#endif

}  // namespace graphcheck::detail
