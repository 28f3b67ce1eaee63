#pragma once
// The harness's work on CUDA tensors through its own kernels (kernels/harness_kernels.h): poison
// fill and survivor scan, and the content fingerprint, on the device, without copying weights to
// the host. Built only with GRAPHCHECK_HAS_CUDA; poison.cpp calls these for contiguous CUDA
// tensors, fingerprint.cpp for any CUDA tensor.

#include <torch/types.h>

#include <cstdint>

namespace graphcheck::cuda_ops {

// Every byte of contiguous CUDA tensor `t` set to `byte`, on the current stream.
void fill_bytes(const torch::Tensor& t, std::uint8_t byte);

struct ScanResult {
  std::int64_t count = 0;
  std::int64_t first = -1;
};
// Elements of contiguous CUDA tensor `t` whose every byte is `byte`, not counting those whose
// `expected` element (same shape and dtype, or undefined) is the pattern too. An expected value
// that is not on t's device in t's layout (a checkpoint record on the host) is copied to the
// device a piece of at most 64 MiB at a time, not whole (Note [Device scans in pieces]).
[[nodiscard]] ScanResult scan_poison(const torch::Tensor& t, const torch::Tensor& expected,
                                     std::uint8_t byte);

// The device content hash of a CUDA tensor's bytes in logical order. A view that is not
// contiguous is copied a piece of at most 64 MiB at a time, not whole (Note [Device fingerprints
// in pieces], kernels/fingerprint_lanes.h).
[[nodiscard]] std::uint64_t fingerprint(const torch::Tensor& t);

namespace detail {
// scan_poison() against an expected value anywhere, in any layout, copied to the device in pieces
// of at most `budget` bytes.
[[nodiscard]] ScanResult scan_poison_in_pieces(const torch::Tensor& t, const torch::Tensor& expected,
                                               std::uint8_t byte, std::int64_t budget);
// fingerprint() of any CUDA view, taken in pieces of at most `budget` bytes (the tests' budgets
// split lanes, rows and elements).
[[nodiscard]] std::uint64_t fingerprint_in_pieces(const torch::Tensor& t, std::int64_t budget);
}  // namespace detail

}  // namespace graphcheck::cuda_ops
