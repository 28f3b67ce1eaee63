// Unit tests for the pieces behind the hooks and memory probes and the dummy load format.

#include <gtest/gtest.h>
#define XXH_INLINE_ALL  // the reference digest: this translation unit's own build of XXH3
#include <xxhash.h>
#include <torch/nn/module.h>
#include <torch/types.h>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <vector>

#include "byte_scan.h"
#include "counting_allocator.h"
#include "dummy_loader.h"
#include "engine/op_log.h"
#include "fingerprint.h"
#include "fingerprint_bytes.h"
#include "xxh3_columns.h"
#include "xxh3_wide.h"
#include "glob.h"
#include "graphcheck/model.h"
#include "graphcheck/mutation.h"
#include "passes/passes.h"
#include "perturb_bits.h"
#include "synthetic_fill.h"

namespace graphcheck {
namespace {

TEST(PathMatches, StarIsOneComponentDoubleStarIsAnything) {
  EXPECT_TRUE(path_matches("layers.*.experts", "layers.0.experts"));
  EXPECT_TRUE(path_matches("layers.*.experts", "layers.12.experts"));
  EXPECT_FALSE(path_matches("layers.*.experts", "layers.0.mlp.experts"));
  EXPECT_FALSE(path_matches("layers.*", "layers.0.experts"));
  EXPECT_TRUE(path_matches("layers.*", "layers.0"));
  EXPECT_TRUE(path_matches("**.experts", "layers.0.mlp.experts"));
  EXPECT_TRUE(path_matches("(root)", "(root)"));
  EXPECT_FALSE(path_matches("experts", "experts.x"));
}

TEST(CountingAllocator, CountsLiveBytesAndWhatOutlivesAMoment) {
  auto& counter = CountingCpuAllocator::instance();
  counter.install();
  const std::int64_t base = counter.live_bytes();
  torch::Tensor kept;
  const std::uint64_t moment = counter.now();
  {
    torch::Tensor temporary = torch::empty({1024}, torch::kFloat32);  // 4096 bytes, freed
    kept = torch::empty({256}, torch::kFloat64);                       // 2048 bytes, kept
    EXPECT_EQ(counter.live_bytes() - base, 4096 + 2048);
  }
  EXPECT_EQ(counter.live_bytes() - base, 2048);
  EXPECT_EQ(counter.alive_since(moment), 2048);
  EXPECT_GE(counter.peak_bytes() - base, 4096 + 2048);
  counter.uninstall();
  // Freed after uninstall: still counted down.
  kept = torch::Tensor();
  EXPECT_EQ(counter.live_bytes(), base);
}

// The process's anonymous resident bytes (Linux), -1 where /proc says nothing.
std::int64_t rss_anon_bytes() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  std::int64_t kb = -1;
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, "RssAnon:", 8) == 0) kb = std::atoll(line + 8);
  }
  std::fclose(f);
  return kb < 0 ? -1 : kb * 1024;
}

// Note [Directly mapped blocks]: blocks of 1 MiB and more allocated in the scope are mapped on
// their own, so freeing them takes their pages out of the resident set at once, even where glibc
// would have kept them (its heap, once its mmap threshold has risen as it does in any long run).
TEST(CountingAllocator, DirectMapScopeReturnsFreedBlocksAtOnce) {
  if (rss_anon_bytes() < 0) GTEST_SKIP() << "no RssAnon in /proc/self/status on this system";
  // Raise glibc's dynamic mmap threshold past the blocks below, as a run's first large free does:
  // without the scope they come from the heap, and those freed between live ones stay resident.
  void* volatile large = std::malloc(std::size_t{24} << 20);  // volatile: the pair is not elided
  std::free(large);
  auto& counter = CountingCpuAllocator::instance();
  constexpr std::int64_t kBlock = 4 << 20, kBlocks = 16;
  std::vector<torch::Tensor> blocks;
  const std::int64_t live_before = counter.live_bytes();
  {
    const DirectMapScope direct_map;
    counter.install();  // counted as well: the bookkeeping of a mapped block
    for (std::int64_t i = 0; i < kBlocks; ++i) blocks.push_back(torch::full({kBlock}, 1, torch::kUInt8));
    EXPECT_EQ(counter.live_bytes() - live_before, kBlocks * kBlock);
    // raw_allocate() / raw_deallocate() (oneDNN's scratch space) on a mapped block.
    void* raw = counter.raw_allocate(std::size_t{2} << 20);
    ASSERT_NE(raw, nullptr);
    std::memset(raw, 7, std::size_t{2} << 20);
    counter.raw_deallocate(raw);
    counter.uninstall();
  }
  // Every other block: the freed ones lie between live ones (no free block at the heap's top).
  const std::int64_t resident = rss_anon_bytes();
  for (std::int64_t i = 0; i < kBlocks; i += 2) blocks[static_cast<std::size_t>(i)] = torch::Tensor();
  const std::int64_t after = rss_anon_bytes();
  EXPECT_GE(resident - after, kBlocks / 2 * kBlock * 7 / 8)
      << "freed blocks of the scope stayed resident: " << resident << " -> " << after << " bytes";
  EXPECT_EQ(counter.live_bytes() - live_before, kBlocks / 2 * kBlock);
  blocks.clear();
  EXPECT_EQ(counter.live_bytes(), live_before);
}

// Views of more than one chunk (1 MiB) are hashed a few rows at a time: the digest is still the
// one of their contiguous copy, for a transposed, a sliced and an expanded view.
TEST(Fingerprint, ChunkedViewsHashLikeTheirContiguousCopy) {
  const torch::Tensor base = torch::rand({1024, 700});
  for (const torch::Tensor& view : {base.t(), base.narrow(1, 3, 650), base.narrow(0, 0, 1).expand({900, 700}),
                                    base.reshape({4, 256, 700}).permute({2, 0, 1}),
                                    // Column-major 2-D views (gathered a cache line of each column at a
                                    // time), of every element width, row counts off the gather's block.
                                    base.t().narrow(0, 5, 333), base.to(torch::kBFloat16).t(),
                                    base.mul(255).to(torch::kUInt8).t(), base.to(torch::kFloat64).t().narrow(0, 1, 17)}) {
    ASSERT_FALSE(view.is_contiguous());
    EXPECT_EQ(fingerprint(view), fingerprint(view.contiguous())) << view.sizes();
  }
  torch::Tensor changed = base.clone();
  changed[1023][699] = -1;
  EXPECT_NE(fingerprint(base.t()), fingerprint(changed.t()));
}

