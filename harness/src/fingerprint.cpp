#include "fingerprint.h"

// Inlined: the shared library's build hashes at 0.6x memcpy from memory, the inlined one with
// prefetching at 0.8-0.9x (bench/harness_bench BM_Fingerprint, 256 MiB and 1 GiB).
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <cstdint>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <memory>
#include <vector>

#include "graphcheck/checkpoint.h"
#include "prefetch.h"
#include "tensor_pieces.h"
#include "xxh3_columns.h"
#include "xxh3_wide.h"

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

// Contiguous bytes larger than this are hashed a block at a time, the next block prefetched while
// this one is hashed: the hash's arithmetic and the memory reads overlap. The digest is the same
// as hashing them in one call (XXH3's streaming and one-shot forms agree).
constexpr std::size_t kPrefetchBlock = std::size_t{1} << 16;

void update_prefetched(XXH3_state_t* state, const std::byte* data, std::size_t bytes) {
  for (std::size_t at = 0; at < bytes; at += kPrefetchBlock) {
    const std::size_t next = at + kPrefetchBlock;
    prefetch_lines(data, next, next + kPrefetchBlock, bytes);
    XXH3_64bits_update(state, data + at, std::min(kPrefetchBlock, bytes - at));
  }
}

std::uint64_t hash_contiguous(const void* data, std::size_t bytes) {
  // AVX2 where the CPU has it (xxh3_wide.h): the same digest.
  if (bytes >= 4096 && detail::xxh3_avx2_available()) return detail::xxh3_avx2(data, bytes);
  if (bytes <= 4 * kPrefetchBlock) return XXH3_64bits(data, bytes);
  auto state = new_state();
  update_prefetched(state.get(), static_cast<const std::byte*>(data), bytes);
  return XXH3_64bits_digest(state.get());
}

// The gather's inner step for 4-byte elements: 4x4 blocks moved by four loads, a register
// transpose and four stores, not sixteen of each (the scalar gather ran at 0.2-0.3x memcpy on a
// transposed float matrix). Rows [0, returned) of the tile are written when `width` is a
// multiple of 4; the caller gathers the rest element by element.
template <class U>
std::int64_t transpose_4x4_blocks(const U* src, std::int64_t col_stride, U* dst, std::int64_t pitch, std::int64_t n,
                                  std::int64_t width) {
#if defined(__SSE2__)
  static_assert(sizeof(U) == 4);
  if (width % 4 != 0) return 0;
  const std::int64_t rows = n / 4 * 4;
  for (std::int64_t k = 0; k < rows; k += 4) {
    for (std::int64_t c = 0; c < width; c += 4) {
      // Columns c..c+3, elements k..k+3 of each: four runs of the storage.
      const __m128i r0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + (c + 0) * col_stride + k));
      const __m128i r1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + (c + 1) * col_stride + k));
      const __m128i r2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + (c + 2) * col_stride + k));
      const __m128i r3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + (c + 3) * col_stride + k));
      const __m128i t0 = _mm_unpacklo_epi32(r0, r1), t1 = _mm_unpacklo_epi32(r2, r3);
      const __m128i t2 = _mm_unpackhi_epi32(r0, r1), t3 = _mm_unpackhi_epi32(r2, r3);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (k + 0) * pitch + c), _mm_unpacklo_epi64(t0, t1));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (k + 1) * pitch + c), _mm_unpackhi_epi64(t0, t1));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (k + 2) * pitch + c), _mm_unpacklo_epi64(t2, t3));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (k + 3) * pitch + c), _mm_unpackhi_epi64(t2, t3));
    }
  }
  return rows;
#else
  (void)src, (void)col_stride, (void)dst, (void)pitch, (void)n, (void)width;
  return 0;
#endif
}

