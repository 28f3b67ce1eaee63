#include "fingerprint.h"

#include <xxhash.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "graphcheck/checkpoint.h"

#if GRAPHCHECK_HAS_CUDA
#include "backends/cuda_tensor_ops.h"  // CUDA tensors: hashed on the device
#endif

namespace graphcheck {
namespace {

struct StateDeleter {
  void operator()(XXH3_state_t* s) const { XXH3_freeState(s); }
};

std::unique_ptr<XXH3_state_t, StateDeleter> new_state() {
  std::unique_ptr<XXH3_state_t, StateDeleter> s(XXH3_createState());
  if (!s || XXH3_64bits_reset(s.get()) != XXH_OK) throw std::bad_alloc();
  return s;
}

// Rows of a non-contiguous view are copied this many bytes at a time: the copy stays in cache and
// no second tensor of the view's size is ever allocated.
constexpr std::int64_t kChunkBytes = 1 << 20;

}  // namespace

std::uint64_t fingerprint(const torch::Tensor& tensor) {
  if (!tensor.defined()) return 0;
#if GRAPHCHECK_HAS_CUDA
  if (tensor.is_cuda()) return cuda_ops::fingerprint(tensor);
#endif
  const torch::Tensor t = tensor.device().is_cpu() ? tensor : tensor.to(torch::kCPU);
  if (t.nbytes() == 0) return XXH3_64bits(nullptr, 0);
  if (t.is_contiguous()) return XXH3_64bits(t.data_ptr(), t.nbytes());
  if (t.is_non_overlapping_and_dense()) {
    // A permuted dense view (a transposed weight): libtorch's blocked transposing copy beats
    // gathering it a few rows at a time (measured: bench/harness_bench BM_FingerprintTransposed).
    const torch::Tensor c = t.contiguous();
    return XXH3_64bits(c.data_ptr(), c.nbytes());
  }
  auto state = new_state();
  // A view with gaps or overlaps (a slice, an expanded row): the logical order, a few rows at a
  // time; the same digest as hashing a contiguous copy, without allocating one of its full size
  // (an expanded view's can be far larger than its storage).
  const std::int64_t rows = t.size(0);
  const std::int64_t row_bytes = std::max<std::int64_t>(1, static_cast<std::int64_t>(t.nbytes()) / rows);
  const std::int64_t step = std::max<std::int64_t>(1, kChunkBytes / row_bytes);
  std::vector<std::int64_t> shape = t.sizes().vec();
  shape[0] = std::min(step, rows);
  const torch::Tensor buffer = torch::empty(shape, t.options());  // reused: no page faults per chunk
  for (std::int64_t r = 0; r < rows; r += step) {
    const std::int64_t n = std::min(step, rows - r);
    torch::Tensor chunk = buffer.narrow(0, 0, n);
    chunk.copy_(t.narrow(0, r, n));
    XXH3_64bits_update(state.get(), chunk.data_ptr(), chunk.nbytes());
  }
  return XXH3_64bits_digest(state.get());
}

std::uint64_t fingerprint_bytes(const void* data, std::size_t bytes) { return XXH3_64bits(data, bytes); }

std::uint64_t tensor_fingerprint(const torch::Tensor& tensor) { return fingerprint(tensor); }

}  // namespace graphcheck
