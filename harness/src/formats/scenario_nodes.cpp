// The scenario parser's YAML-node helpers (where, fail, the key and scalar checks, the walk of
// Note [Scenario file limits]) and the text helpers of its messages (printable, suggestion).
// Torch-free.

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "formats/scenario_parser.h"

namespace graphcheck::scenario_parser {

namespace {

// Offset of the first byte of `text` that is not part of a well-formed UTF-8 sequence (overlong
// forms, surrogates and code points past U+10FFFF are ill-formed); nullopt when all of it is.
std::optional<std::size_t> invalid_utf8_at(std::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  std::size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t length = 0;
    unsigned char lo = 0x80, hi = 0xbf;  // allowed range of the second byte
    if (c >= 0xc2 && c <= 0xdf) {
      length = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
      length = 3;
      if (c == 0xe0) lo = 0xa0;  // overlong
      if (c == 0xed) hi = 0x9f;  // surrogates
    } else if (c >= 0xf0 && c <= 0xf4) {
      length = 4;
      if (c == 0xf0) lo = 0x90;  // overlong
      if (c == 0xf4) hi = 0x8f;  // past U+10FFFF
    } else {
      return i;
    }
    if (i + length > n) return i;
    if (p[i + 1] < lo || p[i + 1] > hi) return i;
    for (std::size_t k = 2; k < length; ++k) {
      if (p[i + k] < 0x80 || p[i + k] > 0xbf) return i;
    }
    i += length;
  }
  return std::nullopt;
}

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string printable(std::string_view text) {
  constexpr std::size_t k_max = 80;
  std::string out = "'";
  std::size_t i = 0;
  while (i < text.size() && i < k_max) {
    const auto c = static_cast<unsigned char>(text[i]);
    const std::size_t length = c < 0x80 ? 1 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
    const bool broken =
        c >= 0x80 && (i + length > text.size() || invalid_utf8_at(text.substr(i, length)));
    if (broken || c < 0x20 || c == 0x7f || c == '\\') {
      out += fmt::format("\\x{:02x}", c);
      ++i;
    } else {
      out.append(text.substr(i, length));
      i += length;
    }
  }
  if (i < text.size()) out += "...";
  return out + "'";
}

std::string suggestion(const std::string& word, const std::vector<std::string>& candidates) {
  if (word.size() > 64) return {};  // no name is that long; the distance would cost |word| x |c|
  std::string best;
  std::size_t best_d = 3;  // suggest only close matches
  for (const auto& c : candidates) {
    std::size_t d = edit_distance(word, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best.empty() ? std::string() : fmt::format(" (did you mean '{}'?)", best);
}

std::string Parser::describe(const std::vector<PathPart>& path) {
  std::string out;
  for (const PathPart& part : path) {
    if (part.key == nullptr) {
      out += fmt::format("[{}]", part.index);
    } else {
      if (!out.empty()) out += '.';
      out += part.key->size() > 40 ? part.key->substr(0, 40) + "..." : *part.key;
    }
  }
  if (out.size() > 120) out = out.substr(0, 60) + "..." + out.substr(out.size() - 40);
  return out.empty() ? std::string("the top level") : "'" + out + "'";
}

void Parser::check_document(const YAML::Node& root) const {
  std::size_t visited = 0;
  std::vector<PathPart> path;
  check_node(root, path, 1, visited);
}

void Parser::check_node(const YAML::Node& node, std::vector<PathPart>& path, int depth,
                        std::size_t& visited) const {
  if (++visited > k_max_yaml_nodes) {
    fail(node, fmt::format("the document expands to more than {} YAML nodes: anchors and "
                           "aliases (&name, *name) repeat each other (an alias bomb?); a "
                           "scenario takes a few hundred nodes, so write the values out",
                           k_max_yaml_nodes));
  }
  if (depth > k_max_yaml_depth) {
    fail(node, fmt::format("YAML nested deeper than {} levels at {} (counting what aliases "
                           "expand to): a scenario nests about 8; the file is corrupt or not a "
                           "scenario file",
                           k_max_yaml_depth, describe(path)));
  }
  check_utf8(node, node.Tag(), path, "the tag of");
  if (node.IsScalar()) {
    check_utf8(node, node.Scalar(), path, "the value of");
  } else if (node.IsSequence()) {
    std::size_t index = 0;
    for (const auto& item : node) {
      path.push_back({nullptr, index++});
      check_node(item, path, depth + 1, visited);
      path.pop_back();
    }
  } else if (node.IsMap()) {
    for (const auto& kv : node) {
      if (kv.first.IsScalar()) {
        check_utf8(kv.first, kv.first.Scalar(), path, "a key in");
      } else {
        check_node(kv.first, path, depth + 1, visited);
      }
      static const std::string k_complex_key = "(a non-scalar key)";
      path.push_back({kv.first.IsScalar() ? &kv.first.Scalar() : &k_complex_key, 0});
      check_node(kv.second, path, depth + 1, visited);
      path.pop_back();
    }
  }
}

void Parser::check_utf8(const YAML::Node& node, const std::string& text,
                        const std::vector<PathPart>& path, const char* what) const {
  if (const auto bad = invalid_utf8_at(text)) {
    fail(node, fmt::format("{} {} is not valid UTF-8 (byte 0x{:02x} at offset {} of {}): every "
                           "string in a scenario file must be UTF-8; save the file as UTF-8",
                           what, describe(path), static_cast<unsigned char>(text[*bad]), *bad,
                           printable(text)));
  }
}

std::optional<std::pair<int, int>> Parser::tab_in_indentation(int last_line) const {
  int line = 0;
  std::size_t start = 0;
  while (start < m_text.size() && line <= last_line) {
    std::size_t end = m_text.find('\n', start);
    if (end == std::string::npos) end = m_text.size();
    std::size_t i = start;
    std::optional<std::size_t> tab;
    while (i < end && (m_text[i] == ' ' || m_text[i] == '\t')) {
      if (m_text[i] == '\t' && !tab) tab = i;
      ++i;
    }
    if (tab && i < end && m_text[i] != '\r' && m_text[i] != '#') {
      return std::pair<int, int>(line, static_cast<int>(*tab - start));
    }
    start = end + 1;
    ++line;
  }
  return std::nullopt;
}

std::string Parser::where(const YAML::Mark& mark) const {
  if (mark.is_null()) return m_path;
  return fmt::format("{}:{}:{}", m_path, mark.line + 1, mark.column + 1);
}

void Parser::fail(const YAML::Node& node, const std::string& message) const {
  throw ScenarioError(fmt::format("{}: {}", where(node.Mark()), message));
}

void Parser::check_unique_keys(const YAML::Node& map, const std::string& context) const {
  std::map<std::string, YAML::Mark> seen;
  for (const auto& kv : map) {
    if (!kv.first.IsScalar()) fail(kv.first, fmt::format("keys in {} must be strings", context));
    auto [it, inserted] = seen.emplace(kv.first.Scalar(), kv.first.Mark());
    if (!inserted) {
      fail(kv.first, fmt::format("key {} appears twice in {} (first at {}): keep one",
                                 printable(kv.first.Scalar()), context, where(it->second)));
    }
  }
}

void Parser::check_keys(const YAML::Node& map, const std::string& context,
                        const std::vector<std::string>& allowed) const {
  check_unique_keys(map, context);
  for (const auto& kv : map) {
    const std::string key = kv.first.Scalar();
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      fail(kv.first, fmt::format("unknown key {} in {}{}: allowed keys are {}", printable(key),
                                 context, suggestion(key, allowed), fmt::join(allowed, ", ")));
    }
  }
}

YAML::Node Parser::required(const YAML::Node& map, const std::string& key,
                            const std::string& context) const {
  YAML::Node node = map[key];
  if (!node || node.IsNull()) fail(map, fmt::format("missing required key '{}' in {}", key, context));
  return node;
}

std::string Parser::required_string(const YAML::Node& map, const std::string& key,
                                    const std::string& context) const {
  return scalar_string(required(map, key, context), key);
}

std::string Parser::scalar_string(const YAML::Node& node, const std::string& what) const {
  if (!node.IsScalar()) fail(node, fmt::format("'{}' must be a string", what));
  return node.Scalar();
}

std::vector<std::string> Parser::prefixes(const YAML::Node& node, const std::string& what) const {
  if (!node.IsSequence() || node.size() == 0) {
    fail(node, fmt::format("'{}' must be a non-empty list of tensor-name prefixes", what));
  }
  std::vector<std::string> out;
  for (const auto& prefix : node) out.push_back(scalar_string(prefix, "prefix"));
  return out;
}

bool Parser::boolean(const YAML::Node& node, const std::string& what) const {
  if (node.IsScalar() && node.Tag() != "!") {
    if (node.Scalar() == "true" || node.Scalar() == "True") return true;
    if (node.Scalar() == "false" || node.Scalar() == "False") return false;
  }
  fail(node, fmt::format("'{}' must be true or false, got {}", what,
                         node.IsScalar() ? printable(node.Scalar()) : std::string("'a non-scalar'")));
}

std::uint64_t Parser::unsigned_int(const YAML::Node& node, const std::string& what) const {
  if (node.IsScalar()) {
    const std::string& text = node.Scalar();
    if (!text.empty() && std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isdigit(c) != 0; }) && text.size() < 20) {
      return std::stoull(text);
    }
  }
  fail(node, fmt::format("{} must be a non-negative integer, got {}", what,
                         node.IsScalar() ? printable(node.Scalar()) : std::string("'a non-scalar'")));
}

