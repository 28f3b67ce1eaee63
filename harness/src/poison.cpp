#include "poison.h"

#include <torch/nn/module.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <array>
#include <cstddef>
#include <cstring>
#include <vector>

#include "byte_scan.h"
#include "tensor_pieces.h"

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

// Note [Scans in logical order]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Where storage order will not do (a survivor's logical index is wanted, or the expected value
// lies in another layout), a scan reads `t` and its expected value side by side in logical order,
// as runs of contiguous CPU elements:
//  - both contiguous (or no expected value): one run, where they lie;
//  - both storing each row of the innermost dim contiguously, rows of at least kMinRowBytes (a
//    shard of dim 1: the census's live region of a fused tensor, against its checkpoint record):
//    each row, where it lies, short rows four at a time in bands (so the runs come out of order:
//    a scan's first survivor is the least index found);
//  - anything else (a transposed shard against its record, a device's tensor): pieces of at most
//    kPieceBytes, copied in logical order into a buffer of that size (Note [Pieces in logical
//    order]).
// Before, every such scan first copied `t`, and an expected value that was not contiguous, into
// logical order whole: tensors of the region's size for as long as the scan ran.
constexpr std::int64_t kPieceBytes = 1 << 20;
constexpr std::int64_t kMinRowBytes = 256;
constexpr std::size_t kRowStreams = 4;
constexpr std::int64_t kRowBandBytes = 512;
constexpr std::int64_t kLongRowBytes = std::int64_t{1} << 18;  // read as four streams by the scan itself

// Whether x stores each row of its innermost dim contiguously, where a scan can read it as bytes.
bool rows_in_place(const torch::Tensor& x) {
  return x.device().is_cpu() && x.dim() >= 1 && x.stride(-1) == 1 && !x.is_conj() && !x.is_neg();
}

// Calls fn(data, expected data or nullptr, n, first) for runs of `t`'s elements that cover it once,
// in no set order, `first` the logical index of a run's first element, each with the expected
// value's elements at the same indices. `expected`: comparable with `t`, or undefined.
template <class Fn>
void for_each_run(const torch::Tensor& t, const torch::Tensor& expected, Fn&& fn) {
  const bool with_expected = expected.defined();
  const auto direct = [](const torch::Tensor& x) { return x.device().is_cpu() && x.is_contiguous(); };
  if (direct(t) && (!with_expected || direct(expected))) {
    return fn(t.data_ptr(), with_expected ? expected.data_ptr() : nullptr, t.numel(), std::int64_t{0});
  }
  const std::int64_t width = static_cast<std::int64_t>(t.element_size());
  const std::int64_t row = t.dim() >= 1 ? t.size(-1) : 0;
  if (rows_in_place(t) && (!with_expected || rows_in_place(expected)) && row * width >= kMinRowBytes) {
    const auto* a = static_cast<const std::byte*>(t.data_ptr());
    const auto* e = with_expected ? static_cast<const std::byte*>(expected.data_ptr()) : nullptr;
    // Note [Scans read four streams], for rows: short rows are read four side by side, a band of
    // 512 bytes of each in turn, so that one core keeps four streams of lines in flight, not one
    // that starts anew at every row. A shard's rows of 4 KiB (each starts a page) read one by one
    // ran at 0.69-0.75x memcpy at 256 MiB and 1 GiB, four side by side at 0.85-0.9x at 256 MiB
    // (bench/harness_bench BM_PoisonScanVsRecord/256/1; whole rows four at a time, 0.68-0.71x;
    // eight rows in bands of 256 to 1,024 bytes, 0.7-0.94x).
    struct Row {
      std::int64_t at, at_expected, first;
    };
    std::array<Row, kRowStreams> group{};
    std::size_t grouped = 0;
    const std::int64_t band = std::max<std::int64_t>(1, kRowBandBytes / width);
    const auto flush = [&] {
      if (grouped == 1 || row * width >= kLongRowBytes) {
        for (std::size_t k = 0; k < grouped; ++k) {
          fn(a + group[k].at * width, e ? e + group[k].at_expected * width : nullptr, row, group[k].first);
        }
      } else {
        for (std::int64_t off = 0; off < row; off += band) {
          const std::int64_t n = std::min(band, row - off);
          for (std::size_t k = 0; k < grouped; ++k) {
            fn(a + (group[k].at + off) * width, e ? e + (group[k].at_expected + off) * width : nullptr, n,
               group[k].first + off);
          }
        }
      }
      grouped = 0;
    };
    std::int64_t first = 0;  // the logical index of the next row's first element
    const c10::IntArrayRef strides_expected = with_expected ? expected.strides() : t.strides();
    for_each_outer<2>(t.sizes(), {t.strides(), strides_expected}, static_cast<std::size_t>(t.dim() - 1),
                      [&](const std::array<std::int64_t, 2>& at) {
                        group[grouped++] = {at[0], at[1], first};
                        first += row;
                        if (grouped == group.size()) flush();
                      });
    if (grouped > 0) flush();
    return;
  }
  // A device's piece is copied to the host; a CPU piece where piece_reads_in_place() says so.
  const auto copied = [&](const torch::Tensor& piece, const torch::Tensor& whole) {
    return !piece.device().is_cpu() || !piece_reads_in_place(piece, whole);
  };
  PieceBuffer own(t, kPieceBytes);
  PieceBuffer theirs(t, kPieceBytes);
  for_each_piece(t.sizes(), width, kPieceBytes, [&](const TensorPiece& p) {
    torch::Tensor a = p.of(t);
    if (copied(a, t)) a = own.copy(a);
    torch::Tensor e;
    if (with_expected) {
      e = p.of(expected);
      if (copied(e, expected)) e = theirs.copy(e);
    }
    fn(a.data_ptr(), with_expected ? e.data_ptr() : nullptr, a.numel(), p.first);
  });
}

