#pragma once
// XXH3-64 of raw bytes: the torch-free half of fingerprint.h, for code that holds no tensors
// (the CLI's `inspect`).

#include <cstddef>
#include <cstdint>

namespace graphcheck {

[[nodiscard]] std::uint64_t fingerprint_bytes(const void* data, std::size_t bytes);

}  // namespace graphcheck
