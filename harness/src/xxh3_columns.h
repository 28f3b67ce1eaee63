#pragma once
// XXH3-64 of a column-major matrix in its logical (row-major) order, read in storage order
// (Note [Column-major fingerprints], xxh3_columns.cpp). Torch-free.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace graphcheck::detail {

// The digest XXH3_64bits would give the row-major copy of the `rows` x `cols` matrix whose
// element (r, c) lies at base + (r + c * col_stride) * width: a transposed weight, or a column
// slice of one (col_stride >= rows). Elements of 1, 2, 4 or 8 bytes. Empty where this way does
// not apply, and the caller gathers: a row of the matrix that is not a whole number of XXH3's
// 64-byte stripes (cols * width % 64 != 0), or of 4- or 8-byte elements under 8 stripes (Note
// [Rows of whole stripes]); fewer than two rows; 240 bytes or fewer in all (XXH3 hashes those
// without stripes); a row over 1 GiB, or over what the budget gives 16 rows where it is not whole
// 1 KiB blocks (64 MiB: its sums would pass the sweep's budget). For tests: `wide`, the sweep's
// AVX2 build where the CPU has it, false its baseline build (rows of whole blocks; rows of whole
// stripes have one build); `strip_budget`, where positive, the
// budget in place of 64 MiB for rows that are not whole blocks (where it applies, the digest is
// the same).
[[nodiscard]] std::optional<std::uint64_t> xxh3_columns(const void* base, std::int64_t rows, std::int64_t cols,
                                                        std::int64_t col_stride, std::size_t width,
                                                        bool wide = true, std::int64_t strip_budget = 0);

// The same for a batch of such matrices, hashed one after another as one input: matrix b at
// base + matrices[b] * width (a stack of transposed weights, such as an MoE layer's experts seen
// through transpose(1, 2)). Empty in the cases above, and where rows of whole stripes do not make
// each matrix whole 1 KiB blocks (the next matrix would start inside a block).
[[nodiscard]] std::optional<std::uint64_t> xxh3_column_batch(const void* base, std::span<const std::int64_t> matrices,
                                                             std::int64_t rows, std::int64_t cols,
                                                             std::int64_t col_stride, std::size_t width,
                                                             bool wide = true, std::int64_t strip_budget = 0);

}  // namespace graphcheck::detail
