#include "fingerprint.h"

#include <xxhash.h>

#if GRAPHCHECK_HAS_CUDA
#include "backends/cuda_tensor_ops.h"  // CUDA tensors: hashed on the device
#endif

namespace graphcheck {

std::uint64_t fingerprint(const torch::Tensor& tensor) {
  if (!tensor.defined()) return 0;
#if GRAPHCHECK_HAS_CUDA
  if (tensor.is_cuda()) return cuda_ops::fingerprint(tensor);
#endif
  const torch::Tensor t = tensor.is_contiguous() ? tensor : tensor.contiguous();
  if (t.nbytes() == 0) return XXH3_64bits(nullptr, 0);
  return XXH3_64bits(t.data_ptr(), t.nbytes());
}

std::uint64_t fingerprint_bytes(const void* data, std::size_t bytes) { return XXH3_64bits(data, bytes); }

}  // namespace graphcheck
