#pragma once
// A tensor taken a bounded piece at a time, in logical order: what the fingerprint and the poison
// scans copy of a view they cannot read where it lies (Note [Pieces in logical order]).

#include <torch/types.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

namespace graphcheck {

// The pieces the harness's own work on a device takes a tensor in: a view that is not contiguous
// fingerprinted, a scan's expected value that is not on the device in the tensor's layout copied
// (Note [Device fingerprints in pieces], Note [Device scans in pieces]), and a quarter of it the
// coverage perturbation's pieces (passes/coverage.cpp): device memory for a piece, or a few,
// instead of a copy of the whole.
constexpr std::int64_t kDevicePieceBytes = std::int64_t{64} << 20;

// Note [Pieces in logical order]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A view that is not contiguous (a transposed weight, a column slice, an expanded view) is read
// in logical order by copying it, and a copy of its full size is a second tensor as large as the
// view (larger than its storage, for an expanded one) for as long as the read runs. So it is taken
// a piece at a time instead: a few rows of dim 0 whose bytes fit a budget, and where one row alone
// is larger than the budget, that row's own rows, one leading index at a time. Every piece but a
// whole tensor within the budget fits it, so one buffer of the budget's size holds any of them.
// The pieces cover the view exactly once, in logical order: the fingerprint of the pieces' bytes
// in turn is the fingerprint of the contiguous copy, and a piece's first element has a known
// logical index.
struct TensorPiece {
  std::vector<std::int64_t> selected;  // indices of the leading dims, taken one at a time
  std::int64_t start = 0;              // the rows of the next dim the piece takes
  std::int64_t length = -1;            // -1: a 0-dim tensor, taken whole
  std::int64_t first = 0;              // the logical (flat) index of the piece's first element

