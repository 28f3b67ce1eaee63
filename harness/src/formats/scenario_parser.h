#pragma once
// The scenario parser (Parser): its steps, one per part of a scenario file, live in
// scenario_parse.cpp; the YAML-node and text helpers they share in scenario_nodes.cpp.
// Internal to formats/ (parse_scenario_text, formats/scenario.cpp, is its one user). Torch-free.

#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "graphcheck/config.h"
#include "graphcheck/engine/scenario.h"

namespace graphcheck::scenario_parser {

// Note [Scenario file limits]
// Scenario files are user input; a few hundred bytes nesting about 8 levels describe any scenario.
// The parser bounds its work on anything else, each limit an exit-2 ScenarioError naming the place:
//   - k_max_scenario_bytes: larger files are refused before they are read;
//   - k_max_yaml_depth: deeper nesting is refused (yaml-cpp's own guard, at 2000 levels, throws
//     DeepRecursion with the message "bad file", which said nothing useful);
//   - k_max_yaml_nodes: anchors and aliases ("&a [*b, *b, *b]") let a small file stand for an
//     exponentially large tree (an alias bomb, "billion laughs"); the document is walked once with
//     aliases expanded, and more nodes than this are refused. yaml-cpp builds aliases as shared
//     nodes, so loading them is cheap; only walking them is not;
//   - every string (keys, values, tags) must be valid UTF-8: reporters write them into JSON and
//     XML, which cannot hold anything else;
//   - a scenario name becomes a directory (REPORT_DIR/work/<name>/), so it must be a plain path
//     component (see check_scenario_name).
inline constexpr std::size_t k_max_scenario_bytes = 1 << 20;
inline constexpr int k_max_yaml_depth = 64;
inline constexpr std::size_t k_max_yaml_nodes = 100'000;
inline constexpr std::size_t k_max_name_bytes = 128;

// `text` quoted for a message: control characters, backslashes and bytes that are not UTF-8 as
// \xNN escapes, cut after about 80 bytes.
[[nodiscard]] std::string printable(std::string_view text);

// " (did you mean 'NAME'?)" for the candidate closest to `word`, when one is close; else empty.
[[nodiscard]] std::string suggestion(const std::string& word,
                                     const std::vector<std::string>& candidates);

class Parser {
 public:
  Parser(std::string path, const std::string& text, const ScenarioCatalog& catalog)
      : m_path(std::move(path)), m_text(text), m_catalog(catalog) {}

  Scenario parse();

 private:
  // ---- the steps of parse(), in the order they run (scenario_parse.cpp) ----------------------
  // The document, loaded and checked (Note [Scenario file limits]), its top-level keys known.
  YAML::Node load_document() const;
  void parse_name(const YAML::Node& root, Scenario& s);
  void parse_model(const YAML::Node& root, Scenario& s);
  void parse_python_model(const YAML::Node& model, Scenario& s);
  void parse_load_and_checkpoint(const YAML::Node& root, Scenario& s);
  void parse_seed_and_timeout(const YAML::Node& root, Scenario& s);
  void parse_capture(const YAML::Node& root, Scenario& s);
  void parse_cycles(const YAML::Node& root, Scenario& s);
  void parse_refit(const YAML::Node& refit, RefitSpec& spec);
  void parse_sleep(const YAML::Node& sleep, RefitSpec& spec);
  // Refits that all carry the weights model A already holds cannot show a stale read: a graph
  // reading an old tensor reads the same numbers.
  static void same_weights_warning(Scenario& s);
  void parse_checks(const YAML::Node& root, Scenario& s);
  void parse_mutations(const YAML::Node& root, Scenario& s);
  void parse_dummy_constants(const YAML::Node& root, Scenario& s);
  void parse_dummy_growth(const YAML::Node& root, Scenario& s);
  void parse_poison(const YAML::Node& root, Scenario& s);
  void parse_expect_error(const YAML::Node& root, Scenario& s);
  void parse_distributed(const YAML::Node& root, Scenario& s);
  // See Note [Scenario names are path components].
  void check_scenario_name(const YAML::Node& node, const std::string& name) const;

  // ---- the YAML-node helpers (scenario_nodes.cpp) --------------------------------------------
  // A position inside the document being walked, for messages: a key or a list index.
  struct PathPart {
    const std::string* key = nullptr;  // nullptr: a list item at `index`
    std::size_t index = 0;
  };

  static std::string describe(const std::vector<PathPart>& path);

  // Walks the whole document once, aliases expanded, before anything reads it: bounded depth and
  // size, and every string valid UTF-8. See Note [Scenario file limits].
  void check_document(const YAML::Node& root) const;
  void check_node(const YAML::Node& node, std::vector<PathPart>& path, int depth,
                  std::size_t& visited) const;
  void check_utf8(const YAML::Node& node, const std::string& text,
                  const std::vector<PathPart>& path, const char* what) const;

  // The first tab in the indentation of a line up to `last_line` (0-based), as 0-based
  // (line, column): YAML forbids tabs there, and yaml-cpp's message does not say so.
  std::optional<std::pair<int, int>> tab_in_indentation(int last_line) const;

  std::string where(const YAML::Mark& mark) const;
  [[noreturn]] void fail(const YAML::Node& node, const std::string& message) const;

  // Keys must be scalars and unique (yaml-cpp accepts duplicates silently).
  void check_unique_keys(const YAML::Node& map, const std::string& context) const;
  void check_keys(const YAML::Node& map, const std::string& context,
                  const std::vector<std::string>& allowed) const;

  YAML::Node required(const YAML::Node& map, const std::string& key,
                      const std::string& context) const;
  std::string required_string(const YAML::Node& map, const std::string& key,
                              const std::string& context) const;
  std::string scalar_string(const YAML::Node& node, const std::string& what) const;
  std::vector<std::string> prefixes(const YAML::Node& node, const std::string& what) const;
  bool boolean(const YAML::Node& node, const std::string& what) const;
  std::uint64_t unsigned_int(const YAML::Node& node, const std::string& what) const;
  std::string probe_name(const YAML::Node& node) const;
  static ModelConfig::Value config_value(const YAML::Node& node);

  std::string m_path;
  const std::string& m_text;
  const ScenarioCatalog& m_catalog;
};

}  // namespace graphcheck::scenario_parser
