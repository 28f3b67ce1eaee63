#include "poison.h"

#include <torch/nn/module.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <cstring>

#include "byte_scan.h"

#if GRAPHCHECK_HAS_CUDA
#include "backends/cuda_tensor_ops.h"  // CUDA tensors: the harness's own kernels
#endif

namespace graphcheck {

std::uint8_t poison_byte(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::Float8_e4m3fnuz:
    case c10::ScalarType::Float8_e5m2fnuz:
      return 0x80;  // their only NaN
    default:
      return 0xFF;
  }
}

bool poison_is_nan(c10::ScalarType dtype) { return c10::isFloatingType(dtype); }

namespace {
bool comparable(const torch::Tensor& t, const torch::Tensor& expected) {
  return expected.defined() && expected.scalar_type() == t.scalar_type() && expected.sizes() == t.sizes();
}

// A CPU tensor whose elements are exactly the nbytes from its first one, in some order (dense:
// contiguous, or a permuted view such as a transposed weight), stored as their values (no conj or
// neg bit, which torch does not view as bytes).
bool dense_cpu_bytes(const torch::Tensor& t) {
  return t.device().is_cpu() && t.is_non_overlapping_and_dense() && !t.is_conj() && !t.is_neg();
}
}  // namespace

torch::Tensor element_bytes(const torch::Tensor& t) {
  torch::Tensor c = t.contiguous().reshape({t.numel()});
  return c.view(torch::kUInt8).reshape({t.numel(), static_cast<std::int64_t>(c.element_size())});
}

void fill_poison(torch::Tensor t) {
  if (!t.defined() || t.numel() == 0) return;
  torch::NoGradGuard no_grad;
  const std::uint8_t byte = poison_byte(t.scalar_type());
#if GRAPHCHECK_HAS_CUDA
  if (t.is_cuda() && t.is_contiguous()) return cuda_ops::fill_bytes(t, byte);
#endif
  if (t.is_contiguous() && t.device().is_cpu()) {
    // libc's memset: non-temporal stores above the cache's size, 1.3x libtorch's fill_ there.
    std::memset(t.data_ptr(), byte, t.nbytes());
  } else if (t.is_contiguous()) {
    t.reshape({t.numel()}).view(torch::kUInt8).fill_(byte);
  } else if (dense_cpu_bytes(t)) {
    // A permuted dense view (a transposed weight, a stack of them) holds exactly the nbytes from
    // its first element, in some order: memset, as a contiguous one. Its copy from a poisoned
    // tensor of its size ran at 0.2 GB/s on a transposed stack of bfloat16 matrices.
    std::memset(t.data_ptr(), byte, t.nbytes());
  } else if (t.stride(-1) == 1 && !t.is_conj() && !t.is_neg()) {  // (torch views no conj/neg view as bytes)
    // Rows with gaps between them (a column slice): their bytes, with no tensor of the view's size.
    t.view(torch::kUInt8).fill_(byte);
  } else {
    torch::Tensor src = torch::empty(t.sizes(), t.options());
    src.reshape({src.numel()}).view(torch::kUInt8).fill_(byte);
    t.copy_(src);
  }
}

void fill_storage(const c10::Storage& storage, std::uint8_t byte) {
  if (storage.nbytes() == 0) return;
  torch::Tensor bytes = torch::empty({0}, torch::TensorOptions().dtype(torch::kUInt8).device(storage.device()));
  bytes.set_(storage, 0, {static_cast<std::int64_t>(storage.nbytes())}, {1});
#if GRAPHCHECK_HAS_CUDA
  if (bytes.is_cuda()) return cuda_ops::fill_bytes(bytes, byte);
#endif
  bytes.fill_(byte);
}