std::string Parser::probe_name(const YAML::Node& node) const {
  std::string name = scalar_string(node, "probe");
  if (std::find(m_catalog.probes.begin(), m_catalog.probes.end(), name) == m_catalog.probes.end()) {
    fail(node, fmt::format("unknown probe {}{}: known probes are {}", printable(name),
                           suggestion(name, m_catalog.probes), fmt::join(m_catalog.probes, ", ")));
  }
  return name;
}

ModelConfig::Value Parser::config_value(const YAML::Node& node) {
  const std::string& text = node.Scalar();
  if (node.Tag() == "!") return text;  // quoted: always a string
  if (text == "true" || text == "True") return true;
  if (text == "false" || text == "False") return false;
  try {
    std::size_t used = 0;
    long long i = std::stoll(text, &used);
    if (used == text.size()) return static_cast<std::int64_t>(i);
  } catch (...) {
  }
  // Decimal numbers only: stod would also take hex ("0x10"), "nan" and "inf".
  const bool decimal = !text.empty() && text.find_first_not_of("0123456789+-.eE") == std::string::npos;
  if (decimal) {
    try {
      std::size_t used = 0;
      double d = std::stod(text, &used);
      if (used == text.size()) return d;
    } catch (...) {
    }
  }
  return text;
}

}  // namespace graphcheck::scenario_parser
