#include "backends/cuda_tensor_ops.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <cuda_runtime_api.h>

#include <limits>

#include "fingerprint_lanes.h"
#include "harness_kernels.h"
#include "tensor_pieces.h"

namespace graphcheck::cuda_ops {
namespace {

void check(cudaError_t err, const char* what) {
  TORCH_CHECK(err == cudaSuccess, "graphcheck: ", what,
              " kernel failed: ", cudaGetErrorString(err));
}

// One launch of the scan over `elements` elements at `data` against `expected` (device memory of
// the same layout, or null).
ScanResult scan_run(const void* data, const void* expected, std::int64_t elements, std::int64_t element_size,
                    std::uint8_t byte, torch::Tensor& result) {
  check(kernels::cuda::poison_scan(data, expected, elements, static_cast<int>(element_size), byte,
                                   reinterpret_cast<unsigned long long*>(result.data_ptr()),
                                   at::cuda::getCurrentCUDAStream()),
        "poison scan");
  const torch::Tensor host = result.cpu();  // two words
  ScanResult r;
  r.count = host[0].item<std::int64_t>();
  const std::int64_t first = host[1].item<std::int64_t>();
  r.first = first == std::numeric_limits<std::int64_t>::max() ? -1 : first;
  return r;
}

}  // namespace

void fill_bytes(const torch::Tensor& t, std::uint8_t byte) {
  TORCH_CHECK(t.is_cuda() && t.is_contiguous(),
              "graphcheck: fill_bytes needs a contiguous CUDA tensor");
  const c10::cuda::CUDAGuard guard(t.device());
  check(
      kernels::cuda::poison_fill(t.data_ptr(), t.nbytes(), byte, at::cuda::getCurrentCUDAStream()),
      "poison fill");
}

ScanResult scan_poison(const torch::Tensor& t, const torch::Tensor& expected, std::uint8_t byte) {
  TORCH_CHECK(t.is_cuda() && t.is_contiguous(),
              "graphcheck: scan_poison needs a contiguous CUDA tensor");
  if (expected.defined() && !(expected.device() == t.device() && expected.is_contiguous())) {
    return detail::scan_poison_in_pieces(t, expected, byte, kDevicePieceBytes);
  }
  const c10::cuda::CUDAGuard guard(t.device());
  torch::Tensor result = torch::empty({2}, t.options().dtype(torch::kInt64));
  return scan_run(t.data_ptr(), expected.defined() ? expected.data_ptr() : nullptr, t.numel(), t.element_size(),
                  byte, result);
}

std::uint64_t fingerprint(const torch::Tensor& tensor) {
  TORCH_CHECK(tensor.is_cuda(), "graphcheck: fingerprint of a CUDA tensor expected");
  if (!tensor.is_contiguous()) return detail::fingerprint_in_pieces(tensor, kDevicePieceBytes);
  const c10::cuda::CUDAGuard guard(tensor.device());
  torch::Tensor result = torch::empty({3}, tensor.options().dtype(torch::kInt64));
  check(kernels::cuda::fingerprint(tensor.data_ptr(), tensor.nbytes(),
                                   reinterpret_cast<unsigned long long*>(result.data_ptr()),
                                   at::cuda::getCurrentCUDAStream()),
        "fingerprint");
  return static_cast<std::uint64_t>(result[0].item<std::int64_t>());
}

namespace detail {

// Note [Device scans in pieces]: an expected value elsewhere (the census's checkpoint record, on
// the host) or in another layout was copied to the device whole, a second tensor of the region's
// size in device memory; now a piece of it at a time, at most `budget` bytes, into one buffer,
// scanned beside the same piece of `t` (contiguous, so each piece lies where it is), and only
// where `t` holds the pattern at all.
ScanResult scan_poison_in_pieces(const torch::Tensor& t, const torch::Tensor& expected, std::uint8_t byte,
                                 std::int64_t budget) {
  TORCH_CHECK(t.is_cuda() && t.is_contiguous(), "graphcheck: scan_poison needs a contiguous CUDA tensor");
  TORCH_CHECK(expected.defined() && expected.sizes() == t.sizes() && expected.scalar_type() == t.scalar_type(),
              "graphcheck: scan_poison's expected value must have the tensor's shape and dtype");
  const c10::cuda::CUDAGuard guard(t.device());
  torch::Tensor result = torch::empty({2}, t.options().dtype(torch::kInt64));
  // A region that holds the pattern nowhere (a clean load) has no survivor, whatever its expected
  // value holds (Note [Scans in storage order], poison.cpp): no copy of the expected value at all.
  ScanResult total;
  if (scan_run(t.data_ptr(), nullptr, t.numel(), t.element_size(), byte, result).count == 0) return total;
  PieceBuffer buffer(expected, budget, t.device());
  for_each_piece(t.sizes(), static_cast<std::int64_t>(t.element_size()), budget, [&](const TensorPiece& p) {
    const torch::Tensor piece = p.of(t);
    const torch::Tensor e = buffer.copy(p.of(expected));
    const ScanResult r = scan_run(piece.data_ptr(), e.data_ptr(), piece.numel(), t.element_size(), byte, result);
    if (r.first >= 0 && total.first < 0) total.first = p.first + r.first;  // pieces come in logical order
    total.count += r.count;
  });
  return total;
}

// Note [Device fingerprints in pieces] (kernels/fingerprint_lanes.h).
std::uint64_t fingerprint_in_pieces(const torch::Tensor& t, std::int64_t budget) {
  TORCH_CHECK(t.is_cuda(), "graphcheck: fingerprint of a CUDA tensor expected");
  const c10::cuda::CUDAGuard guard(t.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  torch::Tensor sums = torch::zeros({2}, t.options().dtype(torch::kInt64));
  auto* device_sums = reinterpret_cast<unsigned long long*>(sums.data_ptr());
  PieceBuffer buffer(t, budget, t.device());
  kernels::lanes::LaneAssembler lanes;
  for_each_piece(t.sizes(), static_cast<std::int64_t>(t.element_size()), budget, [&](const TensorPiece& p) {
    // As contiguous() did for the whole: conjugate and negative bits resolved in any copy.
    torch::Tensor piece = p.of(t);
    if (!piece_reads_in_place(piece, t)) piece = buffer.copy(piece);
    const auto* base = static_cast<const std::uint8_t*>(piece.data_ptr());
    lanes.add(
        static_cast<std::uint64_t>(piece.nbytes()),
        [&](std::uint64_t offset, std::uint64_t bytes, std::uint64_t first_lane) {
          check(kernels::cuda::fingerprint_lanes(base + offset, bytes, first_lane, device_sums, stream),
                "fingerprint");
        },
        [&](std::uint64_t offset, std::uint64_t bytes, unsigned char* out) {
          cudaError_t err = cudaMemcpyAsync(out, base + offset, bytes, cudaMemcpyDeviceToHost, stream);
          if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
          TORCH_CHECK(err == cudaSuccess, "graphcheck: fingerprint: copying ", bytes,
                      " bytes of a piece to the host failed: ", cudaGetErrorString(err));
        });
  });
  const torch::Tensor host = sums.cpu();
  kernels::lanes::Sums device;
  device.sum = static_cast<unsigned long long>(host[0].item<std::int64_t>());
  device.xr = static_cast<unsigned long long>(host[1].item<std::int64_t>());
  return lanes.finish(device);
}

}  // namespace detail

}  // namespace graphcheck::cuda_ops