namespace {

// `t`'s elements as one contiguous CPU array: `t` itself when it is one, else a copy (kept alive
// by the returned tensor).
torch::Tensor dense_cpu(const torch::Tensor& t) {
  torch::Tensor c = t.device().is_cpu() ? t : t.to(torch::kCPU);
  return c.is_contiguous() ? c : c.contiguous();
}

// Note [Scans in storage order]: a dense CPU view that is not contiguous (a transposed weight
// after PWAL) holds exactly its nbytes from its first element, in some order; where its expected
// value (model B's tensor of the same name, a region of it) has the same strides, or there is
// none, the two hold each element at the same place, so a count can read both in storage order.
// Before, each was copied into logical order first: two transposing copies of the tensor's size
// for a scan that reads it once. Conjugate and negative views are left to the copies.
bool same_dense_layout(const torch::Tensor& t, const torch::Tensor& expected) {
  if (t.is_contiguous() || !dense_cpu_bytes(t)) return false;
  if (!comparable(t, expected)) return true;
  return dense_cpu_bytes(expected) && expected.strides() == t.strides();
}

// The expected value, comparable with `t`, as a dense CPU array; undefined when not comparable.
torch::Tensor dense_expected(const torch::Tensor& t, const torch::Tensor& expected) {
  return comparable(t, expected) ? dense_cpu(expected) : torch::Tensor();
}

}  // namespace

torch::Tensor survivor_mask(const torch::Tensor& t, const torch::Tensor& expected) {
  torch::Tensor mask = torch::zeros({t.numel()}, torch::kBool);
  if (t.numel() == 0) return mask;
  const torch::Tensor a = dense_cpu(t);
  const torch::Tensor e = dense_expected(t, expected);
  const std::uint8_t byte = poison_byte(t.scalar_type());
  // Where the expected value itself is the pattern, holding it is no evidence.
  scan::mask_pattern(a.data_ptr(), e.defined() ? e.data_ptr() : nullptr, t.numel(), t.element_size(), byte,
                     mask.data_ptr<bool>());
  if (!e.defined() && !poison_is_nan(t.scalar_type())) {
    // A sentinel without a reference: only a tensor that kept it everywhere is evidence.
    if (scan::count_pattern(a.data_ptr(), nullptr, t.numel(), t.element_size(), byte) != t.numel()) mask.zero_();
  }
  return mask.to(t.device());
}

Survivors count_survivors(const torch::Tensor& t, const torch::Tensor& expected) {
  Survivors s;
  s.elements = t.numel();
  if (comparable(t, expected)) {
    s.basis = "elements holding the poison where the expected value does not";
  } else if (poison_is_nan(t.scalar_type())) {
    s.basis = "elements holding the poison pattern (NaN)";
  } else {
    s.basis = "no expected value to compare with: counted only when every element kept the sentinel";
  }
  if (s.elements == 0) return s;
#if GRAPHCHECK_HAS_CUDA
  const auto width = t.element_size();
  if (t.is_cuda() && t.is_contiguous() && (width == 1 || width == 2 || width == 4 || width == 8)) {
    const bool with_expected = comparable(t, expected);
    const cuda_ops::ScanResult r =
        cuda_ops::scan_poison(t, with_expected ? expected : torch::Tensor(), poison_byte(t.scalar_type()));
    s.count = r.count;
    s.first = r.first;
    if (!with_expected && !poison_is_nan(t.scalar_type()) && s.count != s.elements) s.count = 0, s.first = -1;
    return s;
  }
#endif
  if (same_dense_layout(t, expected)) {
    // Note [Scans in storage order]: a count needs no order. Where nothing survives (a clean
    // load), that is the answer; otherwise the first survivor's index is a logical one, and the
    // scan below gives it.
    s.count = scan::count_pattern(t.data_ptr(), comparable(t, expected) ? expected.data_ptr() : nullptr, t.numel(),
                                  t.element_size(), poison_byte(t.scalar_type()));
    if (s.count == 0) return s;
  }
  const torch::Tensor a = dense_cpu(t);
  const torch::Tensor e = dense_expected(t, expected);
  s.count = scan::count_pattern(a.data_ptr(), e.defined() ? e.data_ptr() : nullptr, t.numel(), t.element_size(),
                                poison_byte(t.scalar_type()), &s.first);
  if (!e.defined() && !poison_is_nan(t.scalar_type()) && s.count != s.elements) {
    s.count = 0;
    s.first = -1;
  }
  return s;
}

torch::Tensor pattern_mask(const torch::Tensor& t) {
  torch::Tensor mask = torch::zeros({t.numel()}, torch::kBool);
  if (t.numel() == 0) return mask;
  const torch::Tensor a = dense_cpu(t);
  scan::mask_pattern(a.data_ptr(), nullptr, t.numel(), t.element_size(), poison_byte(t.scalar_type()),
                     mask.data_ptr<bool>());
  return mask.to(t.device());
}

}  // namespace graphcheck
