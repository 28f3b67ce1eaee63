#pragma once
// Content fingerprints of tensors (xxHash XXH3-64 over the bytes, in logical order; CUDA tensors
// are hashed on the device with another 64-bit hash: compare fingerprints of one device only).

#include <torch/types.h>

#include <cstddef>
#include <cstdint>

namespace graphcheck {

[[nodiscard]] std::uint64_t fingerprint(const torch::Tensor& tensor);
// XXH3-64 of raw bytes (the CLI's `inspect`, which links no xxHash of its own).
[[nodiscard]] std::uint64_t fingerprint_bytes(const void* data, std::size_t bytes);

}  // namespace graphcheck