// A column-major matrix whose rows are whole XXH3 blocks is hashed in storage order (Note
// [Column-major fingerprints]): the digest is XXH3_64bits of its row-major copy for every element
// width, one block a row and many, a row count off every strip, a column slice (col_stride >
// rows), and a change in the last stripe (another key) or the first word; the sweep's AVX2 and
// baseline builds alike. So is one whose rows are whole 64-byte stripes but not whole blocks
// (Note [Rows of whole stripes]); other rows, and matrices of 240 bytes or fewer (XXH3's short
// inputs), are left to the gather.
TEST(Fingerprint, ColumnMajorViewsReadInStorageOrderHashToXxh3sDigest) {
  torch::manual_seed(3);
  struct Case {
    torch::ScalarType dtype;
    std::int64_t rows, cols, pad;
  };
  const std::vector<Case> cases = {
      {torch::kUInt8, 2, 1024, 0},     {torch::kUInt8, 37, 2048, 5},    {torch::kInt16, 3, 512, 0},
      {torch::kBFloat16, 300, 1536, 7}, {torch::kFloat32, 2, 256, 0},   {torch::kFloat32, 129, 768, 1},
      {torch::kFloat32, 2500, 256, 0},  {torch::kFloat64, 5, 128, 3},   {torch::kFloat64, 64, 384, 0},
      {torch::kFloat32, 4100, 4096, 0},  // rows past one strip (2048), 16 blocks a row
      {torch::kFloat32, 3, 4352, 0},     {torch::kUInt8, 5, 20480, 1},  // tiles of 16 blocks and a rest
      {torch::kFloat32, 2100, 256, 3},  {torch::kBFloat16, 4096, 512, 0},  // strips with padding; whole strips
      {torch::kUInt8, 64, 1024, 0},     {torch::kUInt8, 70, 3072, 2},     // bytes interleaved 16 at a time
      // Rows of whole stripes, not whole blocks (Note [Rows of whole stripes]): places that repeat
      // every 16, 8, 4 and 2 rows; rows shorter than a block (of one stripe and more); row counts off
      // 16; every width.
      {torch::kBFloat16, 40, 11008, 1}, {torch::kUInt8, 33, 11008, 0},  {torch::kFloat32, 19, 1152, 2},
      {torch::kBFloat16, 21, 32, 0},    {torch::kUInt8, 35, 192, 1},    {torch::kFloat64, 17, 72, 0},
      {torch::kBFloat16, 50, 1088, 0},  {torch::kInt16, 9, 1056, 3},    {torch::kUInt8, 130, 1088, 1},
      {torch::kFloat32, 20, 1296, 0},   {torch::kFloat32, 18, 1600, 0}, {torch::kUInt8, 31, 320, 0},
      {torch::kFloat32, 2100, 4112, 0},  // strips (2048 rows, then 52) of 65 stripes a row
  };
  for (const Case& c : cases) {
    // Storage rows of rows + pad elements; the view takes the first `rows` of each.
    const torch::Tensor storage = torch::randint(0, 1 << 15, {c.cols, c.rows + c.pad}, torch::kInt64).to(c.dtype);
    torch::Tensor view = storage.narrow(1, 0, c.rows).t();
    ASSERT_EQ(view.stride(0), 1);
    const std::size_t width = static_cast<std::size_t>(view.element_size());
    auto columns = [&](const torch::Tensor& v, bool wide = true) {
      return detail::xxh3_columns(v.data_ptr(), v.size(0), v.size(1), v.stride(1), width, wide);
    };
    const torch::Tensor copy = view.contiguous();
    const std::uint64_t want = XXH3_64bits(copy.data_ptr(), copy.nbytes());
    const auto got = columns(view);
    ASSERT_TRUE(got.has_value()) << c.rows << "x" << c.cols;
    EXPECT_EQ(*got, want) << c.rows << "x" << c.cols << " " << c.dtype;
    EXPECT_EQ(fingerprint(view), want) << c.rows << "x" << c.cols << " " << c.dtype;
    EXPECT_EQ(*columns(view, false), want) << c.rows << "x" << c.cols << " " << c.dtype << ", baseline build";
    // The last element (in the last stripe, hashed with another key) and the first.
    for (const auto& [r, col] : {std::pair{c.rows - 1, c.cols - 1}, std::pair{std::int64_t{0}, std::int64_t{0}}}) {
      torch::Tensor changed = storage.clone();
      const torch::Tensor v = changed.narrow(1, 0, c.rows).t();
      static_cast<std::uint8_t*>(v[r][col].data_ptr())[0] ^= 1;  // a bit of the element, any dtype
      const torch::Tensor vc = v.contiguous();
      EXPECT_EQ(*columns(v), XXH3_64bits(vc.data_ptr(), vc.nbytes())) << r << "," << col;
      EXPECT_NE(*columns(v), want) << r << "," << col;
    }
  }
  // Not whole stripes a row (2,800 bytes), or one row: the gather's (still the contiguous copy's digest).
  const torch::Tensor odd = torch::rand({700, 300}).t();
  EXPECT_FALSE(detail::xxh3_columns(odd.data_ptr(), odd.size(0), odd.size(1), odd.stride(1), 4).has_value());
  EXPECT_EQ(fingerprint(odd), fingerprint(odd.contiguous()));
  // Strips sized by a small budget: 200 rows of 33 stripes (4 slots of 64 bytes a row) fit 51,200
  // bytes; strips start at multiples of 16 rows (192, then 108 rows).
  {
    const torch::Tensor storage = torch::randint(0, 1 << 15, {1056, 300}, torch::kInt64).to(torch::kBFloat16);
    const torch::Tensor view = storage.t();
    const torch::Tensor copy = view.contiguous();
    for (const bool wide : {true, false}) {
      const auto got = detail::xxh3_columns(view.data_ptr(), 300, 1056, 300, 2, wide, 200 * 4 * 64);
      ASSERT_TRUE(got.has_value());
      EXPECT_EQ(*got, XXH3_64bits(copy.data_ptr(), copy.nbytes())) << wide;
    }
  }
  // 240 bytes or fewer in all: XXH3 hashes them without stripes (from a review: two and three rows
  // of one stripe of bytes, two of bfloat16, were swept). 256 bytes (four rows): swept.
  for (const auto& [dtype, rows, cols] : {std::tuple{torch::kUInt8, 2, 64}, std::tuple{torch::kUInt8, 3, 64},
                                          std::tuple{torch::kBFloat16, 2, 32}, std::tuple{torch::kBFloat16, 3, 32},
                                          std::tuple{torch::kUInt8, 4, 64}}) {
    const torch::Tensor view = torch::randint(0, 256, {cols, rows}, torch::kInt64).to(dtype).t();
    const torch::Tensor copy = view.contiguous();
    const auto got = detail::xxh3_columns(view.data_ptr(), rows, cols, rows, view.element_size());
    EXPECT_EQ(got.has_value(), copy.nbytes() > 240) << rows << "x" << cols;
    if (got) {
      EXPECT_EQ(*got, XXH3_64bits(copy.data_ptr(), copy.nbytes())) << rows << "x" << cols;
    }
    EXPECT_EQ(fingerprint(view), XXH3_64bits(copy.data_ptr(), copy.nbytes())) << rows << "x" << cols;
  }
  // Rows of float32 under 8 stripes (3 here): the gather's too (Note [Rows of whole stripes]).
  const torch::Tensor short_rows = torch::rand({48, 700}).t();
  EXPECT_FALSE(detail::xxh3_columns(short_rows.data_ptr(), 700, 48, 700, 4).has_value());
  EXPECT_EQ(fingerprint(short_rows), fingerprint(short_rows.contiguous()));
  const torch::Tensor one = torch::rand({256, 1}).t();
  EXPECT_FALSE(detail::xxh3_columns(one.data_ptr(), 1, 256, 1, 4).has_value());
  // A row over 1 GiB: its block sums would pass the sweep's budget (nothing is read).
  EXPECT_FALSE(detail::xxh3_columns(one.data_ptr(), 2, (std::int64_t{1} << 28) + 256, 2, 4).has_value());
}

// A stack of column-major matrices (an MoE layer's experts seen through transpose(1, 2)) is
// hashed in storage order as one input (xxh3_column_batch): XXH3_64bits of the row-major copy
// for rows of whole blocks and of whole stripes, matrices apart by more than their size (a slice
// of the stack's columns) and by nothing (an expanded stack), and a change in the first matrix,
// in a middle one at a matrix's last element (a scramble between matrices), and in the last
// element of all. Rows of whole stripes that leave a matrix short of a whole block are gathered.
TEST(Fingerprint, StacksOfColumnMajorMatricesHashToXxh3sDigest) {
  torch::manual_seed(5);
  struct Case {
    torch::ScalarType dtype;
    std::int64_t count, rows, cols, pad;
  };
  const std::vector<Case> cases = {
      {torch::kBFloat16, 4, 96, 1024, 0},   {torch::kFloat32, 3, 33, 512, 2},   {torch::kUInt8, 5, 17, 2048, 0},
      {torch::kFloat64, 2, 40, 256, 1},     {torch::kBFloat16, 3, 48, 1056, 0},  // stripes: 33 a row, 16 rows
      {torch::kFloat32, 6, 2100, 256, 0},   // strips past one (2048 rows) in every matrix
      {torch::kUInt8, 3, 32, 1088, 3},      {torch::kFloat32, 2, 32, 1296, 0},  // stripes, matrices whole blocks
  };
  for (const Case& c : cases) {
    const std::size_t width = c10::elementSize(c.dtype);
    // Each matrix's storage: cols storage rows of rows + pad elements.
    const torch::Tensor storage =
        torch::randint(0, 1 << 15, {c.count, c.cols, c.rows + c.pad}, torch::kInt64).to(c.dtype);
    const torch::Tensor view = storage.narrow(2, 0, c.rows).transpose(1, 2);
    std::vector<std::int64_t> matrices;
    for (std::int64_t b = 0; b < c.count; ++b) matrices.push_back(b * view.stride(0));
    auto batch = [&](const torch::Tensor& v, bool wide = true) {
      return detail::xxh3_column_batch(v.data_ptr(), matrices, c.rows, c.cols, v.stride(2), width, wide);
    };
    const torch::Tensor copy = view.contiguous();
    const std::uint64_t want = XXH3_64bits(copy.data_ptr(), copy.nbytes());
    const auto got = batch(view);
    ASSERT_TRUE(got.has_value()) << c.count << "x" << c.rows << "x" << c.cols;
    EXPECT_EQ(*got, want) << c.count << "x" << c.rows << "x" << c.cols << " " << c.dtype;
    EXPECT_EQ(*batch(view, false), want) << c.count << "x" << c.rows << "x" << c.cols << ", baseline build";
    EXPECT_EQ(fingerprint(view), want) << c.count << "x" << c.rows << "x" << c.cols << " " << c.dtype;
    for (const auto& [b, r, col] : {std::tuple{std::int64_t{0}, std::int64_t{0}, std::int64_t{0}},
                                    std::tuple{c.count / 2, c.rows - 1, c.cols - 1},
                                    std::tuple{c.count - 1, c.rows - 1, c.cols - 1}}) {
      torch::Tensor changed = storage.clone();
      const torch::Tensor v = changed.narrow(2, 0, c.rows).transpose(1, 2);
      static_cast<std::uint8_t*>(v[b][r][col].data_ptr())[0] ^= 1;
      const torch::Tensor vc = v.contiguous();
      EXPECT_EQ(*batch(v), XXH3_64bits(vc.data_ptr(), vc.nbytes())) << b << "," << r << "," << col;
      EXPECT_NE(*batch(v), want) << b << "," << r << "," << col;
    }
  }
  // One matrix expanded to three (matrices 0 apart): the copy holds it three times.
  const torch::Tensor one = torch::rand({1, 512, 64});
  const torch::Tensor expanded = one.transpose(1, 2).expand({3, 64, 512});
  const std::vector<std::int64_t> same = {0, 0, 0};
  const torch::Tensor copy = expanded.contiguous();
  EXPECT_EQ(*detail::xxh3_column_batch(expanded.data_ptr(), same, 64, 512, 64, 4), XXH3_64bits(copy.data_ptr(), copy.nbytes()));
  EXPECT_EQ(fingerprint(expanded), XXH3_64bits(copy.data_ptr(), copy.nbytes()));
  // Rows of 33 stripes, 20 rows a matrix: 660 stripes, not whole blocks (the next matrix would
  // start at place 4 of a block). Gathered, to the same digest.
  const torch::Tensor odd = torch::randint(0, 1 << 15, {2, 1056, 20}, torch::kInt64).to(torch::kBFloat16).transpose(1, 2);
  const std::vector<std::int64_t> two = {0, odd.stride(0)};
  EXPECT_FALSE(detail::xxh3_column_batch(odd.data_ptr(), two, 20, 1056, 20, 2).has_value());
  const torch::Tensor odd_copy = odd.contiguous();
  EXPECT_EQ(fingerprint(odd), XXH3_64bits(odd_copy.data_ptr(), odd_copy.nbytes()));
}

