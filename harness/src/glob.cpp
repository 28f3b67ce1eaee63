#include "glob.h"

namespace graphcheck {

bool path_matches(std::string_view pattern, std::string_view path) {
  if (pattern.empty()) return path.empty();
  if (pattern.substr(0, 2) == "**") {
    for (std::size_t i = 0; i <= path.size(); ++i) {
      if (path_matches(pattern.substr(2), path.substr(i))) return true;
    }
    return false;
  }
  if (pattern[0] == '*') {
    for (std::size_t i = 0; i <= path.size(); ++i) {
      if (path_matches(pattern.substr(1), path.substr(i))) return true;
      if (i < path.size() && path[i] == '.') break;
    }
    return false;
  }
  return !path.empty() && pattern[0] == path[0] && path_matches(pattern.substr(1), path.substr(1));
}

}  // namespace graphcheck
