#pragma once
// Byte-pattern scans over raw element arrays, at memory speed (issue 13): the poison probe's and
// the census's survivor counts. Torch-free, compiled at -O3 so that the loops vectorise.

#include <cstddef>
#include <cstdint>

namespace graphcheck::scan {

// For each of the `n` elements of `element_size` bytes at `data`: whether every byte of it is
// `byte` and, where `expected` is not null, the element at the same index of `expected` is not
// entirely `byte` (holding the pattern where the pattern is expected is no evidence).

// How many elements match; `*first` (when not null) gets the first one's index, -1 when none.
[[nodiscard]] std::int64_t count_pattern(const void* data, const void* expected, std::int64_t n,
                                         std::size_t element_size, std::uint8_t byte,
                                         std::int64_t* first = nullptr);
// The same rule written as one bool per element into `out`.
void mask_pattern(const void* data, const void* expected, std::int64_t n, std::size_t element_size,
                  std::uint8_t byte, bool* out);

namespace detail {
// count_pattern's count of bytes against an expected value, by its AVX2 loop (`wide`, where the
// CPU has AVX2) or its SSE2 one. For tests: the count is the same.
[[nodiscard]] std::int64_t count_bytes(const std::uint8_t* data, const std::uint8_t* expected, std::int64_t n,
                                       std::uint8_t byte, bool wide);
}  // namespace detail

}  // namespace graphcheck::scan