// Every strided layout hashes as its contiguous copy (Note [Strided fingerprints]): every
// permutation of 3-D and 4-D tensors of every width, slices, steps, expanded and overlapping
// views, size-1 dims with odd strides; runs of the innermost dim short and long, matrices the
// sweep takes and those it leaves to the gather, alone and in stacks.
TEST(Fingerprint, EveryStridedLayoutHashesAsItsContiguousCopy) {
  torch::manual_seed(6);
  int checked = 0;
  auto check = [&](const torch::Tensor& v, const std::string& what) {
    const torch::Tensor copy = v.contiguous();
    EXPECT_EQ(fingerprint(v), XXH3_64bits(copy.data_ptr(), copy.nbytes()))
        << what << " " << v.sizes() << " " << v.strides() << " " << v.dtype();
    ++checked;
  };
  for (const auto dtype : {torch::kUInt8, torch::kBFloat16, torch::kFloat32, torch::kFloat64}) {
    for (const std::vector<std::int64_t>& shape : std::vector<std::vector<std::int64_t>>{
             {3, 64, 48}, {2, 256, 128}, {5, 7, 9}, {8, 96, 128}, {3, 16, 33}, {6, 2, 512}, {2, 3, 4, 256},
             {4, 1, 64, 512}}) {
      const torch::Tensor x = torch::randint(0, 1 << 15, shape, torch::kInt64).to(dtype);
      std::vector<std::int64_t> perm(shape.size());
      std::iota(perm.begin(), perm.end(), 0);
      do {
        check(x.permute(perm), "permute");
      } while (std::next_permutation(perm.begin(), perm.end()));
      check(x.narrow(-1, 1, x.size(-1) - 1), "last dim sliced");
      check(x.narrow(1, 1, x.size(1) - 1).transpose(-1, -2), "sliced, transposed");
      check(x.transpose(-1, -2).slice(0, 0, x.size(0), 2), "every other matrix");
      check(x.transpose(-1, -2).slice(-1, 0, x.size(-2), 2), "every other element");
    }
    const torch::Tensor row = torch::randint(0, 1 << 15, {1, 64, 1}, torch::kInt64).to(dtype);
    check(row.expand({5, 64, 300}), "expanded");
    check(row.expand({5, 64, 300}).transpose(1, 2), "expanded, transposed");
    const torch::Tensor flat = torch::randint(0, 1 << 15, {256}, torch::kInt64).to(dtype);
    check(flat.as_strided({100, 64}, {1, 1}), "overlapping rows");
    check(flat.as_strided({3, 100, 64}, {0, 1, 1}), "overlapping, stacked");
    check(flat.as_strided({4, 1, 60}, {64, 7, 1}), "a size-1 dim with an odd stride");
    // MLA's absorbed weights as vLLM's PWAL leaves them: kv_b_proj's weight transposed, viewed as
    // (L, N, P + V) and split; W_UV.transpose(0, 1) is a stack of N column-major L x V matrices,
    // W_UK.permute(1, 2, 0) runs of L.
    {
      constexpr std::int64_t L = 64, N = 4, P = 48, V = 32;
      const torch::Tensor kv_b = torch::randint(0, 1 << 15, {N * (P + V), L}, torch::kInt64).to(dtype);
      const auto parts = kv_b.t().view({L, N, P + V}).split({P, V}, -1);
      const torch::Tensor uv = parts[1].transpose(0, 1);
      check(uv, "W_UV");
      std::vector<std::int64_t> heads;
      for (std::int64_t n = 0; n < N; ++n) heads.push_back(n * uv.stride(0));
      // In bfloat16 (rows of one stripe) swept; rows of 32 bytes, or under 8 stripes of 4- and
      // 8-byte elements, gathered.
      EXPECT_EQ(detail::xxh3_column_batch(uv.data_ptr(), heads, L, V, uv.stride(2), uv.element_size()).has_value(),
                dtype == torch::kBFloat16);
      check(parts[0].permute({1, 2, 0}), "W_UK_T");
    }
    // Outer dims whose stride equals the next one's size, but not its extent: not one dim.
    const torch::Tensor wide = torch::randint(0, 1 << 15, {1200}, torch::kInt64).to(dtype);
    check(wide.as_strided({3, 4, 256}, {4, 300, 1}), "outer dims that only look mergeable");
  }
  EXPECT_EQ(checked, 4 * (6 * 6 + 2 * 24 + 8 * 4 + 8));
}

// No layout is copied whole (Note [Strided fingerprints]): views of 16 MiB that the sweep and
// the runs do not take (matrices of 4 KiB with rows of one stripe of float32, every other element
// of a single row, a full reversal of three dims) allocate at most about a chunk (1 MiB) of
// torch memory while hashed. (From a review: the chunked copy stepped by size(0), and made one
// buffer the size of the view where that was 1.)
TEST(Fingerprint, NoLayoutIsCopiedWhole) {
  auto& counter = CountingCpuAllocator::instance();
  const std::vector<torch::Tensor> views = {
      torch::rand({1, 4096, 16, 64}).transpose(2, 3),
      torch::rand({1, 8 << 20}).slice(1, 0, 8 << 20, 2),
      torch::rand({64, 256, 256}).permute({2, 1, 0}),
  };
  for (const torch::Tensor& view : views) {
    ASSERT_FALSE(view.is_contiguous());
    const torch::Tensor copy = view.contiguous();
    const std::uint64_t want = XXH3_64bits(copy.data_ptr(), copy.nbytes());
    counter.install();
    const std::int64_t before = counter.live_bytes();
    counter.reset_peak();
    const std::uint64_t got = fingerprint(view);
    const std::int64_t peak = counter.peak_bytes() - before;
    counter.uninstall();
    EXPECT_EQ(got, want) << view.sizes() << " " << view.strides();
    EXPECT_LE(peak, (1 << 20) + (64 << 10)) << view.sizes() << " " << view.strides() << ": " << view.nbytes() << " bytes";
  }
}

// The fingerprint of contiguous bytes is XXH3-64's digest whichever kernel computes it: the
// AVX2 one where the CPU has it (xxh3_wide.h), four streams from 16 KiB, the SSE2 one of this
// translation unit's inlined xxhash otherwise.
TEST(Fingerprint, ContiguousBytesHashToXxh3sDigestOnEveryKernel) {
  const torch::Tensor bytes = torch::randint(0, 256, {(3 << 20) + 7}, torch::kUInt8);
  const auto* data = bytes.data_ptr<std::uint8_t>();
  // From 16 KiB the AVX2 kernel reads four streams a window at a time (Note [Hashing four
  // streams]): lengths on and around XXH3's 1 KiB blocks, its 64-byte stripes and the windows.
  std::vector<std::size_t> lengths = {0, 1, 4095, 4096, 4097, 16383, std::size_t{1} << 18, (std::size_t{1} << 18) + 1,
                                      std::size_t{3} << 20, (std::size_t{3} << 20) + 7};
  for (std::size_t blocks : {16, 17, 19, 21, 258, 259, 260, 261, 262, 300, 512, 513, 1024, 1025, 1500}) {
    for (std::size_t extra : {0, 1, 63, 64, 65, 1023}) lengths.push_back(blocks * 1024 + extra);
  }
  // Each length is hashed where its last byte abuts a page no read may touch: a kernel that reads
  // past the end (a window's block that does not exist) crashes here.
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  const std::size_t span = (bytes.numel() + page - 1) / page * page + page;
  void* map = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(map, MAP_FAILED);
  ASSERT_EQ(mprotect(static_cast<std::uint8_t*>(map) + span - page, page, PROT_NONE), 0);
  for (std::size_t n : lengths) {
    const std::uint64_t want = XXH3_64bits(data, n);
    auto* at = static_cast<std::uint8_t*>(map) + (span - page - n);
    std::memcpy(at, data, n);
    EXPECT_EQ(fingerprint_bytes(at, n), want) << n << " bytes";
    if (detail::xxh3_avx2_available()) {
      EXPECT_EQ(detail::xxh3_avx2(at, n), want) << n << " bytes, AVX2";
    }
  }
  munmap(map, span);
}

