#pragma once
// Writing a graph's static buffers: the inputs before a replay, the outputs after it on the
// emulated backend. A small forward's replay is a few microseconds, and libtorch's copy_ costs
// about one of them in dispatch and TensorIterator setup for each buffer (bench/harness_bench
// BM_ReplayVsEager: the fixtures of a few ops ran 1.2-1.35x their eager forward, most of it the
// input and output copies). Same-layout dense CPU buffers are copied by memcpy instead; anything
// else (another device, dtype, shape or layout) goes through copy_ as before.

#include <torch/types.h>

#include <cstring>

namespace graphcheck {

inline void copy_static(const torch::Tensor& dst, const torch::Tensor& src) {
  const bool plain = dst.device().is_cpu() && src.device().is_cpu() && dst.scalar_type() == src.scalar_type() &&
                     dst.sizes() == src.sizes() && dst.is_contiguous() && src.is_contiguous() && !dst.is_neg() &&
                     !src.is_neg() && !dst.is_conj() && !src.is_conj() && dst.layout() == torch::kStrided &&
                     src.layout() == torch::kStrided;
  if (!plain) {
    const_cast<torch::Tensor&>(dst).copy_(src);
    return;
  }
  const std::size_t bytes = dst.nbytes();
  if (bytes == 0) return;
  void* to = dst.data_ptr();
  const void* from = src.data_ptr();
  if (to != from) std::memmove(to, from, bytes);  // memmove: the two may overlap
  // As copy_ would: a write is a write to whoever watches the version counter (write_count.h).
  if (!dst.is_inference()) dst.unsafeGetTensorImpl()->bump_version();
}

}  // namespace graphcheck
