// The pure parts of the CUDA backend's pointer audit (Note [Pointer audit]) on synthetic
// parameter buffers: layout walking, word scanning, range classification and the two-capture
// cross-check. Runs on CPU in every build.

#include "backends/pointer_audit.h"

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <map>

namespace graphcheck::audit {
namespace {

ParamInfoFn from(std::vector<ParamSlot> slots) {
  return [slots](std::size_t i) -> std::optional<ParamSlot> {
    if (i >= slots.size()) return std::nullopt;
    return slots[i];
  };
}

TEST(PointerAudit, WalksTheLayoutUntilTheDriverSaysNoMore) {
  // (const float* w, int n, struct {void* p[2];} s, double x): the int is padded to 8.
  const std::vector<ParamSlot> slots = {{0, 8}, {8, 4}, {16, 16}, {32, 8}};
  EXPECT_EQ(walk_param_layout(from(slots)), slots);
  EXPECT_TRUE(walk_param_layout(from({})).empty());
}

TEST(PointerAudit, RejectsLayoutsThatCannotBeRight) {
  EXPECT_THROW((void)walk_param_layout(from({{0, 8}, {4, 8}})), BadLayout);  // overlap
  EXPECT_THROW((void)walk_param_layout(from({{8, 8}, {0, 8}})), BadLayout);  // backwards
  EXPECT_THROW((void)walk_param_layout(from({{0, 0}})), BadLayout);          // empty
  EXPECT_THROW((void)walk_param_layout(from({{32760, 8}})), BadLayout);      // too far
  try {
    (void)walk_param_layout(from({{0, 8}, {4, 8}}));
  } catch (const BadLayout& e) {
    EXPECT_STREQ(e.what(),
                 "kernel parameter 1 at offset 4 overlaps the one before it (which ends at 8)");
  }
}

TEST(PointerAudit, ParamImagePlacesEachValueAtItsOffset) {
  const std::uint64_t ptr = 0x7f0000001000;
  const std::int32_t n = 42;
  const std::array<std::uint64_t, 2> pair = {0x7f0000002000, 0x7f0000003008};
  const std::vector<ParamSlot> layout = {{0, 8}, {8, 4}, {16, 16}};
  const void* values[] = {&ptr, &n, pair.data()};
  const std::vector<std::byte> image = param_image(layout, values);
  ASSERT_EQ(image.size(), 32u);
  std::uint64_t w0 = 0, w2 = 0, w3 = 0;
  std::int32_t got_n = 0, pad = -1;
  std::memcpy(&w0, image.data(), 8);
  std::memcpy(&got_n, image.data() + 8, 4);
  std::memcpy(&pad, image.data() + 12, 4);
  std::memcpy(&w2, image.data() + 16, 8);
  std::memcpy(&w3, image.data() + 24, 8);
  EXPECT_EQ(w0, ptr);
  EXPECT_EQ(got_n, 42);
  EXPECT_EQ(pad, 0);  // padding is zero, never stale bytes
  EXPECT_EQ(w2, pair[0]);
  EXPECT_EQ(w3, pair[1]);
}

TEST(PointerAudit, ScansAlignedWordsInsideParametersOfAtLeastEightBytes) {
  // A 4-byte int at 8 and a 12-byte struct at 12 (words at 16 only: 12..16 and 24 are partial).
  std::vector<std::byte> image(24);
  const std::vector<ParamSlot> layout = {{0, 8}, {8, 4}, {12, 12}};
  const std::uint64_t a = 0x1111, b = 0x2222;
  std::memcpy(image.data(), &a, 8);
  std::memcpy(image.data() + 16, &b, 8);
  const std::vector<ParamWord> words = scan_words(image, layout);
  ASSERT_EQ(words.size(), 2u);
  EXPECT_EQ(words[0].value, a);
  EXPECT_EQ(words[0].param, 0u);
  EXPECT_EQ(words[0].offset, 0u);
  EXPECT_EQ(words[1].value, b);
  EXPECT_EQ(words[1].param, 2u);
  EXPECT_EQ(words[1].offset, 16u);
  // Without a layout: every aligned word of the image.
  EXPECT_EQ(scan_words(image, {}).size(), 3u);
}

TEST(PointerAudit, ExtraBufferFormIsParsed) {
  std::array<std::byte, 16> buffer{};
  std::size_t size = buffer.size();
  const void* extra[] = {reinterpret_cast<void*>(kLaunchParamBufferPointer), buffer.data(),
                         reinterpret_cast<void*>(kLaunchParamBufferSize), &size,
                         reinterpret_cast<void*>(kLaunchParamEnd)};
  auto span = extra_buffer(extra);
  ASSERT_TRUE(span.has_value());
  EXPECT_EQ(span->data(), buffer.data());
  EXPECT_EQ(span->size(), 16u);
  const void* none[] = {reinterpret_cast<void*>(kLaunchParamEnd)};
  EXPECT_FALSE(extra_buffer(none).has_value());
  EXPECT_FALSE(extra_buffer(nullptr).has_value());
}

TEST(PointerAudit, RangesClassifyInteriorPointersByPrecedence) {
  AuditRanges ranges;
  ranges.add(0x10000, 0x10000, RangeKind::segment);  // an allocator segment ...
  ranges.add(0x10000, 0x1000, RangeKind::tensor);    // ... holding a weight
  ranges.add(0x12000, 0x100, RangeKind::input);      // ... and an input
  ranges.add(0x40000, 0x8000, RangeKind::pool);
  EXPECT_EQ(ranges.classify(0x10000), RangeKind::tensor);
  EXPECT_EQ(ranges.classify(0x10ff8), RangeKind::tensor);   // interior
  EXPECT_EQ(ranges.classify(0x11000), RangeKind::segment);  // one past the tensor
  EXPECT_EQ(ranges.classify(0x12010), RangeKind::input);
  EXPECT_EQ(ranges.classify(0x47fff), RangeKind::pool);
  EXPECT_FALSE(ranges.classify(0x48000).has_value());
  EXPECT_FALSE(ranges.classify(0xffff).has_value());
  EXPECT_FALSE(ranges.classify(0).has_value());
}

// A synthetic graph of two kernels: (weight*, input*, n) and (struct {pool*, weight2+64}, seed).
struct Synthetic {
  std::uint64_t weight = 0x7f0000100000, weight2 = 0x7f0000200000, input = 0x7f0000300000;
  std::uint64_t pool = 0x7f0000400000, seed = 0;
  AuditRanges ranges;
  Synthetic() {
    ranges.add(weight, 4096, RangeKind::tensor);
    ranges.add(weight2, 4096, RangeKind::tensor);
    ranges.add(input, 256, RangeKind::input);
    ranges.add(pool, 1 << 20, RangeKind::pool);
  }
  AuditResult capture(std::uint64_t pool_offset, std::uint64_t seed_value) const {
    AuditResult r;
    const std::int64_t n = 64;
    const std::vector<ParamSlot> k0 = {{0, 8}, {8, 8}, {16, 8}};
    const void* v0[] = {&weight, &input, &n};
    audit_kernel_words(r.nodes++, param_image(k0, v0), k0, ranges, r);
    const std::array<std::uint64_t, 2> s = {pool + pool_offset, weight2 + 64};
    const std::vector<ParamSlot> k1 = {{0, 16}, {16, 8}};
    const void* v1[] = {s.data(), &seed_value};
    audit_kernel_words(r.nodes++, param_image(k1, v1), k1, ranges, r);
    audit_memcpy_source(r.nodes++, weight2, 512, ranges, r);
    return r;
  }
};

TEST(PointerAudit, KernelWordsAndMemcpySourcesBecomeHits) {
  Synthetic g;
  const AuditResult r = g.capture(0x100, 7);
  ASSERT_EQ(r.hits.size(), 5u);  // weight, input, pool, weight2+64, memcpy of weight2
  EXPECT_EQ(r.words_scanned, 6u);
  const std::vector<AuditRead> reads = reads_of(r.hits);
  ASSERT_EQ(reads.size(), 3u);  // inputs and pool intermediates are not the model's state
  EXPECT_EQ(reads[0].address, g.weight);
  EXPECT_EQ(reads[0].bytes, 0u);  // bare pointer
  EXPECT_EQ(reads[1].address, g.weight2);
  EXPECT_EQ(reads[1].bytes, 512u);  // the memcpy knows its size
  EXPECT_EQ(reads[2].address, g.weight2 + 64);
}

TEST(PointerAudit, TwoCapturesRuleOutCoincidences) {
  Synthetic g;
  // A seed that happens to fall inside the weight in the first capture only.
  AuditResult first = g.capture(0x100, g.weight + 8);
  AuditResult second = g.capture(0x2000, 12345);  // intermediates elsewhere in the pool
  EXPECT_EQ(first.hits.size(), 6u);
  const std::vector<AuditHit> kept = confirm(first, second);
  ASSERT_EQ(kept.size(), 5u);
  for (const AuditHit& h : kept) EXPECT_NE(h.address, g.weight + 8);
  std::map<RangeKind, int> kinds;
  for (const AuditHit& h : kept) ++kinds[h.kind];
  EXPECT_EQ(kinds[RangeKind::pool], 1);  // the pool word moved, but at the same site

  // Different graph shapes: sites cannot be matched, addresses can (pool hits are dropped).
  second.nodes += 1;
  const std::vector<AuditHit> by_address = confirm(first, second);
  EXPECT_EQ(by_address.size(), 4u);
}

TEST(PointerAudit, UndeclaredAllocatorMemoryIsARead) {
  AuditRanges ranges;
  ranges.add(0x50000, 0x10000, RangeKind::segment);
  AuditResult r;
  const std::uint64_t p = 0x50040;
  const std::vector<ParamSlot> layout = {{0, 8}};
  const void* values[] = {&p};
  audit_kernel_words(r.nodes++, param_image(layout, values), layout, ranges, r);
  const auto reads = reads_of(r.hits);
  ASSERT_EQ(reads.size(), 1u);
  EXPECT_EQ(reads[0].kind, RangeKind::segment);
}

}  // namespace
}  // namespace graphcheck::audit
