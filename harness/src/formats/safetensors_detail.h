#pragma once
// What the safetensors reader (safetensors.cpp) and writer (safetensors_write.cpp) share: the
// reserved metadata key and the pieces of their error messages. Internal, torch-free.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "graphcheck/safetensors.h"

namespace graphcheck::safetensors::detail {

inline constexpr std::string_view k_metadata_key = "__metadata__";

inline std::string format_shape(const std::vector<std::int64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i != 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

[[noreturn]] inline void fail(const std::string& path, const std::string& problem) {
  throw Error("safetensors file '" + path + "': " + problem);
}

inline std::string tensor_label(const std::string& name) { return "tensor '" + name + "'"; }

}  // namespace graphcheck::safetensors::detail