// The expected value, where it is comparable with `t`; undefined otherwise.
torch::Tensor comparable_expected(const torch::Tensor& t, const torch::Tensor& expected) {
  return comparable(t, expected) ? expected : torch::Tensor();
}

}  // namespace

torch::Tensor survivor_mask(const torch::Tensor& t, const torch::Tensor& expected) {
  torch::Tensor mask = torch::zeros({t.numel()}, torch::kBool);
  if (t.numel() == 0) return mask;
  const torch::Tensor e = comparable_expected(t, expected);
  const std::uint8_t byte = poison_byte(t.scalar_type());
  bool* out = mask.data_ptr<bool>();
  std::int64_t pattern = 0;
  // Where the expected value itself is the pattern, holding it is no evidence.
  for_each_run(t, e, [&](const void* a, const void* ea, std::int64_t n, std::int64_t first) {
    scan::mask_pattern(a, ea, n, t.element_size(), byte, out + first);
    if (!e.defined() && !poison_is_nan(t.scalar_type())) pattern += scan::count_pattern(a, nullptr, n, t.element_size(), byte);
  });
  // A sentinel without a reference: only a tensor that kept it everywhere is evidence.
  if (!e.defined() && !poison_is_nan(t.scalar_type()) && pattern != t.numel()) mask.zero_();
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
  } else if (dense_cpu_bytes(t) && comparable(t, expected) &&
             !(t.is_contiguous() && expected.device().is_cpu() && expected.is_contiguous())) {
    // Note [Scans in storage order]: an element that does not hold the pattern survives against
    // no expected value, so a tensor that holds it nowhere (a clean load) has no survivor,
    // whatever layout its expected value lies in, and the tensor alone, read in storage order,
    // says so. Otherwise the scan below pairs the two in logical order. (The census's transposed
    // region against its row-major checkpoint record went through the transposing copy below at
    // 3.2 GB/s, and before that through copies of its full size at 1.3 GB/s.)
    if (scan::count_pattern(t.data_ptr(), nullptr, t.numel(), t.element_size(), poison_byte(t.scalar_type())) == 0) {
      return s;
    }
  }
  const torch::Tensor e = comparable_expected(t, expected);
  s.count = 0;
  for_each_run(t, e, [&](const void* a, const void* ea, std::int64_t n, std::int64_t first) {
    std::int64_t at = -1;
    s.count += scan::count_pattern(a, ea, n, t.element_size(), poison_byte(t.scalar_type()), &at);
    if (at >= 0 && (s.first < 0 || first + at < s.first)) s.first = first + at;  // runs come in any order
  });
  if (!e.defined() && !poison_is_nan(t.scalar_type()) && s.count != s.elements) {
    s.count = 0;
    s.first = -1;
  }
  return s;
}

torch::Tensor pattern_mask(const torch::Tensor& t) {
  torch::Tensor mask = torch::zeros({t.numel()}, torch::kBool);
  if (t.numel() == 0) return mask;
  bool* out = mask.data_ptr<bool>();
  for_each_run(t, torch::Tensor(), [&](const void* a, const void*, std::int64_t n, std::int64_t first) {
    scan::mask_pattern(a, nullptr, n, t.element_size(), poison_byte(t.scalar_type()), out + first);
  });
  return mask.to(t.device());
}

}  // namespace graphcheck
