#pragma once
// Host-side launchers of the harness's own CUDA kernels (poison.cu, fingerprint.cu): poison fill
// and scan, and the content fingerprint, on device memory without host copies of the weights.
// Plain pointers, no torch; harness/src/backends/cuda_tensor_ops.cpp wraps them for tensors.

#include <cuda_runtime_api.h>

#include <cstdint>

namespace graphcheck::kernels::cuda {

// Sets `bytes` bytes at `data` to `byte`.
cudaError_t poison_fill(void* data, std::uint64_t bytes, std::uint8_t byte, cudaStream_t stream);

// Counts the elements of `data` ([elements, element_size] bytes, element_size 1, 2, 4 or 8) whose
// every byte is `byte`; where `expected` (same layout) is not null, an element whose expected
// value is itself all `byte` never counts. Writes the count and the first such element's index
// (INT64_MAX when none) to result[0] and result[1] (device memory, which it zeroes first).
cudaError_t poison_scan(const void* data, const void* expected, std::int64_t elements,
                        int element_size, std::uint8_t byte, unsigned long long* result,
                        cudaStream_t stream);

// A 64-bit content hash of `bytes` bytes (contiguous device memory) written to result[0];
// result[1..2] are scratch (three words of device memory). Deterministic for the same bytes on any
// device; not XXH3 (host fingerprints are), so compare device fingerprints only with device
// fingerprints.
cudaError_t fingerprint(const void* data, std::uint64_t bytes, unsigned long long* result,
                        cudaStream_t stream);

// Adds the lanes of `bytes` bytes at `data` (contiguous device memory), numbered from `first_lane`,
// to sums[0] (their sum) and sums[1] (their xor): a segment of a fingerprint taken in pieces
// (fingerprint_lanes.h, Note [Device fingerprints in pieces]). Bytes past `bytes` in the last lane
// count as zero.
cudaError_t fingerprint_lanes(const void* data, std::uint64_t bytes, std::uint64_t first_lane,
                              unsigned long long* sums, cudaStream_t stream);

}  // namespace graphcheck::kernels::cuda
