// safetensors files for people (`graphcheck inspect`): single elements decoded, and a file's
// tensors listed. Torch-free.

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include <cmath>
#include <cstring>

#include "fingerprint_bytes.h"
#include "graphcheck/safetensors.h"

namespace graphcheck::safetensors {

namespace {

double half_to_double(std::uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1f, frac = h & 0x3ff;
  double v;
  if (exp == 0) v = std::ldexp(frac, -24);
  else if (exp == 31) v = frac ? NAN : INFINITY;
  else v = std::ldexp(1024 + frac, exp - 25);
  return sign ? -v : v;
}

// An 8-bit float with `exp_bits` exponent and `man_bits` mantissa bits. e4m3fn has no
// infinities and one NaN per sign (all exponent and mantissa bits set); e5m2 follows IEEE.
double minifloat_to_double(std::uint8_t b, int exp_bits, int man_bits, int bias, bool e4m3fn) {
  const int sign = b >> 7;
  const int exp = (b >> man_bits) & ((1 << exp_bits) - 1);
  const int man = b & ((1 << man_bits) - 1);
  double v;
  if (e4m3fn && exp == 0xf && man == 0x7) return NAN;
  if (!e4m3fn && exp == (1 << exp_bits) - 1) return man ? NAN : (sign ? -INFINITY : INFINITY);
  if (exp == 0) v = std::ldexp(man, 1 - bias - man_bits);
  else v = std::ldexp((1 << man_bits) + man, exp - bias - man_bits);
  return sign ? -v : v;
}

}  // namespace

std::string value_string(const std::byte* p, Dtype dtype, std::int64_t i) {
  auto load = [&](auto tag) {
    decltype(tag) v;
    std::memcpy(&v, p + i * static_cast<std::int64_t>(sizeof v), sizeof v);
    return v;
  };
  switch (dtype) {
    case Dtype::F64: return fmt::format("{:g}", load(double{}));
    case Dtype::F32: return fmt::format("{:g}", load(float{}));
    case Dtype::F16: return fmt::format("{:g}", half_to_double(load(std::uint16_t{})));
    case Dtype::BF16: {
      const std::uint32_t bits = static_cast<std::uint32_t>(load(std::uint16_t{})) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return fmt::format("{:g}", f);
    }
    case Dtype::I64: return fmt::format("{}", load(std::int64_t{}));
    case Dtype::I32: return fmt::format("{}", load(std::int32_t{}));
    case Dtype::I16: return fmt::format("{}", load(std::int16_t{}));
    case Dtype::I8: return fmt::format("{}", load(std::int8_t{}));
    case Dtype::U64: return fmt::format("{}", load(std::uint64_t{}));
    case Dtype::U32: return fmt::format("{}", load(std::uint32_t{}));
    case Dtype::U16: return fmt::format("{}", load(std::uint16_t{}));
    case Dtype::U8: return fmt::format("{}", load(std::uint8_t{}));
    case Dtype::BOOL: return load(std::uint8_t{}) ? "true" : "false";
    case Dtype::F8_E4M3: return fmt::format("{:g}", minifloat_to_double(load(std::uint8_t{}), 4, 3, 7, true));
    case Dtype::F8_E5M2: return fmt::format("{:g}", minifloat_to_double(load(std::uint8_t{}), 5, 2, 15, false));
    case Dtype::E8M0: {
      // UE8M0: an unsigned exponent with bias 127; 0xff is NaN.
      const std::uint8_t e = load(std::uint8_t{});
      return e == 0xff ? "nan" : fmt::format("{:g}", std::ldexp(1.0, e - 127));
    }
  }
  return "?";
}

std::string inspect(const std::string& path, int values) {
  const File file = File::open(path);
  std::string out = fmt::format("{}: {} tensors, {} bytes\n", path, file.tensors().size(), file.file_size());
  for (const auto& [k, v] : file.metadata()) out += fmt::format("  metadata {} = {}\n", k, v);
  out += fmt::format("  {:<40} {:<8} {:<16} {:>12}  {:<18} {}\n", "name", "dtype", "shape", "bytes", "xxh3-64",
                     "first values");
  for (const auto& t : file.tensors()) {
    const std::byte* data = file.data(t);
    const std::uint64_t hash = fingerprint_bytes(data, t.nbytes());
    std::vector<std::string> first;
    for (std::int64_t i = 0; i < std::min<std::int64_t>(values, t.numel()); ++i) {
      first.push_back(value_string(data, t.dtype, i));
    }
    out += fmt::format("  {:<40} {:<8} {:<16} {:>12}  {:016x}  [{}{}]\n", t.name, dtype_name(t.dtype),
                       fmt::format("[{}]", fmt::join(t.shape, ", ")), t.nbytes(), hash, fmt::join(first, ", "),
                       t.numel() > values ? ", ..." : "");
  }
  return out;
}

}  // namespace graphcheck::safetensors
