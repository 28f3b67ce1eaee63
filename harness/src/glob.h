#pragma once
// Module-path patterns: "layers.*.experts". '*' matches one path component (no '.'), "**" any
// number of characters including dots; everything else matches itself.
//
// Matching takes O(pattern length x path length) time without recursion, whatever the pattern
// (see Note [Linear-time path patterns] in glob.cpp), so patterns from scenario files and model
// code need no complexity limit.

#include <string_view>

namespace graphcheck {

[[nodiscard]] bool path_matches(std::string_view pattern, std::string_view path);

}  // namespace graphcheck
