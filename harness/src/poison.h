#pragma once
// Poison patterns and survivor counting (scans at memory speed: byte_scan.h) for the poison probe (DESIGN §1.4). The poison is the
// byte 0xFF (0x80 for the float8 "fnuz" types, whose only NaN it is), which is NaN in every
// floating dtype: f64, f32, f16, bf16, float8_e4m3fn, float8_e5m2, float8_e8m0fnu. Dtypes without
// NaN (uint8 payloads such as packed E2M1 or UE8M0 scales, integers) hold the same byte as a
// sentinel, which a legitimate value can equal: an element counts as surviving only where the
// value it should hold differs from the sentinel.

#include <c10/core/Storage.h>
#include <torch/types.h>

#include <cstdint>
#include <string>

namespace graphcheck {

[[nodiscard]] std::uint8_t poison_byte(c10::ScalarType dtype);
// Whether the poison pattern reads as NaN in this dtype (so it turns a replay loud on its own).
[[nodiscard]] bool poison_is_nan(c10::ScalarType dtype);

// [numel, element_size] bytes of a tensor's elements (a copy when it is not contiguous).
[[nodiscard]] torch::Tensor element_bytes(const torch::Tensor& t);

// Fills every element of `t` (in place, whatever its strides) with the poison pattern.
void fill_poison(torch::Tensor t);
// Fills every byte of a storage.
void fill_storage(const c10::Storage& storage, std::uint8_t byte);

struct Survivors {
  std::int64_t count = 0;    // elements that still hold the poison
  std::int64_t first = -1;   // the first such element's index, -1 when none
  std::int64_t elements = 0;
  std::string basis;         // how survivors were told apart from legitimate values
};

// Elements of `t` that still hold the poison pattern. `expected`: what `t` should hold (compared
// only when shape and dtype agree), or an undefined tensor. With an expected value, elements whose
// expected value is itself the pattern never count. Without one, a NaN dtype counts every pattern
// element; a dtype without NaN counts only when every element kept the sentinel.
[[nodiscard]] Survivors count_survivors(const torch::Tensor& t, const torch::Tensor& expected);
// The same rule as a bool mask over the elements of `t` (flattened).
[[nodiscard]] torch::Tensor survivor_mask(const torch::Tensor& t, const torch::Tensor& expected);
// Whether each element of `t` (flattened) holds the poison pattern in every byte.
[[nodiscard]] torch::Tensor pattern_mask(const torch::Tensor& t);

}  // namespace graphcheck
