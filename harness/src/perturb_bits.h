#pragma once
// The coverage pass's perturbation as a bijection on bit patterns (Note [A perturbation undone
// exactly]): applied in place and undone in place, bit for bit, with no copy of the tensor.
// Torch-free, compiled at -O3 so that the loops vectorise.

#include <cstddef>
#include <cstdint>

namespace graphcheck::perturb {

// Note [A perturbation undone exactly]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The coverage group test perturbs every live tensor, replays, runs eager and puts the tensors
// back. It saved a clone of each tensor first and perturbed by x * 1.125 + 1/64, which cannot be
// undone exactly: a second copy of the model at every graph's test, page-faulted in anew each time,
// and three passes over the model. A perturbation that is a bijection of the bit patterns, applied
// in place, is undone by its inverse in place, bit for bit, and needs no copy (two passes at
// memcpy's speed), as long as nothing else writes the tensor in between (passes/coverage.cpp,
// Note [Tensors the forward writes]):
//  - floats (binary16, bfloat16, binary32, binary64): the top mantissa bit flips. A normal value
//    moves by 25-50% of itself within its binade (m in [1, 1.5) goes to m + 0.5, m in [1.5, 2) to
//    m - 0.5; a subnormal by at least half of itself, 1/64 and 1.5/64 by all of it), half of
//    them up and half down, so activations do not grow layer after layer as under a common scale.
//    Zero would go to a subnormal, that is nowhere, so the four patterns {0, 1/64, m, 1/64 | m}
//    (m the top mantissa bit alone, which flipping pairs with each other) instead form a cycle:
//    0 -> 1/64 -> m -> 1.5/64 -> 0. A zero moves to 1/64, as it did under + 1/64; only the values
//    1/64 and 1.5/64 exactly become ~0. The sign stays. Infinity and NaN (exponent all ones) stay:
//    flipping a bit there could turn a NaN into infinity.
//  - bytes (uint8: packed fp4 pairs, UE8M0 scales, masks of 0 and 1): the lowest bit flips, as the
//    copy's perturbation flipped it (a mask of 0s and 1s inverts), but 252 -> 253 -> 254 -> 252
//    form a cycle and 255 stays (NaN in UE8M0), so that no byte becomes 255 (in packed fp4 255 is
//    a pair of -6s, a byte value in 256 that stays).
// On a device the coverage pass (passes/coverage.cpp) applies the same bijection by libtorch's
// ops, 16 MiB at a time (passes::detail::perturb_by_ops; at most 72 MiB of temporaries). It copies
// the others first and perturbs them by x * 1.125 + 1/64 as before (bytes by the bijection): fp8,
// conjugate and negative views,
// views that are not one dense region, views that share bytes with another tensor it perturbs (a
// bijection applied twice to a byte can undo itself), and tensors the forward writes.

enum class Format : std::uint8_t { binary16, bfloat16, binary32, binary64, byte };

// The bit layout of a binary floating-point format.
template <class Bits, int kExponentBits, int kMantissaBits>
struct Layout {
  using bits = Bits;
  static constexpr Bits kSign = Bits(Bits{1} << (kExponentBits + kMantissaBits));
  static constexpr Bits kExponent = Bits(((Bits{1} << kExponentBits) - 1) << kMantissaBits);
  static constexpr Bits kTop = Bits(Bits{1} << (kMantissaBits - 1));
  static constexpr Bits kSixtyFourth = Bits(Bits((1 << (kExponentBits - 1)) - 1 - 6) << kMantissaBits);
};
using Binary16 = Layout<std::uint16_t, 5, 10>;
using BFloat16 = Layout<std::uint16_t, 8, 7>;
using Binary32 = Layout<std::uint32_t, 8, 23>;
using Binary64 = Layout<std::uint64_t, 11, 52>;

// One element's pattern, forward and back. Both flip bits of the pattern: m (the top mantissa
// bit) unless the value is infinite or NaN, or, forward, its magnitude is 0 or m alone (those go
// to 1/64 and 1.5/64) and, back, 1/64 or 1.5/64 (those go to 0 and m); q (1/64's exponent) for
// the four patterns of the cycle alone. Written as masks of three compares, so that the loops
// over elements vectorise (a chain of selects ran at 0.17x memcpy, this at 0.55x with one stream
// and 1x with four: perturb_bits.cpp).
template <class L, bool kForward>
constexpr typename L::bits flip(typename L::bits u) {
  using B = typename L::bits;
  constexpr B q = L::kSixtyFourth, m = L::kTop;
  const auto mask = [](bool c) { return B(B{0} - B(c)); };
  const B rest = B(u & B(~(L::kSign | m)));  // 0 or q for the four patterns of the cycle
  const B zero = mask(rest == 0), sixty_fourth = mask(rest == q);
  const B special = mask((u & L::kExponent) == L::kExponent);
  const B keep_m = kForward ? zero : sixty_fourth;
  const B flips = B(((zero | sixty_fourth) & q) | (m & B(~(keep_m | special))));
  return B(u ^ flips);
}

template <class L>
constexpr typename L::bits forward(typename L::bits u) {
  return flip<L, true>(u);
}
template <class L>
constexpr typename L::bits backward(typename L::bits u) {
  return flip<L, false>(u);
}

constexpr std::uint8_t forward_byte(std::uint8_t x) {
  return x < 252 ? std::uint8_t(x ^ 1) : x == 255 ? x : x == 254 ? std::uint8_t{252} : std::uint8_t(x + 1);
}
constexpr std::uint8_t backward_byte(std::uint8_t x) {
  return x < 252 ? std::uint8_t(x ^ 1) : x == 255 ? x : x == 252 ? std::uint8_t{254} : std::uint8_t(x - 1);
}

// Applies forward (or backward) to each of the `n` elements of `format` at `data`, in place.
void apply_forward(Format format, void* data, std::int64_t n);
void apply_backward(Format format, void* data, std::int64_t n);

}  // namespace graphcheck::perturb