  // The piece of `x`, a tensor of the sizes the pieces were made for.
  [[nodiscard]] torch::Tensor of(const torch::Tensor& x) const {
    torch::Tensor v = x;
    for (const std::int64_t i : selected) v = v.select(0, i);
    return length < 0 ? v : v.narrow(0, start, length);
  }
};

namespace detail {
template <class Fn>
void visit_pieces(c10::IntArrayRef sizes, std::int64_t element_size, std::int64_t budget, TensorPiece& piece,
                  std::int64_t first, Fn& fn) {
  std::int64_t numel = 1;
  for (const std::int64_t s : sizes) numel *= s;
  if (sizes.empty() || numel * element_size <= budget) {
    piece.start = 0;
    piece.length = sizes.empty() ? -1 : sizes[0];
    piece.first = first;
    fn(static_cast<const TensorPiece&>(piece));
    return;
  }
  const std::int64_t rows = sizes[0];
  const std::int64_t row_elements = numel / rows;
  if (row_elements * element_size > budget && sizes.size() > 1) {
    for (std::int64_t r = 0; r < rows; ++r) {
      piece.selected.push_back(r);
      visit_pieces(sizes.slice(1), element_size, budget, piece, first + r * row_elements, fn);
      piece.selected.pop_back();
    }
    return;
  }
  const std::int64_t step = std::max<std::int64_t>(1, budget / (row_elements * element_size));
  for (std::int64_t r = 0; r < rows; r += step) {
    piece.start = r;
    piece.length = std::min(step, rows - r);
    piece.first = first + r * row_elements;
    fn(static_cast<const TensorPiece&>(piece));
  }
}
}  // namespace detail

// Calls fn(const TensorPiece&) for each piece of a tensor of `sizes`, in logical order (Note
// [Pieces in logical order]). A piece holds at most `budget` bytes, unless the whole tensor does.
template <class Fn>
void for_each_piece(c10::IntArrayRef sizes, std::int64_t element_size, std::int64_t budget, Fn&& fn) {
  TensorPiece piece;
  detail::visit_pieces(sizes, element_size, budget, piece, 0, fn);
}

// Whether a piece of `whole` (a view of it, on its device) is read as its bytes where it lies: a
// contiguous piece is, unless it views a conjugate or negative tensor that is not contiguous as a
// whole, whose copy of the whole resolved those bits (a tensor contiguous as a whole is read as its
// bytes). Any other piece is copied (PieceBuffer::copy resolves them).
inline bool piece_reads_in_place(const torch::Tensor& piece, const torch::Tensor& whole) {
  return piece.is_contiguous() && (whole.is_contiguous() || !(piece.is_conj() || piece.is_neg()));
}

// Calls fn(at) for every index of the first `outer` dims of `sizes`, in logical order (the last of
// them fastest), `at[k]` the element offset of that index under `strides[k]`: the runs of the
// innermost dims that the fingerprint hashes where they lie (one stride set) and the rows that a
// poison scan reads beside its expected value's (two). An odometer: one add per index and stride
// set, not a product per dim.
template <std::size_t N, class Fn>
void for_each_outer(c10::IntArrayRef sizes, const std::array<c10::IntArrayRef, N>& strides, std::size_t outer,
                    Fn&& fn) {
  std::int64_t count = 1;
  for (std::size_t d = 0; d < outer; ++d) count *= sizes[d];
  std::vector<std::int64_t> index(outer, 0);
  std::array<std::int64_t, N> at{};
  for (std::int64_t i = 0; i < count; ++i) {
    fn(static_cast<const std::array<std::int64_t, N>&>(at));
    for (std::size_t d = outer; d-- > 0;) {
      for (std::size_t k = 0; k < N; ++k) at[k] += strides[k][d];
      if (++index[d] < sizes[d]) break;
      for (std::size_t k = 0; k < N; ++k) at[k] -= strides[k][d] * sizes[d];
      index[d] = 0;
    }
  }
}

// A buffer for the pieces of one tensor: a piece copied into it is contiguous, on `device` (the
// host unless told), in the tensor's dtype. Allocated once, at the first piece (no page faults per
// piece).
class PieceBuffer {
 public:
  PieceBuffer(const torch::Tensor& t, std::int64_t budget, torch::Device device = torch::kCPU)
      : m_elements(std::min<std::int64_t>(t.numel(), std::max<std::int64_t>(1, budget / t.element_size()))),
        m_options(t.options().device(device)) {}

  // `piece` copied into the buffer (conjugate and negative views resolved; to the buffer's device);
  // the result is valid until the next call.
  [[nodiscard]] torch::Tensor copy(const torch::Tensor& piece) {
    if (!m_buffer.defined()) m_buffer = torch::empty({m_elements}, m_options);
    torch::Tensor out = m_buffer.narrow(0, 0, piece.numel()).view(piece.sizes());
    // A CPU piece whose innermost two dims are column-major (rows of a transposed weight) is copied
    // a band of columns at a time: libtorch's copy of the whole piece reads one element of every
    // column per row it writes, and ran at 0.55 GB/s on rows of 1,024 float32 columns; bands of
    // 256 bytes per row read runs of each column, at about 3.5 GB/s (bench/harness_bench
    // BM_PoisonScanVsRecord).
    const std::int64_t band = std::max<std::int64_t>(1, kBandBytes / piece.element_size());
    if (piece.device().is_cpu() && piece.dim() >= 2 && piece.stride(-2) == 1 && piece.stride(-1) != 1 &&
        piece.size(-1) > band) {
      for (std::int64_t c = 0; c < piece.size(-1); c += band) {
        const std::int64_t n = std::min(band, piece.size(-1) - c);
        out.narrow(-1, c, n).copy_(piece.narrow(-1, c, n));
      }
      return out;
    }
    out.copy_(piece);
    return out;
  }

 private:
  static constexpr std::int64_t kBandBytes = 256;
  std::int64_t m_elements;
  torch::TensorOptions m_options;
  torch::Tensor m_buffer;
};

}  // namespace graphcheck