// Adds to `state` the rows x cols matrix whose rows run down the columns of its storage (element
// (r, c) at base[r + c * col_stride]: a transposed weight, or a column slice of one), element
// type U, in logical order. Rows are gathered `block` at a time, each column's `block` elements
// read as one run (a cache line), so that every line of the storage is read once, not once per
// row.
template <class U>
void hash_column_major(XXH3_state_t* state, const U* base, std::int64_t rows, std::int64_t cols,
                       std::int64_t col_stride) {
  // Up to four cache lines of each column per gather, fewer when the buffer would pass 32 MiB.
  constexpr std::int64_t kLine = 64 / static_cast<std::int64_t>(sizeof(U));
  const std::int64_t budget = (std::int64_t{32} << 20) / static_cast<std::int64_t>(sizeof(U));
  const std::int64_t block = std::clamp<std::int64_t>(budget / std::max<std::int64_t>(1, cols), 1, 4 * kLine);
  // The buffer's rows a cache line longer than a row: rows a power of two apart would share the
  // same cache sets, and the gather's stores would evict each other.
  const std::int64_t pitch = cols + kLine;
  std::vector<U> buffer(static_cast<std::size_t>(block * pitch));
  for (std::int64_t r = 0; r < rows; r += block) {
    const std::int64_t n = std::min(block, rows - r);
    U* out = buffer.data();
    // Tiles of a cache line's worth of columns: their lines stay in L1 while each row of the tile
    // is written out as one line.
    for (std::int64_t c0 = 0; c0 < cols; c0 += kLine) {
      const std::int64_t width = std::min(kLine, cols - c0);
      const U* src = base + c0 * col_stride + r;
      if (c0 + kLine + width <= cols) {
        for (std::int64_t c = 0; c < width; ++c) {
          for (std::int64_t k = 0; k < n; k += kLine) __builtin_prefetch(src + (kLine + c) * col_stride + k);
        }
      }
      std::int64_t k = 0;
      if constexpr (sizeof(U) == 4) k = transpose_4x4_blocks(src, col_stride, out + c0, pitch, n, width);
      for (; k < n; ++k) {
        U* dst = out + k * pitch + c0;
        for (std::int64_t c = 0; c < width; ++c) dst[c] = src[c * col_stride + k];
      }
    }
    for (std::int64_t k = 0; k < n; ++k) {
      XXH3_64bits_update(state, out + k * pitch, static_cast<std::size_t>(cols) * sizeof(U));
    }
  }
}

void hash_column_major(XXH3_state_t* state, const void* base, std::int64_t rows, std::int64_t cols,
                       std::int64_t col_stride, std::size_t width) {
  switch (width) {
    case 1: return hash_column_major(state, static_cast<const std::uint8_t*>(base), rows, cols, col_stride);
    case 2: return hash_column_major(state, static_cast<const std::uint16_t*>(base), rows, cols, col_stride);
    case 4: return hash_column_major(state, static_cast<const std::uint32_t*>(base), rows, cols, col_stride);
    default: return hash_column_major(state, static_cast<const std::uint64_t*>(base), rows, cols, col_stride);
  }
}

// Note [Strided fingerprints]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A view is first reduced to the dims that matter: dims of size 1 dropped, and a dim merged into
// the next where it runs on from it (stride == the next dim's size * stride). A transposed 2-D
// weight, and a permute of a contiguous 3-D tensor that keeps one dim's elements adjacent, become
// one column-major matrix. Then, by the innermost two dims:
//  - innermost stride 1 (a slice's rows, a permute that keeps the last dim): each run of the
//    innermost dim is hashed where it lies, in logical order, with no copy;
//  - second-innermost stride 1 (a stack of transposed matrices: an MoE layer's experts seen through
//    transpose(1, 2)): each matrix in storage order (xxh3_column_batch, Note [Column-major
//    fingerprints]), or gathered a few rows at a time where that does not apply;
//  - anything else (every other element, a full reversal of three dims, an expanded innermost
//    dim): copied a few rows at a time.
// No path allocates a copy of the view's size. Before, a permuted dense view went through one
// transposing copy of its full size: a bfloat16 stack of eight 2,816 x 4,096 experts seen through
// transpose(1, 2) hashed at 0.19 GB/s (0.02x memcpy), and held a second 176 MiB while it did.
struct Layout {
  std::vector<std::int64_t> sizes, strides;
  [[nodiscard]] std::size_t dims() const { return sizes.size(); }
};

Layout reduced_layout(const torch::Tensor& t) {
  Layout l;
  for (std::int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) == 1) continue;
    if (!l.sizes.empty() && l.strides.back() == t.size(d) * t.stride(d)) {
      l.sizes.back() *= t.size(d);
      l.strides.back() = t.stride(d);
    } else {
      l.sizes.push_back(t.size(d));
      l.strides.push_back(t.stride(d));
    }
  }
  return l;
}

