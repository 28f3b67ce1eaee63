#pragma once
// Module-path patterns: "layers.*.experts". '*' matches one path component (no '.'), "**" any
// number of characters including dots; everything else matches itself.

#include <string_view>

namespace graphcheck {

[[nodiscard]] bool path_matches(std::string_view pattern, std::string_view path);

}  // namespace graphcheck
