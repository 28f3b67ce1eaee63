#include "graphcheck/scenario.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <filesystem>
#include <set>

namespace graphcheck {

const char* to_string(LoadFormat format) {
  return format == LoadFormat::checkpoint ? "checkpoint" : "dummy";
}

namespace {

namespace fs = std::filesystem;

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

std::string suggestion(const std::string& word, const std::vector<std::string>& candidates) {
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

class Parser {
 public:
  Parser(std::string path, const ScenarioCatalog& catalog)
      : m_path(std::move(path)), m_catalog(catalog) {}

  Scenario parse() {
    YAML::Node root;
    try {
      root = YAML::LoadFile(m_path);
    } catch (const YAML::BadFile&) {
      throw ScenarioError(fmt::format("{}: cannot read the scenario file: check the path", m_path));
    } catch (const YAML::ParserException& e) {
      throw ScenarioError(fmt::format("{}: invalid YAML: {}", where(e.mark), e.msg));
    }
    if (!root.IsMap()) fail(root, "a scenario file must be a mapping of keys (scenario:, model:, ...)");
    check_keys(root, "scenario file",
               {"scenario", "description", "model", "load", "checkpoint", "seed", "capture",
                "cycles", "checks", "mutations", "dummy_constants", "dummy_growth", "poison",
                "expect_error"});

    Scenario s;
    s.file = m_path;
    s.name = required_string(root, "scenario", "scenario file");
    if (s.name.empty() || s.name.find_first_of("/\\ \t") != std::string::npos) {
      fail(root["scenario"], "the scenario name must be non-empty, without slashes or spaces");
    }
    if (root["description"]) s.description = scalar_string(root["description"], "description");

    const YAML::Node model = required(root, "model", "scenario file");
    if (!model.IsMap()) fail(model, "'model' must be a mapping: {fixture: NAME, config: {...}}");
    check_keys(model, "model", {"fixture", "config"});
    s.fixture = required_string(model, "fixture", "model");
    if (std::find(m_catalog.fixtures.begin(), m_catalog.fixtures.end(), s.fixture) ==
        m_catalog.fixtures.end()) {
      fail(model["fixture"], fmt::format("unknown fixture '{}'{}: known fixtures are {}", s.fixture,
                                         suggestion(s.fixture, m_catalog.fixtures),
                                         fmt::join(m_catalog.fixtures, ", ")));
    }
    if (const YAML::Node config = model["config"]) {
      if (!config.IsMap()) fail(config, "'model.config' must be a mapping of key: scalar");
      check_unique_keys(config, "model.config");
      for (const auto& kv : config) {
        const std::string key = kv.first.as<std::string>();
        if (!kv.second.IsScalar()) fail(kv.second, fmt::format("config key '{}' must be a scalar", key));
        s.config.set(key, config_value(kv.second), where(kv.second.Mark()));
      }
    }

    if (const YAML::Node load = root["load"]) {
      const std::string format = scalar_string(load, "load");
      if (format == "checkpoint") {
        s.load = LoadFormat::checkpoint;
      } else if (format == "dummy") {
        s.load = LoadFormat::dummy;
      } else {
        fail(load, fmt::format("unknown load format '{}': use checkpoint or dummy", format));
      }
    }
    if (const YAML::Node checkpoint = root["checkpoint"]) {
      if (s.load == LoadFormat::dummy) {
        fail(checkpoint, "'checkpoint' is a file to load, but this scenario uses load: dummy; "
                         "drop one of them");
      }
      std::string path = scalar_string(checkpoint, "checkpoint");
      fs::path p(path);
      if (p.is_relative()) p = fs::path(m_path).parent_path() / p;
      s.checkpoint = p.lexically_normal().string();
    }
    if (const YAML::Node seed = root["seed"]) s.seed = unsigned_int(seed, "seed");

    const YAML::Node capture = required(root, "capture", "scenario file");
    if (!capture.IsMap()) fail(capture, "'capture' must be a mapping: {batch_sizes: [1, 4]}");
    check_keys(capture, "capture", {"batch_sizes"});
    const YAML::Node sizes = required(capture, "batch_sizes", "capture");
    if (!sizes.IsSequence() || sizes.size() == 0) {
      fail(sizes, "'capture.batch_sizes' must be a non-empty list of positive integers");
    }
    for (const auto& b : sizes) {
      const std::uint64_t v = unsigned_int(b, "batch size");
      if (v == 0 || v > (1u << 20)) fail(b, "a batch size must be between 1 and 1048576");
      if (std::count(s.batch_sizes.begin(), s.batch_sizes.end(), static_cast<std::int64_t>(v))) {
        fail(b, fmt::format("batch size {} is listed twice", v));
      }
      s.batch_sizes.push_back(static_cast<std::int64_t>(v));
    }

    if (const YAML::Node cycles = root["cycles"]) {
      if (!cycles.IsSequence()) fail(cycles, "'cycles' must be a list of - refit: {seed: N}");
      for (const auto& cycle : cycles) {
        if (!cycle.IsMap()) fail(cycle, "each cycle must be a mapping: - refit: {seed: N}");
        check_keys(cycle, "cycle", {"refit"});
        const YAML::Node refit = required(cycle, "refit", "cycle");
        if (!refit.IsMap()) fail(refit, "'refit' must be a mapping: {seed: N, only: [prefix]}");
        check_keys(refit, "refit", {"seed", "only", "buckets"});
        RefitSpec spec;
        spec.where = where(cycle.Mark());
        spec.seed = unsigned_int(required(refit, "seed", "refit"), "refit seed");
        if (const YAML::Node only = refit["only"]) spec.only = prefixes(only, "only");
        if (const YAML::Node buckets = refit["buckets"]) {
          if (refit["only"]) {
            fail(buckets, "a refit takes either 'only' or 'buckets', not both: give each bucket "
                          "its own prefixes");
          }
          if (!buckets.IsSequence() || buckets.size() == 0) {
            fail(buckets, "'buckets' must be a non-empty list of {name: NAME, only: [prefix]}");
          }
          for (const auto& b : buckets) {
            if (!b.IsMap()) fail(b, "each bucket must be a mapping: {name: NAME, only: [prefix]}");
            check_keys(b, "bucket", {"name", "only"});
            RefitBucket bucket;
            bucket.name = required_string(b, "name", "bucket");
            if (bucket.name.empty()) fail(b["name"], "a bucket name must not be empty");
            for (const auto& other : spec.buckets) {
              if (other.name == bucket.name) {
                fail(b["name"], fmt::format("bucket '{}' is listed twice in this refit", bucket.name));
              }
            }
            bucket.only = prefixes(required(b, "only", "bucket"), "only");
            spec.buckets.push_back(std::move(bucket));
          }
        }
        s.cycles.push_back(std::move(spec));
      }
    }

    const YAML::Node checks = root["checks"];
    if (!checks || (checks.IsScalar() && checks.Scalar() == "all")) {
      s.checks = m_catalog.probes;
    } else if (checks.IsSequence()) {
      for (const auto& c : checks) {
        std::string probe = probe_name(c);
        if (std::find(s.checks.begin(), s.checks.end(), probe) != s.checks.end()) {
          fail(c, fmt::format("probe '{}' is listed twice in checks", probe));
        }
        s.checks.push_back(std::move(probe));
      }
    } else {
      fail(checks, "'checks' must be 'all' or a list of probe names");
    }

    if (const YAML::Node mutations = root["mutations"]) {
      if (!mutations.IsMap()) {
        fail(mutations, "'mutations' must map each mutation to the probes that must catch it");
      }
      check_unique_keys(mutations, "mutations");
      for (const auto& kv : mutations) {
        const std::string name = kv.first.as<std::string>();
        if (!m_catalog.is_mutation || !m_catalog.is_mutation(name)) {
          fail(kv.first, fmt::format("unknown mutation '{}': `graphcheck list` shows them", name));
        }
        if (!kv.second.IsSequence() || kv.second.size() == 0) {
          fail(kv.second, fmt::format("mutation '{}' must list the probes that catch it: [address]",
                                      name));
        }
        std::vector<std::string> probes;
        for (const auto& p : kv.second) {
          std::string probe = probe_name(p);
          if (std::find(s.checks.begin(), s.checks.end(), probe) == s.checks.end()) {
            fail(p, fmt::format("probe '{}' must catch mutation '{}' but is not in this "
                                "scenario's checks: add it to 'checks'",
                                probe, name));
          }
          probes.push_back(std::move(probe));
        }
        s.mutations[name] = std::move(probes);
      }
    }
    if (const YAML::Node constants = root["dummy_constants"]) {
      if (s.load != LoadFormat::dummy) fail(constants, "'dummy_constants' needs load: dummy");
      if (!constants.IsMap()) fail(constants, "'dummy_constants' maps tensor-name patterns to numbers");
      check_unique_keys(constants, "dummy_constants");
      for (const auto& kv : constants) {
        if (!kv.second.IsScalar()) fail(kv.second, "a dummy constant must be a number");
        const ModelConfig::Value v = config_value(kv.second);
        if (std::holds_alternative<std::int64_t>(v)) {
          s.dummy_constants[kv.first.Scalar()] = static_cast<double>(std::get<std::int64_t>(v));
        } else if (std::holds_alternative<double>(v)) {
          s.dummy_constants[kv.first.Scalar()] = std::get<double>(v);
        } else {
          fail(kv.second, fmt::format("dummy constant for '{}' must be a number, got '{}'",
                                      kv.first.Scalar(), kv.second.Scalar()));
        }
      }
    }
    if (const YAML::Node growth = root["dummy_growth"]) {
      if (s.load != LoadFormat::dummy) fail(growth, "'dummy_growth' needs load: dummy");
      if (!growth.IsMap()) fail(growth, "'dummy_growth' must be a mapping: {key: depth, values: [1, 4]}");
      check_keys(growth, "dummy_growth", {"key", "values"});
      Scenario::Growth g;
      g.key = required_string(growth, "key", "dummy_growth");
      const YAML::Node values = required(growth, "values", "dummy_growth");
      if (!values.IsSequence() || values.size() < 2) {
        fail(values, "'dummy_growth.values' must list at least two integers");
      }
      for (const auto& v : values) g.values.push_back(static_cast<std::int64_t>(unsigned_int(v, "growth value")));
      s.dummy_growth = std::move(g);
    }
    if (const YAML::Node poison = root["poison"]) {
      if (std::find(s.checks.begin(), s.checks.end(), "poison") == s.checks.end()) {
        fail(poison, "'poison' sets options of the poison probe, which is not in this scenario's "
                     "checks: add it to 'checks'");
      }
      if (!poison.IsMap() || poison.size() == 0) {
        fail(poison, "'poison' must be a mapping: {staged: [pattern], poison_before_refit: true}");
      }
      check_keys(poison, "poison", {"staged", "poison_before_refit"});
      if (const YAML::Node staged = poison["staged"]) {
        if (!staged.IsSequence() || staged.size() == 0) {
          fail(staged, "'poison.staged' must be a non-empty list of tensor-name patterns "
                       "(\"layers.*.weight_scale_inv\")");
        }
        for (const auto& p : staged) s.poison.staged.push_back(scalar_string(p, "pattern"));
      }
      if (const YAML::Node before = poison["poison_before_refit"]) {
        s.poison.before_refit = boolean(before, "poison_before_refit");
      }
      if (s.cycles.empty()) {
        fail(poison, "'poison' acts on refits, but this scenario has no refit cycles: add "
                     "cycles or drop it");
      }
    }
    if (const YAML::Node expect = root["expect_error"]) {
      s.expect_error = scalar_string(expect, "expect_error");
      if (s.expect_error.empty()) {
        fail(expect, "'expect_error' must be a non-empty part of the error message expected");
      }
      s.expect_error_where = where(expect.Mark());
    }
    return s;
  }

 private:
  std::string where(const YAML::Mark& mark) const {
    if (mark.is_null()) return m_path;
    return fmt::format("{}:{}:{}", m_path, mark.line + 1, mark.column + 1);
  }

  [[noreturn]] void fail(const YAML::Node& node, const std::string& message) const {
    throw ScenarioError(fmt::format("{}: {}", where(node.Mark()), message));
  }

  // Keys must be scalars and unique (yaml-cpp accepts duplicates silently).
  void check_unique_keys(const YAML::Node& map, const std::string& context) const {
    std::map<std::string, YAML::Mark> seen;
    for (const auto& kv : map) {
      if (!kv.first.IsScalar()) fail(kv.first, fmt::format("keys in {} must be strings", context));
      auto [it, inserted] = seen.emplace(kv.first.Scalar(), kv.first.Mark());
      if (!inserted) {
        fail(kv.first, fmt::format("key '{}' appears twice in {} (first at {}): keep one",
                                   kv.first.Scalar(), context, where(it->second)));
      }
    }
  }

  void check_keys(const YAML::Node& map, const std::string& context,
                  const std::vector<std::string>& allowed) const {
    check_unique_keys(map, context);
    for (const auto& kv : map) {
      const std::string key = kv.first.Scalar();
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        fail(kv.first, fmt::format("unknown key '{}' in {}{}: allowed keys are {}", key, context,
                                   suggestion(key, allowed), fmt::join(allowed, ", ")));
      }
    }
  }

  YAML::Node required(const YAML::Node& map, const std::string& key, const std::string& context) const {
    YAML::Node node = map[key];
    if (!node || node.IsNull()) fail(map, fmt::format("missing required key '{}' in {}", key, context));
    return node;
  }

  std::string required_string(const YAML::Node& map, const std::string& key,
                              const std::string& context) const {
    return scalar_string(required(map, key, context), key);
  }

  std::string scalar_string(const YAML::Node& node, const std::string& what) const {
    if (!node.IsScalar()) fail(node, fmt::format("'{}' must be a string", what));
    return node.Scalar();
  }

  std::vector<std::string> prefixes(const YAML::Node& node, const std::string& what) const {
    if (!node.IsSequence() || node.size() == 0) {
      fail(node, fmt::format("'{}' must be a non-empty list of tensor-name prefixes", what));
    }
    std::vector<std::string> out;
    for (const auto& prefix : node) out.push_back(scalar_string(prefix, "prefix"));
    return out;
  }

  bool boolean(const YAML::Node& node, const std::string& what) const {
    if (node.IsScalar() && node.Tag() != "!") {
      if (node.Scalar() == "true" || node.Scalar() == "True") return true;
      if (node.Scalar() == "false" || node.Scalar() == "False") return false;
    }
    fail(node, fmt::format("'{}' must be true or false, got '{}'", what,
                           node.IsScalar() ? node.Scalar() : std::string("a non-scalar")));
  }

  std::uint64_t unsigned_int(const YAML::Node& node, const std::string& what) const {
    if (node.IsScalar()) {
      const std::string& text = node.Scalar();
      if (!text.empty() && std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isdigit(c) != 0; }) && text.size() < 20) {
        return std::stoull(text);
      }
    }
    fail(node, fmt::format("{} must be a non-negative integer, got '{}'", what,
                           node.IsScalar() ? node.Scalar() : std::string("a non-scalar")));
  }

