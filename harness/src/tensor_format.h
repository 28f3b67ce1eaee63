#pragma once
// Small formatting helpers for messages about tensors.

#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>
#include <fmt/format.h>

#include <cstdint>
#include <string>

namespace graphcheck {

inline std::string shape_string(c10::IntArrayRef sizes) {
  std::string s = "[";
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(sizes[i]);
  }
  return s + "]";
}

inline std::string address_string(const void* p) {
  return fmt::format("{:#x}", reinterpret_cast<std::uintptr_t>(p));
}

}  // namespace graphcheck
