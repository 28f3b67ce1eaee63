#pragma once
// Content fingerprints of tensors (xxHash XXH3-64 over the bytes, in logical order: the same for
// the same values in any layout). No view is copied whole (Note [Strided fingerprints],
// fingerprint.cpp): rows that are contiguous runs are hashed where they lie; a transposed matrix,
// or a stack of them, is read in its storage's order where its rows are whole XXH3 stripes
// (xxh3_columns.h), gathered otherwise; any other view is copied a few rows at a time. CUDA
// tensors are hashed on the device with another 64-bit hash: compare fingerprints of one device.

#include <torch/types.h>

#include <cstddef>
#include <cstdint>

#include "fingerprint_bytes.h"

namespace graphcheck {

[[nodiscard]] std::uint64_t fingerprint(const torch::Tensor& tensor);

}  // namespace graphcheck