// Adds `t` to `state` in logical order, a piece of at most about kChunkBytes at a time (Note
// [Pieces in logical order]): the same digest as hashing a contiguous copy, without allocating one
// of its full size (an expanded view's can be far larger than its storage).
void hash_copied(XXH3_state_t* state, const torch::Tensor& t) {
  PieceBuffer buffer(t, kChunkBytes);
  for_each_piece(t.sizes(), static_cast<std::int64_t>(t.element_size()), kChunkBytes, [&](const TensorPiece& p) {
    const torch::Tensor piece = buffer.copy(p.of(t));
    XXH3_64bits_update(state, piece.data_ptr(), piece.nbytes());
  });
}

// Runs of the innermost dim shorter than this are copied a few rows at a time instead: one
// update per run costs more than its bytes below it.
constexpr std::int64_t kMinRunBytes = 256;
// Column-major matrices smaller than this that the sweep does not take are copied a few rows at a
// time with the rest, not gathered one by one.
constexpr std::int64_t kMinGatheredMatrixBytes = 64 << 10;

}  // namespace

std::uint64_t fingerprint(const torch::Tensor& tensor) {
  if (!tensor.defined()) return 0;
#if GRAPHCHECK_HAS_CUDA
  if (tensor.is_cuda()) return cuda_ops::fingerprint(tensor);
#endif
  const torch::Tensor t = tensor.device().is_cpu() ? tensor : tensor.to(torch::kCPU);
  if (t.nbytes() == 0) return XXH3_64bits(nullptr, 0);
  if (t.is_contiguous()) return hash_contiguous(t.data_ptr(), t.nbytes());
  const Layout l = reduced_layout(t);
  const auto width = static_cast<std::size_t>(t.element_size());
  const auto* base = static_cast<const std::byte*>(t.data_ptr());
  const std::size_t d = l.dims();
  if (d >= 1 && l.strides[d - 1] == 1 && l.sizes[d - 1] * static_cast<std::int64_t>(width) >= kMinRunBytes) {
    // Note [Strided fingerprints]: runs of the innermost dim, where they lie.
    auto state = new_state();
    const auto run = static_cast<std::size_t>(l.sizes[d - 1]) * width;
    for_each_outer<1>(l.sizes, {l.strides}, d - 1, [&](const std::array<std::int64_t, 1>& at) {
      update_prefetched(state.get(), base + at[0] * static_cast<std::int64_t>(width), run);
    });
    return XXH3_64bits_digest(state.get());
  }
  if (d >= 2 && l.strides[d - 2] == 1 && l.strides[d - 1] >= l.sizes[d - 2] &&
      (width == 1 || width == 2 || width == 4 || width == 8)) {
    // Column-major matrices, read in storage order where each row is whole XXH3 stripes (Note
    // [Column-major fingerprints], Note [Rows of whole stripes]), gathered otherwise.
    const std::int64_t rows = l.sizes[d - 2], cols = l.sizes[d - 1], col_stride = l.strides[d - 1];
    const std::int64_t matrix_bytes = rows * cols * static_cast<std::int64_t>(width);
    const bool alone = d == 2;
    // The sweep takes a stack only of matrices of whole 1 KiB blocks: smaller ones are not listed
    // (a list of offsets of tiny matrices would pass the view's own size).
    std::vector<std::int64_t> matrices;
    if (alone || matrix_bytes >= 1024) {
      for_each_outer<1>(l.sizes, {l.strides}, d - 2,
                        [&](const std::array<std::int64_t, 1>& at) { matrices.push_back(at[0]); });
    }
    if (!matrices.empty()) {
      if (auto digest = detail::xxh3_column_batch(base, matrices, rows, cols, col_stride, width)) return *digest;
    }
    if (alone || matrix_bytes >= kMinGatheredMatrixBytes) {
      auto state = new_state();
      for (const std::int64_t at : matrices) {
        hash_column_major(state.get(), base + at * static_cast<std::int64_t>(width), rows, cols, col_stride, width);
      }
      return XXH3_64bits_digest(state.get());
    }
  }
  // Anything else (Note [Strided fingerprints]).
  auto state = new_state();
  hash_copied(state.get(), t);
  return XXH3_64bits_digest(state.get());
}

std::uint64_t fingerprint_bytes(const void* data, std::size_t bytes) { return hash_contiguous(data, bytes); }

std::uint64_t tensor_fingerprint(const torch::Tensor& tensor) { return fingerprint(tensor); }

}  // namespace graphcheck
