#include "glob.h"

#include <algorithm>
#include <vector>

namespace graphcheck {

// Note [Linear-time path patterns]
// The pattern is a sequence of tokens (a literal character, '*' or "**"), and matching runs the
// set of pattern positions reachable after each character of the path (a Thompson-style NFA
// walk): O(pattern x path) time, O(pattern) memory, no recursion and no backtracking. The old
// recursive matcher tried every split of the path at every star, exponential in the number of
// stars ("**a**a**a...b" against "aaaa...") and as deep as the path is long; patterns come from
// scenario files (dummy_constants, poison.staged) and model code (expected_hooks()), so any text
// must match in bounded time.
bool path_matches(std::string_view pattern, std::string_view path) {
  enum class Kind : unsigned char { literal, star, double_star };
  struct Token {
    Kind kind;
    char c;
  };
  std::vector<Token> tokens;
  tokens.reserve(pattern.size());
  for (std::size_t i = 0; i < pattern.size();) {
    if (pattern.compare(i, 2, "**") == 0) {
      tokens.push_back({Kind::double_star, '*'});
      i += 2;
    } else if (pattern[i] == '*') {
      tokens.push_back({Kind::star, '*'});
      ++i;
    } else {
      tokens.push_back({Kind::literal, pattern[i]});
      ++i;
    }
  }
  const std::size_t n = tokens.size();
  // reach[j]: the first j tokens match the part of the path read so far.
  std::vector<char> reach(n + 1, 0);
  std::vector<char> next(n + 1, 0);
  // A star may match the empty string: whoever reaches it also reaches the token after it.
  const auto close = [&](std::vector<char>& states) {
    for (std::size_t j = 0; j < n; ++j) {
      if (states[j] && tokens[j].kind != Kind::literal) states[j + 1] = 1;
    }
  };
  reach[0] = 1;
  close(reach);
  for (const char c : path) {
    std::fill(next.begin(), next.end(), 0);
    bool any = false;
    for (std::size_t j = 0; j < n; ++j) {
      if (!reach[j]) continue;
      const Token& token = tokens[j];
      if (token.kind == Kind::literal) {
        if (token.c == c) {
          next[j + 1] = 1;
          any = true;
        }
      } else if (token.kind == Kind::double_star || c != '.') {
        next[j] = 1;  // the star takes this character and may take more
        any = true;
      }
    }
    if (!any) return false;
    close(next);
    reach.swap(next);
  }
  return reach[n] != 0;
}

}  // namespace graphcheck
