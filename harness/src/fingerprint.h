#pragma once
// Content fingerprints of tensors (xxHash XXH3-64 over the bytes, in logical order).

#include <torch/types.h>

#include <cstdint>

namespace graphcheck {

[[nodiscard]] std::uint64_t fingerprint(const torch::Tensor& tensor);

}  // namespace graphcheck