TEST(ByteScan, CountsElementsThatHoldThePatternWhereTheExpectedValueDoesNot) {
  // Each width the scan specialises, and a 16-byte element (complex double) the generic path takes.
  for (std::size_t width : {1, 2, 4, 8, 16}) {
    const std::int64_t n = 1000;
    std::vector<std::uint8_t> data(n * width, 0x11), expected(n * width, 0x22);
    auto poison = [&](std::vector<std::uint8_t>& v, std::int64_t i) {
      std::fill_n(v.begin() + i * static_cast<std::int64_t>(width), width, std::uint8_t{0xFF});
    };
    for (std::int64_t i : {7, 300, 301, 999}) poison(data, i);
    poison(expected, 301);  // expected to hold the pattern: no evidence
    if (width > 1) data[500 * width] = 0xFF;  // one byte of an element is not the element
    std::int64_t first = -2;
    EXPECT_EQ(scan::count_pattern(data.data(), expected.data(), n, width, 0xFF, &first), 3) << width;
    EXPECT_EQ(first, 7) << width;
    EXPECT_EQ(scan::count_pattern(data.data(), nullptr, n, width, 0xFF, &first), 4) << width;
    std::vector<std::uint8_t> mask_bytes(n);
    bool* mask = reinterpret_cast<bool*>(mask_bytes.data());
    scan::mask_pattern(data.data(), expected.data(), n, width, 0xFF, mask);
    for (std::int64_t i = 0; i < n; ++i) {
      EXPECT_EQ(mask[i], i == 7 || i == 300 || i == 999) << width << " at " << i;
    }
    EXPECT_EQ(scan::count_pattern(expected.data(), nullptr, n, width, 0x7E, &first), 0);
    EXPECT_EQ(first, -1);
  }
}