  std::string probe_name(const YAML::Node& node) const {
    std::string name = scalar_string(node, "probe");
    if (std::find(m_catalog.probes.begin(), m_catalog.probes.end(), name) == m_catalog.probes.end()) {
      fail(node, fmt::format("unknown probe '{}'{}: known probes are {}", name,
                             suggestion(name, m_catalog.probes), fmt::join(m_catalog.probes, ", ")));
    }
    return name;
  }

  static ModelConfig::Value config_value(const YAML::Node& node) {
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

  std::string m_path;
  const ScenarioCatalog& m_catalog;
};

}  // namespace

std::vector<std::string> RefitSpec::prefixes() const {
  if (buckets.empty()) return only;
  std::vector<std::string> all;
  for (const auto& b : buckets) all.insert(all.end(), b.only.begin(), b.only.end());
  return all;
}

Scenario parse_scenario_file(const std::string& path, const ScenarioCatalog& catalog) {
  return Parser(path, catalog).parse();
}

std::vector<std::string> collect_scenario_files(const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  for (const auto& path : paths) {
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
      std::vector<std::string> found;
      fs::recursive_directory_iterator it(path, ec), end;
      if (ec) throw ScenarioError(fmt::format("{}: cannot read the directory: {}", path, ec.message()));
      for (; it != end; it.increment(ec)) {
        if (ec) throw ScenarioError(fmt::format("{}: cannot read the directory: {}", path, ec.message()));
        const auto& entry = *it;
        const auto ext = entry.path().extension();
        if (entry.is_regular_file() && (ext == ".yaml" || ext == ".yml")) {
          found.push_back(entry.path().string());
        }
      }
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else if (fs::exists(path, ec)) {
      files.push_back(path);
    } else {
      throw ScenarioError(fmt::format("{}: no such scenario file or directory", path));
    }
  }
  return files;
}

}  // namespace graphcheck
