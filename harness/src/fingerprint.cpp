#include "fingerprint.h"

#include <xxhash.h>

namespace graphcheck {

std::uint64_t fingerprint(const torch::Tensor& tensor) {
  if (!tensor.defined()) return 0;
  const torch::Tensor t = tensor.is_contiguous() ? tensor : tensor.contiguous();
  if (t.nbytes() == 0) return XXH3_64bits(nullptr, 0);
  return XXH3_64bits(t.data_ptr(), t.nbytes());
}

std::uint64_t fingerprint_bytes(const void* data, std::size_t bytes) { return XXH3_64bits(data, bytes); }

}  // namespace graphcheck