// More elements than one counting block of the byte-wide scan (255), so blocks add up.
TEST(ByteScan, CountsAcrossBlocks) {
  std::vector<std::uint8_t> data(100'000, 0xFF);
  data[0] = 0;
  EXPECT_EQ(scan::count_pattern(data.data(), nullptr, 100'000, 1, 0xFF), 99'999);
  EXPECT_EQ(scan::count_pattern(data.data(), nullptr, 50'000, 2, 0xFF), 49'999);
  // Every width, over the four parts read side by side (Note [Scans read four streams]) and a
  // tail, with misses in the middle and at the end.
  std::vector<std::uint8_t> more(1'000'003, 0xFF);
  for (std::size_t i = 4095; i < more.size(); i += 7919) more[i] = 0;
  more.back() = 0;
  for (std::size_t width : {1, 2, 4, 8}) {
    const std::int64_t n = static_cast<std::int64_t>(more.size() / width);
    std::int64_t want = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      bool all = true;
      for (std::size_t b = 0; b < width; ++b) all = all && more[static_cast<std::size_t>(i) * width + b] == 0xFF;
      want += all;
    }
    EXPECT_EQ(scan::count_pattern(more.data(), nullptr, n, width, 0xFF), want) << width;
  }
  // Around the switch to four parts (256 KiB), element counts that leave a tail after them.
  for (std::size_t bytes : {std::size_t{262143}, std::size_t{262144}, std::size_t{262144 + 24}}) {
    std::vector<std::uint8_t> near(bytes, 0xFF);
    near[bytes / 2] = 0;
    for (std::size_t width : {1, 2, 4, 8}) {
      const std::int64_t n = static_cast<std::int64_t>(bytes / width);
      const std::int64_t missed = static_cast<std::int64_t>(bytes / 2 / width) < n ? 1 : 0;
      EXPECT_EQ(scan::count_pattern(near.data(), nullptr, n, width, 0xFF), n - missed) << bytes << " " << width;
    }
  }
}

// Against an expected value, at every width: every element a hit (the byte scan's counters fill
// and are emptied many times), an odd length (a tail after the last whole line), and elements
// the expected value also holds the pattern in, which must not count.
TEST(ByteScan, CountsAgainstAnExpectedValueAcrossBlocksAndTails) {
  const std::int64_t bytes = 1'000'003;
  std::vector<std::uint8_t> data(bytes, 0xFF), expected(bytes, 0x00);
  for (std::int64_t i = 0; i < bytes; i += 1000) expected[i] = 0xFF;
  for (std::size_t width : {1, 2, 4, 8}) {
    const std::int64_t n = bytes / static_cast<std::int64_t>(width);
    std::int64_t excused = 0;  // elements whose expected value holds the pattern in every byte
    for (std::int64_t i = 0; i < n; ++i) {
      bool all = true;
      for (std::size_t b = 0; b < width; ++b) all = all && expected[i * width + b] == 0xFF;
      excused += all;
    }
    std::int64_t first = -2;
    EXPECT_EQ(scan::count_pattern(data.data(), expected.data(), n, width, 0xFF, &first), n - excused) << width;
    EXPECT_EQ(first, width == 1 ? 1 : 0) << width;
  }
  // Bytes, by both the AVX2 and the SSE2 loop: every byte a hit but those excused, and a mix of
  // hits, misses and excused bytes, at lengths with and without a tail and around the switch to
  // four parts.
  std::vector<std::uint8_t> mixed(bytes), mixed_expected(bytes);
  for (std::int64_t i = 0; i < bytes; ++i) {
    mixed[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(i % 3 == 0 ? 0xFF : i % 251);
    mixed_expected[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(i % 7 == 0 ? 0xFF : 0);
  }
  for (const bool wide : {true, false}) {
    for (const std::int64_t n : {bytes, std::int64_t{262144}, std::int64_t{262143}, std::int64_t{64 * 255 * 3 + 5}}) {
      std::int64_t all = 0, some = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        all += expected[static_cast<std::size_t>(i)] != 0xFF;
        some += mixed[static_cast<std::size_t>(i)] == 0xFF && mixed_expected[static_cast<std::size_t>(i)] != 0xFF;
      }
      EXPECT_EQ(scan::detail::count_bytes(data.data(), expected.data(), n, 0xFF, wide), all) << n << " " << wide;
      EXPECT_EQ(scan::detail::count_bytes(mixed.data(), mixed_expected.data(), n, 0xFF, wide), some) << n << " " << wide;
    }
  }
}

TEST(SyntheticFill, SameKeySameValuesOtherKeyOtherValues) {
  std::vector<float> a(1001), b(1001), c(1001);
  synth::fill_uniform(a.data(), a.size(), synth::stream_key(7, 0), 1.0f);
  synth::fill_uniform(b.data(), b.size(), synth::stream_key(7, 0), 1.0f);
  synth::fill_uniform(c.data(), c.size(), synth::stream_key(7, 1), 1.0f);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(synth::stream_key(7, 0), synth::stream_key(8, 0));
}

// A fill from an even offset continues the stream: chunks, the last one odd, give the values of
// one fill (synthesize_checkpoint draws 16-bit tensors a chunk at a time).
TEST(SyntheticFill, AFillFromAnEvenOffsetContinuesTheStream) {
  const std::size_t n = 100'001;
  std::vector<float> whole(n), pieces(n);
  synth::fill_uniform(whole.data(), n, synth::stream_key(9, 4), 0.5f);
  for (std::size_t at = 0; at < n; at += 4096) {
    synth::fill_uniform(pieces.data() + at, std::min<std::size_t>(4096, n - at), synth::stream_key(9, 4), 0.5f, at);
  }
  EXPECT_EQ(whole, pieces);
}

// Every instruction set this CPU can draw with gives the bits of the documented stream (element
// 2k and 2k + 1: bits 40-63 and 8-31 of SplitMix64's output for counter key + (k + 1) * gamma),
// so a checkpoint synthesized on one machine is the one synthesized on another.
TEST(SyntheticFill, EveryInstructionSetDrawsTheDocumentedStream) {
  constexpr std::uint64_t kGamma = 0x9e3779b97f4a7c15ULL;
  const auto mix = [](std::uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  const std::uint64_t key = synth::stream_key(5, 2);
  const float half_width = 0.75f, scale = half_width / 8388608.0f;
  const std::size_t first = 6, n = 1037;  // odd, from an even offset
  std::vector<float> expected(n);
  for (std::size_t j = 0; j < n; ++j) {
    const std::uint64_t h = mix(key + ((first + j) / 2 + 1) * kGamma);
    const std::uint32_t u = (first + j) % 2 == 0 ? static_cast<std::uint32_t>(h >> 40)
                                                  : static_cast<std::uint32_t>((h >> 8) & 0xffffffu);
    expected[j] = static_cast<float>(static_cast<std::int32_t>(u) - 8388608) * scale;
  }
  const std::vector<std::string> isas = synth::fill_uniform_isas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.back(), "baseline");
  for (const std::string& isa : isas) {
    std::vector<float> got(n);
    synth::fill_uniform_with(isa, got.data(), n, key, half_width, first);
    EXPECT_EQ(got, expected) << isa;
  }
  std::vector<float> got(n);
  synth::fill_uniform(got.data(), n, key, half_width, first);
  EXPECT_EQ(got, expected);
  std::vector<float> none(2);
  EXPECT_THROW(synth::fill_uniform_with("no-such-isa", none.data(), 2, key, 1.0f), std::invalid_argument);
}

TEST(SyntheticFill, UniformWithinItsHalfWidthWithTheMatchingSpread) {
  const std::size_t n = 1'000'001;  // odd: the tail element too
  std::vector<float> v(n);
  synth::fill_uniform(v.data(), n, synth::stream_key(3, 5), 0.25f);
  double sum = 0, sq = 0;
  for (float x : v) {
    ASSERT_GE(x, -0.25f);
    ASSERT_LT(x, 0.25f);
    sum += x;
    sq += double(x) * x;
  }
  const double mean = sum / n, stddev = std::sqrt(sq / n - mean * mean);
  EXPECT_NEAR(mean, 0.0, 1e-3);
  EXPECT_NEAR(stddev, 0.25 / std::sqrt(3.0), 1e-3);
  EXPECT_NE(v[n - 1], 0.0f);
}

TEST(SyntheticFill, MaskedBytesCoverTheirRangeAndNoMore) {
  std::vector<std::uint8_t> v(10'003);
  synth::fill_masked_bytes(v.data(), v.size(), synth::stream_key(1, 2), 7);
  std::vector<int> seen(256, 0);
  for (auto x : v) ++seen[x];
  for (int k = 0; k < 8; ++k) EXPECT_GT(seen[k], 1000) << k;
  EXPECT_EQ(std::count(seen.begin() + 8, seen.end(), 0), 248);
}

TEST(Fingerprint, DependsOnContentNotLayout) {
  torch::Tensor a = torch::arange(12, torch::kFloat32).reshape({3, 4});
  torch::Tensor b = a.t().contiguous().t();  // same values, other strides
  EXPECT_EQ(fingerprint(a), fingerprint(b));
  b[0][0] = 100;
  EXPECT_NE(fingerprint(a), fingerprint(b));
}

class Inner : public torch::nn::Module {
 public:
  Inner() {
    w = register_parameter("w", torch::zeros({3, 3}), false);
    scale = register_parameter("scale", torch::zeros({4}, torch::kUInt8), false);
    e4m3 = register_parameter("e4m3", torch::zeros({4}, c10::ScalarType::Float8_e4m3fn), false);
    cache = register_buffer("cache", torch::full({2}, 7.0));
  }
  torch::Tensor w, scale, e4m3, cache;
};

class Outer : public torch::nn::Module {
 public:
  Outer() {
    bias = register_parameter("bias", torch::zeros({3}), false);
    inner = register_module("inner", std::make_shared<Inner>());
  }
  torch::Tensor bias;
  std::shared_ptr<Inner> inner;
};

class DummyModel : public LifecycleModel {
 public:
  DummyModel() : m(std::make_shared<Outer>()) {
    TensorAttrs scale;
    scale.dummy_weight_value = 127;  // UE8M0: scale 1.0
    tensor_attributes().set(m->inner->scale, scale);
    TensorAttrs one;
    one.dummy_weight_value = 1.0;
    tensor_attributes().set(m->inner->e4m3, one);
    TensorAttrs cache;
    cache.persistent = false;
    tensor_attributes().set(m->inner->cache, cache);
  }
  torch::nn::Module& module() override { return *m; }
  std::set<std::string> load_weights(WeightStream& w) override { return load_module_weights(*this, w); }
  void process_weights_after_loading() override {}
  torch::Tensor forward(const torch::Tensor& x) override { return x; }
  torch::Tensor make_input(std::int64_t b, std::uint64_t) override { return torch::zeros({b, 3}); }
  std::shared_ptr<Outer> m;
};

TEST(DummyLoad, InitialisesEachTensorOnceHonoursConstantsSkipsNonPersistent) {
  DummyModel model;
  const auto names = dummy_load(model, 7);
  EXPECT_EQ(names, (std::vector<std::string>{"bias", "inner.w", "inner.scale", "inner.e4m3"}));
  EXPECT_TRUE(torch::all(model.m->inner->scale == 127).item<bool>());
  EXPECT_TRUE(torch::all(model.m->inner->e4m3.to(torch::kFloat32) == 1.0).item<bool>());
  EXPECT_TRUE(torch::all(model.m->inner->cache == 7.0).item<bool>()) << "non-persistent touched";
  const torch::Tensor w = model.m->inner->w;
  EXPECT_GT(w.abs().max().item<float>(), 0.0f);
  EXPECT_LE(w.abs().max().item<float>(), 1e-3f);
}

// init_count counts what it observes: every in-place fill bumps the tensor's version counter once.
TEST(DummyLoad, EachFillBumpsTheVersionCounterExactlyOnce) {
  DummyModel model;
  std::map<std::string, std::int64_t> before;
  for (const auto& t : live_tensors(model)) before[t.name] = static_cast<std::int64_t>(t.tensor._version());
  model.load_dummy_weights(7);  // the default: graphcheck's loader
  for (const auto& t : live_tensors(model)) {
    const std::int64_t writes = static_cast<std::int64_t>(t.tensor._version()) - before[t.name];
    EXPECT_EQ(writes, t.name == "inner.cache" ? 0 : 1) << t.name;
  }
}

TEST(DummyLoad, DeterministicInTheSeed) {
  DummyModel a, b, c;
  dummy_load(a, 7);
  dummy_load(b, 7);
  dummy_load(c, 8);
  EXPECT_TRUE(torch::equal(a.m->inner->w, b.m->inner->w));
  EXPECT_FALSE(torch::equal(a.m->inner->w, c.m->inner->w));
}

}  // namespace
}  // namespace graphcheck

namespace graphcheck {
namespace {

std::map<std::string, int> write_counts(LifecycleModel& model) {
  std::map<std::string, int> counts;
  dummy_load(model, 3, [&](const std::string& name, const torch::Tensor&) { ++counts[name]; });
  return counts;
}

TEST(DummyLoadMutations, RecursiveInitWritesEachTensorOncePerAncestor) {
  DummyModel clean;
  const auto once = write_counts(clean);
  for (const auto& [name, count] : once) EXPECT_EQ(count, 1) << name;
  mutation::Scope scope({"dummy.recursive_init"});
  DummyModel mutated;
  const auto counts = write_counts(mutated);
  EXPECT_EQ(counts.at("bias"), 1);
  EXPECT_EQ(counts.at("inner.w"), 2);  // by the root and by inner
  EXPECT_EQ(counts.at("inner.scale"), 2);
}

TEST(DummyLoadMutations, InitNonPersistentTouchesTheBuffer) {
  mutation::Scope scope({"dummy.init_non_persistent"});
  DummyModel model;
  const auto counts = write_counts(model);
  EXPECT_EQ(counts.count("inner.cache"), 1u);
  EXPECT_FALSE(torch::all(model.m->inner->cache == 7.0).item<bool>());
}

TEST(DummyLoadMutations, ValueAfterFloatCheckSkipsIntegerConstants) {
  mutation::Scope scope({"dummy.value_after_float_check"});
  DummyModel model;
  dummy_load(model, 3);
  EXPECT_TRUE(torch::all(model.m->inner->e4m3.to(torch::kFloat32) == 1.0).item<bool>());
  EXPECT_FALSE(torch::all(model.m->inner->scale == 127).item<bool>());
}

template <class Fn>
engine::OpLogDigest op_log_of(Fn&& forward, const std::vector<torch::Tensor>& inputs = {}) {
  engine::OpLogDigest d;
  {
    engine::OpLogScope scope(d, inputs);
    forward();
  }
  return d;
}

at::Tensor wrapped(double v) {
  at::Tensor t = c10::scalar_to_tensor(v);
  t.unsafeGetTensorImpl()->set_wrapped_number(true);
  return t;
}

// Note [Where a forward stops repeating]: the first top-level op whose outputs differ between two
// runs is named, past ops that return uninitialised memory or write into part of it (whose bytes
// differ too, each run's empty() getting a block written before it) and the ops that repeat.
TEST(OpTrail, TwoRunsFirstPartAtTheOpWhoseOutputsDifferNotAtAnUninitialisedOne) {
  torch::NoGradGuard no_grad;
  const torch::Tensor w = torch::randn({256});
  const torch::Tensor half = torch::arange(256) < 128;
  const auto forward = [&] {
    torch::Tensor buffer = torch::empty({256});
    buffer.copy_(w);
    // An in-place op on uninitialised memory that leaves half of it as it was.
    torch::Tensor partial = torch::empty({256});
    partial.masked_fill_(half, 1.0);
    const torch::Tensor y = buffer * 2 + 1 + partial.narrow(0, 0, 128).sum();
    return torch::dropout(y, 0.5, /*train=*/true).sum();
  };
  // Before each run blocks of the buffers' size are written and freed, so that the run's empty()
  // calls most likely get them back holding that run's own bytes.
  const auto dirty = [](float value) {
    const torch::Tensor a = torch::full({256}, value);
    const torch::Tensor b = torch::full({256}, value + 10);
  };
  engine::OpTrail a, b;
  dirty(1);
  {
    engine::OpTrailScope trail(a);
    (void)forward();
  }
  dirty(2);
  {
    engine::OpTrailScope trail(b);
    (void)forward();
  }
  const auto at = engine::first_divergence(a, b);
  ASSERT_TRUE(at.has_value());
  ASSERT_LT(*at, b.ops.size());
  EXPECT_EQ(b.ops[*at].name, "aten::dropout");
  EXPECT_EQ(b.ops.front().name, "aten::empty");
  EXPECT_FALSE(engine::first_divergence(a, a).has_value());
  // Another op at one position is a divergence too (a branch taken on a random value).
  engine::OpTrail other = a;
  other.ops[1].name = "aten::fill_";
  EXPECT_EQ(engine::first_divergence(a, other), std::optional<std::size_t>(1));
}

// Note [Eager op log]: what a recording keeps of a call (the op, its host values) and its order.
TEST(EagerOpLog, TheSameCallsGiveTheSameDigestAnotherHostValueOrOrderAnother) {
  torch::NoGradGuard no_grad;
  const torch::Tensor x = torch::randn({4, 4});
  const torch::Tensor w = torch::randn({4, 4});
  const auto half = [&] { (void)(x * 0.5).add(1); };
  const engine::OpLogDigest a = op_log_of(half, {x});
  EXPECT_EQ(a.ops, 2u);
  EXPECT_EQ(a, op_log_of(half, {x}));
  // Other inputs of the same shapes and dtypes: the same digest (tensors are not host values).
  const torch::Tensor y = torch::randn({4, 4});
  EXPECT_EQ(a, op_log_of([&] { (void)(y * 0.5).add(1); }, {y}));
  // A tensor made outside the forward (a weight) by which one it is (Note [A read chosen at
  // capture]): another weight read by the same ops is another log, a view of it is still it.
  EXPECT_EQ(op_log_of([&] { (void)x.mul(w); }, {x}), op_log_of([&] { (void)x.mul(w); }, {x}));
  EXPECT_NE(op_log_of([&] { (void)x.mul(w); }, {x}), op_log_of([&] { (void)x.mul(y); }, {x}));
  EXPECT_EQ(op_log_of([&] { (void)x.mul(w.t()).add(w); }, {x}), op_log_of([&] { (void)x.mul(w.t()).add(w); }, {x}));
  EXPECT_NE(op_log_of([&] { (void)x.mul(w.t()).add(w); }, {x}), op_log_of([&] { (void)x.mul(w.t()).add(y); }, {x}));
  EXPECT_NE(a, op_log_of([&] { (void)(x * 0.25).add(1); }));                    // a scalar
  EXPECT_NE(a, op_log_of([&] { (void)(x * 0.5).add(2); }));                     // another
  EXPECT_NE(a, op_log_of([&] { (void)x.add(1).mul(0.5); }));                    // the order
  EXPECT_NE(a, op_log_of([&] { (void)(x.to(torch::kDouble) * 0.5).add(1); }));  // a dtype
  EXPECT_NE(a, op_log_of([&] { (void)x.narrow(0, 0, 2).mul(0.5).add(1); }));    // an op more
  EXPECT_NE(op_log_of([&] { (void)x.narrow(0, 0, 2); }), op_log_of([&] { (void)x.narrow(0, 1, 2); }));
  // A wrapped number's value counts, as a recording's host value does (Python's `x * s`).
  const at::Tensor h1 = wrapped(0.5), h2 = wrapped(0.5), q = wrapped(0.25);
  EXPECT_EQ(op_log_of([&] { (void)x.mul(h1); }), op_log_of([&] { (void)x.mul(h2); }));
  EXPECT_NE(op_log_of([&] { (void)x.mul(h1); }), op_log_of([&] { (void)x.mul(q); }));
  const at::Tensor plain = torch::full({}, 0.25, torch::kDouble);  // not wrapped: a tensor
  EXPECT_EQ(op_log_of([&] { (void)x.mul(torch::full({}, 0.5, torch::kDouble)); }).ops, 2u);
  EXPECT_EQ(op_log_of([&] { (void)x.mul(plain); }).ops, 1u);
  // Bytes the host wrote into a tensor (torch::tensor from a vector: no op takes the values), as
  // the first op to read them sees them: a recording keeps them too (Recording::host_writes).
  const auto host_built = [&](float v) {
    return op_log_of([&] { (void)x.mul(torch::tensor(std::vector<float>{v, 1.0F, 1.0F, 1.0F})); });
  };
  EXPECT_EQ(host_built(0.5F), host_built(0.5F));
  EXPECT_NE(host_built(0.5F), host_built(0.25F));
  // Inside a list of optional tensors too (aten::index's indices: x[:, top] in Python).
  const auto indexed = [&](std::int64_t i) {
    return op_log_of([&] { (void)x.index({torch::tensor(std::vector<std::int64_t>{i})}); });
  };
  EXPECT_EQ(indexed(1), indexed(1));
  EXPECT_NE(indexed(1), indexed(2));
  // Only the forward's own calls: linear's inner ops are not logged.
  EXPECT_EQ(op_log_of([&] { (void)torch::linear(x, w); }).ops, 1u);
  EXPECT_EQ(op_log_of([] {}).ops, 0u);
}

// ---- the coverage perturbation (Note [A perturbation undone exactly]) ----------------------------

// A pattern's value in its format, as a double (exact for every format here).
template <class L>
double value_of(typename L::bits u) {
  if constexpr (std::is_same_v<L, perturb::Binary16>) return static_cast<float>(c10::Half(u, c10::Half::from_bits()));
  if constexpr (std::is_same_v<L, perturb::BFloat16>) return static_cast<float>(c10::BFloat16(u, c10::BFloat16::from_bits()));
  if constexpr (std::is_same_v<L, perturb::Binary32>) return std::bit_cast<float>(u);
  if constexpr (std::is_same_v<L, perturb::Binary64>) return std::bit_cast<double>(u);
}

// Every pattern of a 16-bit format; for the wider ones, every 2^16th pattern (the four
// neighbours of each too) and the patterns of the cycle, their neighbours and the edges.
template <class L>
std::vector<typename L::bits> patterns_of() {
  using B = typename L::bits;
  std::vector<B> out;
  if constexpr (sizeof(B) == 2) {
    for (std::uint32_t u = 0; u <= 0xFFFF; ++u) out.push_back(static_cast<B>(u));
  } else {
    const int shift = 8 * static_cast<int>(sizeof(B)) - 16;
    for (std::uint64_t hi = 0; hi <= 0xFFFF; ++hi) {
      for (B low : {B{0}, B{1}, B{2}, B(~B{0} >> 16), B(B(~B{0} >> 16) - 1)}) out.push_back(B(B(hi) << shift) | low);
    }
    for (B sign : {B{0}, L::kSign}) {
      for (B base : {B{0}, L::kSixtyFourth, L::kTop, B(L::kSixtyFourth | L::kTop), L::kExponent, B(L::kExponent | L::kTop),
                     B(L::kExponent - 1), B{1}}) {
        for (B near : {B(base - 1), base, B(base + 1)}) out.push_back(B(B(near & B(~L::kSign)) | sign));
      }
    }
  }
  return out;
}

template <class L>
void expect_undone_and_moved(const char* format) {
  using B = typename L::bits;
  int failures = 0;
  for (const B u : patterns_of<L>()) {
    const B f = perturb::forward<L>(u);
    const double x = value_of<L>(u), y = value_of<L>(f);
    bool ok = perturb::backward<L>(f) == u;
    if (!std::isfinite(x)) {
      ok = ok && f == u;  // infinity and NaN stay, bit for bit
    } else if (x == 0) {
      ok = ok && std::fabs(y) == 1.0 / 64 && std::signbit(x) == std::signbit(y);
    } else {
      ok = ok && std::isfinite(y) && std::signbit(x) == std::signbit(y) && std::fabs(y - x) >= 0.25 * std::fabs(x);
    }
    if (!ok && ++failures <= 5) {
      ADD_FAILURE() << format << ": pattern 0x" << std::hex << static_cast<std::uint64_t>(u) << " (" << x
                    << ") -> 0x" << static_cast<std::uint64_t>(f) << " (" << y << ") -> 0x"
                    << static_cast<std::uint64_t>(perturb::backward<L>(f));
    }
  }
  EXPECT_EQ(failures, 0) << format;
}

TEST(PerturbBits, EveryFiniteValueMovesByAQuarterStaysFiniteAndComesBackBitForBit) {
  expect_undone_and_moved<perturb::Binary16>("binary16");
  expect_undone_and_moved<perturb::BFloat16>("bfloat16");
  expect_undone_and_moved<perturb::Binary32>("binary32");
  expect_undone_and_moved<perturb::Binary64>("binary64");
  // Zero goes to 1/64, as it did under x * 1.125 + 1/64.
  EXPECT_EQ(std::bit_cast<float>(perturb::forward<perturb::Binary32>(0u)), 1.0f / 64);
  for (int x = 0; x < 256; ++x) {
    const auto b = static_cast<std::uint8_t>(x);
    EXPECT_EQ(perturb::backward_byte(perturb::forward_byte(b)), b) << x;
    if (x == 255) {
      EXPECT_EQ(perturb::forward_byte(b), 255) << "NaN in UE8M0 stays";
    } else {
      EXPECT_NE(perturb::forward_byte(b), b) << x;
      EXPECT_NE(perturb::forward_byte(b), 255) << "no byte becomes UE8M0's NaN: " << x;
    }
  }
}

// The loops over arrays (four parts side by side from 256 KiB) give each element's pattern.
TEST(PerturbBits, ArraysOfEveryLengthGiveEachElementsPattern) {
  std::mt19937_64 rng(7);
  for (const std::int64_t n : {0, 1, 7, 4099, 65536 + 3, 300001}) {
    std::vector<std::uint16_t> half(n), bf(n);
    std::vector<std::uint32_t> single(n);
    std::vector<std::uint64_t> dbl(n);
    std::vector<std::uint8_t> bytes(n);
    for (std::int64_t i = 0; i < n; ++i) {
      half[i] = bf[i] = static_cast<std::uint16_t>(rng());
      single[i] = static_cast<std::uint32_t>(rng());
      dbl[i] = rng();
      bytes[i] = static_cast<std::uint8_t>(rng());
    }
    auto h = half, b = bf;
    auto s = single;
    auto d = dbl;
    auto y = bytes;
    perturb::apply_forward(perturb::Format::binary16, h.data(), n);
    perturb::apply_forward(perturb::Format::bfloat16, b.data(), n);
    perturb::apply_forward(perturb::Format::binary32, s.data(), n);
    perturb::apply_forward(perturb::Format::binary64, d.data(), n);
    perturb::apply_forward(perturb::Format::byte, y.data(), n);
    std::int64_t wrong = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      wrong += h[i] != perturb::forward<perturb::Binary16>(half[i]);
      wrong += b[i] != perturb::forward<perturb::BFloat16>(bf[i]);
      wrong += s[i] != perturb::forward<perturb::Binary32>(single[i]);
      wrong += d[i] != perturb::forward<perturb::Binary64>(dbl[i]);
      wrong += y[i] != perturb::forward_byte(bytes[i]);
    }
    EXPECT_EQ(wrong, 0) << "forward, n " << n;
    perturb::apply_backward(perturb::Format::binary16, h.data(), n);
    perturb::apply_backward(perturb::Format::bfloat16, b.data(), n);
    perturb::apply_backward(perturb::Format::binary32, s.data(), n);
    perturb::apply_backward(perturb::Format::binary64, d.data(), n);
    perturb::apply_backward(perturb::Format::byte, y.data(), n);
    EXPECT_TRUE(h == half && b == bf && s == single && d == dbl && y == bytes) << "back, n " << n;
  }
}

// libtorch's ops (the device's path, run here on the host) give the loops' patterns, in pieces of
// any size, over every pattern of the 16-bit formats and bytes and the samples of the wider ones,
// and through a transposed view.
template <class L>
void expect_ops_give_the_loops_patterns(perturb::Format format, torch::ScalarType dtype) {
  using B = typename L::bits;
  std::vector<B> patterns = patterns_of<L>();
  patterns.resize(patterns.size() / 6 * 6);  // rows of 6, for the transposed view
  const auto n = static_cast<std::int64_t>(patterns.size());
  torch::Tensor flat = torch::empty({n}, torch::TensorOptions().dtype(dtype));
  std::memcpy(flat.data_ptr(), patterns.data(), patterns.size() * sizeof(B));
  std::vector<B> expected = patterns;
  perturb::apply_forward(format, expected.data(), n);
  for (const std::int64_t piece : {std::int64_t{4099}, std::int64_t{64} << 20}) {
    for (const bool transposed : {false, true}) {
      torch::Tensor t = flat.clone();
      torch::Tensor view = transposed ? t.view({6, n / 6}).t() : t;
      passes::detail::perturb_by_ops(view, format, true, piece);
      EXPECT_EQ(std::memcmp(t.data_ptr(), expected.data(), patterns.size() * sizeof(B)), 0)
          << c10::toString(dtype) << ", pieces of " << piece << " bytes" << (transposed ? ", transposed" : "");
      passes::detail::perturb_by_ops(view, format, false, piece);
      EXPECT_EQ(std::memcmp(t.data_ptr(), patterns.data(), patterns.size() * sizeof(B)), 0)
          << c10::toString(dtype) << " not back, pieces of " << piece;
    }
  }
}

TEST(PerturbBits, LibtorchsOpsInPiecesGiveTheLoopsPatterns) {
  expect_ops_give_the_loops_patterns<perturb::Binary16>(perturb::Format::binary16, torch::kHalf);
  expect_ops_give_the_loops_patterns<perturb::BFloat16>(perturb::Format::bfloat16, torch::kBFloat16);
  expect_ops_give_the_loops_patterns<perturb::Binary32>(perturb::Format::binary32, torch::kFloat32);
  expect_ops_give_the_loops_patterns<perturb::Binary64>(perturb::Format::binary64, torch::kFloat64);
  // The temporaries of a piece: what a device holds beside the model while the test runs.
  for (const auto dtype : {torch::kHalf, torch::kFloat32, torch::kFloat64, torch::kUInt8}) {
    torch::Tensor large = torch::zeros({1 << 20}, dtype);
    const std::int64_t piece = 64 * 1024;
    auto& counter = CountingCpuAllocator::instance();
    counter.install();
    const std::int64_t base = counter.live_bytes();
    counter.reset_peak();
    passes::detail::perturb_by_ops(large, dtype == torch::kUInt8 ? perturb::Format::byte
                                          : dtype == torch::kHalf ? perturb::Format::binary16
                                          : dtype == torch::kFloat32 ? perturb::Format::binary32
                                                                     : perturb::Format::binary64,
                                   true, piece);
    const std::int64_t peak = counter.peak_bytes() - base;
    counter.uninstall();
    EXPECT_LE(peak, 5 * piece) << c10::toString(dtype) << ": " << peak << " bytes of temporaries for pieces of " << piece;
  }
  torch::Tensor bytes = torch::arange(0, 256, torch::kInt32).to(torch::kUInt8);
  torch::Tensor t = bytes.clone();
  passes::detail::perturb_by_ops(t, perturb::Format::byte, true, 7);
  std::int64_t wrong = 0;
  for (int x = 0; x < 256; ++x) wrong += t[x].item<int>() != perturb::forward_byte(static_cast<std::uint8_t>(x));
  EXPECT_EQ(wrong, 0);
  passes::detail::perturb_by_ops(t, perturb::Format::byte, false, 7);
  EXPECT_TRUE(torch::equal(t, bytes));
}

// The candidates of every kind the coverage pass meets: dense regions of each format (one of
// them transposed and one past 256 KiB), fp8, a view with gaps, and two buffers beside a view of
// some of their rows (one listed after the buffer, one before).
std::vector<NamedTensor> coverage_candidates() {
  torch::manual_seed(3);
  std::vector<NamedTensor> live;
  torch::Tensor edges = torch::randn({64});
  const float specials[] = {0.0f, -0.0f, 1.0f / 64, -1.5f / 64, std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), 1e-40f, 3.0e38f};
  for (std::size_t i = 0; i < std::size(specials); ++i) edges[static_cast<std::int64_t>(i)] = specials[i];
  live.push_back({"edges", edges});
  live.push_back({"large", torch::randn({1 << 17})});
  live.push_back({"bf16", torch::randn({3, 5}).to(torch::kBFloat16)});
  live.push_back({"half_t", torch::randn({4, 6}).to(torch::kHalf).t()});
  live.push_back({"f64", torch::randn({7}, torch::kFloat64)});
  live.push_back({"bytes", torch::arange(0, 256, torch::kInt32).to(torch::kUInt8)});
  // Positive: x * 1.125 + 1/64 has a fixed point at -1/8, and fp8's rounding widens it.
  live.push_back({"fp8", (torch::rand({16}) * 4 + 0.5).to(c10::ScalarType::Float8_e4m3fn)});
  live.push_back({"columns", torch::randn({6, 8}).slice(1, 0, 8, 2)});
  torch::Tensor fused = torch::randn({10, 8});
  live.push_back({"fused", fused});
  live.push_back({"fused_rows", fused.slice(0, 2, 6)});
  torch::Tensor stacked = torch::randn({4, 8}).to(torch::kBFloat16);  // the view listed first
  live.push_back({"stacked_rows", stacked.slice(0, 1, 3)});
  live.push_back({"stacked", stacked});
  live.push_back({"ints", torch::arange(5)});  // not perturbable: left alone
  return live;
}

torch::Tensor bits_of(const torch::Tensor& t) { return t.contiguous().view({-1}).view(torch::kUInt8).clone(); }

// measure_coverage over `live` after a clean compare (replay = eager), with each tensor's value
// before it kept for the checks.
struct CoverageRun {
  explicit CoverageRun(std::vector<NamedTensor> tensors) : live(std::move(tensors)) {
    compare.replay_outputs = compare.eager_outputs = clean().first;
    for (const auto& t : live) before.push_back(t.tensor.contiguous().clone());
  }
  // The outputs of a forward whose replay and eager agree.
  static std::pair<TensorList, TensorList> clean() { return {TensorList{torch::zeros({2})}, TensorList{torch::zeros({2})}}; }
  void run(const passes::ReplayAndEager& forward) { passes::measure_coverage(graph, live, compare, forward, out); }

  std::vector<NamedTensor> live;
  std::vector<torch::Tensor> before;
  GraphView graph;
  CompareEvent compare;
  CoverageEvent out;
};

TEST(Coverage, PerturbsEveryElementAndPutsEveryBitBackWithoutACopyOfTheDenseOnes) {
  torch::NoGradGuard no_grad;
  CoverageRun c(coverage_candidates());
  const auto& [live, before, out] = std::tie(c.live, c.before, c.out);
  std::map<std::string, std::int64_t> unmoved;
  auto& counter = CountingCpuAllocator::instance();
  counter.install();
  const std::int64_t base = counter.live_bytes();
  counter.reset_peak();
  c.run([&] {
    UncountedScope uncounted;
    for (std::size_t i = 0; i < live.size(); ++i) {
      const torch::Tensor now = live[i].tensor.contiguous().to(torch::kFloat64);
      const torch::Tensor was = before[i].to(torch::kFloat64);
      // NaN and infinity stay by design, and so does the byte 255 (UE8M0's NaN).
      const torch::Tensor stays = before[i].scalar_type() == torch::kUInt8 ? was == 255 : ~was.isfinite();
      unmoved[live[i].name] = ((now == was) & ~stays).sum().item<std::int64_t>();
    }
    return CoverageRun::clean();
  });
  const std::int64_t peak = counter.peak_bytes() - base;
  counter.uninstall();
  EXPECT_EQ(out.method, "group bisection");
  EXPECT_EQ(out.replays, 2);  // the unperturbed run (Note [Tensors the forward writes]) and the group's
  EXPECT_EQ(out.tensors, 12);  // every floating and byte tensor, the int64 one left out
  for (const auto& [name, n] : unmoved) {
    if (name == "ints") EXPECT_GT(n, 0);
    else EXPECT_EQ(n, 0) << name << ": finite elements the perturbation did not move";
  }
  for (std::size_t i = 0; i < live.size(); ++i) {
    EXPECT_TRUE(torch::equal(bits_of(live[i].tensor), bits_of(before[i]))) << live[i].name << " not put back bit for bit";
  }
  // The copied ones are fp8, the view with gaps and the two pairs: 2.6 KiB in all; "large" alone
  // is 512 KiB.
  EXPECT_LT(peak, 64 * 1024) << "the dense tensors were copied";
}

TEST(Coverage, AModelThatThrowsMidwayLeavesEveryTensorAsItWas) {
  torch::NoGradGuard no_grad;
  // The first run is the unperturbed one (Note [Tensors the forward writes]); the second is the
  // group's, with every candidate perturbed.
  for (const int failing_run : {1, 2}) {
    CoverageRun c(coverage_candidates());
    int runs = 0;
    EXPECT_THROW(c.run([&] {
      if (++runs == failing_run) throw std::runtime_error("forward failed");
      return CoverageRun::clean();
    }),
                 std::runtime_error);
    EXPECT_EQ(runs, failing_run);
    for (std::size_t i = 0; i < c.live.size(); ++i) {
      EXPECT_TRUE(torch::equal(bits_of(c.live[i].tensor), bits_of(c.before[i])))
          << c.live[i].name << ", run " << failing_run;
    }
  }
}

// Note [One perturbation for a cycle's graphs]: graphs measured at once each get what
// measure_coverage gives them alone (method, lists, names, candidates and runs), the shared
// fingerprints and group made once. "whole" replays a = 1, b = 2 and c = 3 from the live tensors,
// as eager does; "stale_b" replays b from a copy taken before (eager reads the live one) and
// reads b under its own name, where "whole" reads it as "b_tied" (one region, two names: each
// graph names it as alone); "differs" already disagrees with eager before any perturbation. And
// a model of one tensor, whose group of one is classified at once.
TEST(Coverage, GraphsMeasuredTogetherEachGetWhatTheyWouldAlone) {
  torch::NoGradGuard no_grad;
  torch::Tensor a = torch::full({4}, 1.0F), b = torch::full({4}, 2.0F), c = torch::full({4}, 3.0F);
  const torch::Tensor b_copy = b.clone();
  const auto sums = [](const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& z) {
    return TensorList{torch::stack({x.sum(), y.sum(), z.sum()})};
  };
  const auto read = [](std::initializer_list<const char*> names) {
    GraphView v;
    for (const char* n : names) {
      ResolvedRead r;
      r.name = n;
      v.reads.push_back(r);
    }
    return v;
  };
  struct Graph {
    GraphView view;
    CompareEvent compare;
    passes::ReplayAndEager run;
  };
  const auto measure = [&](const std::vector<NamedTensor>& live, std::vector<Graph>& graphs, bool together) {
    std::vector<CoverageEvent> events(graphs.size());
    std::vector<passes::CoverageGraph> all;
    for (std::size_t k = 0; k < graphs.size(); ++k) {
      all.push_back({&graphs[k].view, &graphs[k].compare, graphs[k].run, &events[k]});
    }
    if (together) {
      passes::measure_coverage(all, live);
    } else {
      for (std::size_t k = 0; k < graphs.size(); ++k) {
        passes::measure_coverage(graphs[k].view, live, graphs[k].compare, graphs[k].run, events[k]);
      }
    }
    return events;
  };
  for (const bool one_tensor : {false, true}) {
    std::vector<NamedTensor> live = {{"a", a}, {"b_tied", b}, {"b", b}, {"c", c}};
    if (one_tensor) live = {{"b", b}};
    const TensorList clean = sums(a, b, c);
    std::vector<Graph> graphs(3);
    graphs[0] = {read({"a", "b_tied"}), {}, [&] { return std::make_pair(sums(a, b, c), sums(a, b, c)); }};
    graphs[1] = {read({"c", "b"}), {}, [&] { return std::make_pair(sums(a, b_copy, c), sums(a, b, c)); }};
    graphs[2] = {read({}), {}, [&] { return std::make_pair(TensorList{sums(a, b, c)[0] + 1}, sums(a, b, c)); }};
    for (auto& g : graphs) g.compare.replay_outputs = g.compare.eager_outputs = clean;
    graphs[2].compare.replay_outputs = {clean[0] + 1};
    const std::vector<CoverageEvent> alone = measure(live, graphs, false);
    const std::vector<CoverageEvent> together = measure(live, graphs, true);
    for (std::size_t k = 0; k < graphs.size(); ++k) {
      const std::string what = (one_tensor ? "one tensor, graph " : "graph ") + std::to_string(k);
      EXPECT_EQ(together[k].method, alone[k].method) << what;
      EXPECT_EQ(together[k].uncovered, alone[k].uncovered) << what;
      EXPECT_EQ(together[k].replay_only, alone[k].replay_only) << what;
      EXPECT_EQ(together[k].partial, alone[k].partial) << what;
      EXPECT_EQ(together[k].tensors, alone[k].tensors) << what;
      EXPECT_EQ(together[k].replays, alone[k].replays) << what;
      EXPECT_EQ(together[k].graph, &graphs[k].view) << what;
    }
    // The unperturbed run, then the group's (many tensors) or the one tensor's own (one).
    EXPECT_EQ(alone[0].replays, 2);
    if (one_tensor) {
      EXPECT_EQ(alone[1].replays, 2);
    }
    EXPECT_EQ(alone[1].uncovered, std::vector<std::string>{"b"}) << "the stale graph's own name for the region";
    EXPECT_TRUE(alone[0].uncovered.empty());
    EXPECT_EQ(alone[2].method, "one tensor at a time (replay already differs from eager)");
    EXPECT_TRUE(torch::equal(a, torch::full({4}, 1.0F)) && torch::equal(b, torch::full({4}, 2.0F)) &&
                torch::equal(c, torch::full({4}, 3.0F)));
  }
}

// A meta tensor (a placeholder with no data) is a candidate as before, perturbed through the copy
// path, which does nothing to it: never fingerprinted or perturbed in place.
TEST(Coverage, AMetaTensorAmongTheCandidatesIsNoFailure) {
  torch::NoGradGuard no_grad;
  torch::Tensor real = torch::randn({64});
  const torch::Tensor was = real.clone();
  CoverageRun c({{"placeholder", torch::empty({8}, torch::Device("meta"))}, {"real", real}});
  bool moved = false;
  c.run([&] {
    moved = moved || !torch::equal(real, was);
    return CoverageRun::clean();
  });
  EXPECT_EQ(c.out.tensors, 2);
  EXPECT_TRUE(moved);
  EXPECT_TRUE(torch::equal(bits_of(real), bits_of(was)));
}

// Note [Tensors the forward writes]: a tensor the forward writes, by a libtorch op or through its
// raw memory, is copied, not put back by the inverse of what the forward wrote; the others stay
// in place; each perturbation is a write to whoever watches the version counter.
TEST(Coverage, TensorsTheForwardWritesAreCopiedAndKeepWhatItWrote) {
  torch::NoGradGuard no_grad;
  torch::Tensor cache = torch::ones({1 << 16});     // written by an in-place op
  torch::Tensor scale = torch::full({1 << 16}, 3.0);  // written through its memory (a kernel)
  std::vector<NamedTensor> tensors = coverage_candidates();
  tensors.push_back({"cache", cache});
  tensors.push_back({"scale", scale});
  CoverageRun c(std::move(tensors));
  const auto& [live, before, out] = std::tie(c.live, c.before, c.out);
  std::vector<std::int64_t> versions;
  for (const auto& t : live) versions.push_back(static_cast<std::int64_t>(t.tensor._version()));
  std::int64_t bumped = 0;
  auto& counter = CountingCpuAllocator::instance();
  counter.install();
  const std::int64_t base = counter.live_bytes();
  counter.reset_peak();
  int runs = 0;
  c.run([&] {
    if (++runs == 2) {
      for (std::size_t i = 0; i < live.size(); ++i) bumped += live[i].tensor._version() != versions[i];
    }
    cache.fill_(2.0);
    const float five = 5.0f;
    for (std::int64_t i = 0; i < scale.numel(); ++i) std::memcpy(static_cast<float*>(scale.data_ptr()) + i, &five, 4);
    return CoverageRun::clean();
  });
  const std::int64_t peak = counter.peak_bytes() - base;
  counter.uninstall();
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(out.replays, 2);
  EXPECT_TRUE(torch::equal(cache, torch::full_like(cache, 2.0))) << "not the forward's write: " << cache[0].item<float>();
  EXPECT_TRUE(torch::equal(scale, torch::full_like(scale, 5.0))) << "not the forward's write: " << scale[0].item<float>();
  for (std::size_t i = 0; i + 2 < live.size(); ++i) {
    EXPECT_TRUE(torch::equal(bits_of(live[i].tensor), bits_of(before[i]))) << live[i].name;
  }
  // Every perturbable tensor read as written when perturbed ("ints" is not perturbed).
  EXPECT_EQ(bumped, static_cast<std::int64_t>(live.size()) - 1);
  // The two written ones are copied (256 KiB each); "large" (512 KiB) stays in place.
  EXPECT_LT(peak, 2 * (256 << 10) + 64 * 1024);
}

}  // namespace
}  // namespace graphcheck
