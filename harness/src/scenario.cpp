#include "graphcheck/scenario.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/depthguard.h>  // YAML::DeepRecursion (yaml-cpp 0.7+)
#include <yaml-cpp/yaml.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <utility>

#include "regular_file.h"

namespace graphcheck {

const char* to_string(LoadFormat format) {
  return format == LoadFormat::checkpoint ? "checkpoint" : "dummy";
}

namespace {

namespace fs = std::filesystem;

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
constexpr std::size_t k_max_scenario_bytes = 1 << 20;
constexpr int k_max_yaml_depth = 64;
constexpr std::size_t k_max_yaml_nodes = 100'000;
constexpr std::size_t k_max_name_bytes = 128;

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

// `text` quoted for a message: control characters, backslashes and bytes that are not UTF-8 as
// \xNN escapes, cut after about 80 bytes.
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

class Parser {
 public:
  Parser(std::string path, const std::string& text, const ScenarioCatalog& catalog)
      : m_path(std::move(path)), m_text(text), m_catalog(catalog) {}

  Scenario parse() {
    if (m_text.size() > k_max_scenario_bytes) {
      throw ScenarioError(fmt::format(
          "{}: the scenario file is {} bytes, over the {}-byte limit on scenario files (a "
          "scenario takes a few hundred bytes): is this the right file?",
          m_path, m_text.size(), k_max_scenario_bytes));
    }
    YAML::Node root;
    try {
      root = YAML::Load(m_text);
    } catch (const YAML::DeepRecursion& e) {
      // yaml-cpp's message for this is "bad file".
      throw ScenarioError(fmt::format(
          "{}: YAML nested deeper than {} levels (so deep that the YAML parser gave up): a "
          "scenario nests about 8; the file is corrupt or not a scenario file",
          where(e.mark), k_max_yaml_depth));
    } catch (const YAML::ParserException& e) {
      if (const auto tab = tab_in_indentation(e.mark.line)) {
        throw ScenarioError(fmt::format(
            "{}:{}:{}: tab character in the indentation: YAML indents with spaces only; replace "
            "the tab with spaces (the YAML parser stopped at {}: {})",
            m_path, tab->first + 1, tab->second + 1, where(e.mark), e.msg));
      }
      throw ScenarioError(fmt::format("{}: invalid YAML: {}", where(e.mark), e.msg));
    } catch (const YAML::Exception& e) {
      throw ScenarioError(fmt::format("{}: invalid YAML: {}", where(e.mark), e.msg));
    }
    if (!root.IsDefined() || root.IsNull()) {
      throw ScenarioError(fmt::format(
          "{}:1:1: the file holds no YAML document (it is empty or only comments): a scenario "
          "file is a mapping of keys (scenario:, model:, capture:, ...)",
          m_path));
    }
    check_document(root);
    if (!root.IsMap()) fail(root, "a scenario file must be a mapping of keys (scenario:, model:, ...)");
    check_keys(root, "scenario file",
               {"scenario", "description", "model", "load", "checkpoint", "seed", "capture",
                "cycles", "checks", "mutations", "dummy_constants", "dummy_growth", "poison",
                "expect_error", "timeout"});

    Scenario s;
    s.file = m_path;
    s.name = required_string(root, "scenario", "scenario file");
    check_scenario_name(root["scenario"], s.name);
    if (root["description"]) s.description = scalar_string(root["description"], "description");

    const YAML::Node model = required(root, "model", "scenario file");
    if (!model.IsMap()) fail(model, "'model' must be a mapping: {fixture: NAME, config: {...}}");
    check_keys(model, "model", {"fixture", "python", "config"});
    if (model["python"]) {
      if (model["fixture"]) fail(model["python"], "'model' names both a fixture and a Python model: keep one");
      std::string spec = scalar_string(model["python"], "model.python");
      const auto colon = spec.rfind(':');
      if (colon == 0 || colon == std::string::npos || colon + 1 == spec.size()) {
        fail(model["python"], fmt::format("'model.python' is {}: write it as \"package.module:factory\" "
                                          "(a callable that takes the config as keyword arguments)",
                                          printable(spec)));
      }
      if (!m_catalog.prepare_model) {
        throw ScenarioNeedsFront(fmt::format("{}: {}", where(model["python"].Mark()), fmt::format("the scenario names a Python model ({}): this program runs "
                                          "C++ models only; run it with `python -m graphcheck run {}`",
                                          printable(spec), m_path)));
      }
      // A file ("models/my_model.py:make") is relative to the scenario file, as `checkpoint:` is.
      if (std::string_view(spec).substr(0, colon).ends_with(".py")) {
        fs::path file = spec.substr(0, colon);
        if (file.is_relative()) file = fs::path(m_path).parent_path() / file;
        std::error_code ec;
        const fs::path canonical = fs::weakly_canonical(file, ec);
        spec = (ec ? file : canonical).string() + spec.substr(colon);
      }
      const std::string error = m_catalog.prepare_model("python", spec);
      if (!error.empty()) fail(model["python"], error);
      s.fixture = "python:" + spec;
    } else if ((s.fixture = required_string(model, "fixture", "model")),
               std::find(m_catalog.fixtures.begin(), m_catalog.fixtures.end(), s.fixture) ==
                   m_catalog.fixtures.end()) {
      fail(model["fixture"], fmt::format("unknown fixture {}{}: known fixtures are {}", printable(s.fixture),
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
        fail(load, fmt::format("unknown load format {}: use checkpoint or dummy", printable(format)));
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
    if (const YAML::Node timeout = root["timeout"]) {
      const ModelConfig::Value v = timeout.IsScalar() ? config_value(timeout) : ModelConfig::Value{std::string()};
      const double seconds = std::holds_alternative<std::int64_t>(v) ? static_cast<double>(std::get<std::int64_t>(v))
                             : std::holds_alternative<double>(v)     ? std::get<double>(v)
                                                                     : -1.0;
      if (!(seconds > 0 && seconds <= 1e7)) {
        fail(timeout, "'timeout' must be a positive number of seconds (at most 1e7): how long this scenario's "
                      "process may run before it is killed and reported as crashed");
      }
      s.timeout = seconds;
    }

    const YAML::Node capture = required(root, "capture", "scenario file");
    if (!capture.IsMap()) fail(capture, "'capture' must be a mapping: {batch_sizes: [1, 4]}");
    check_keys(capture, "capture", {"batch_sizes", "eager_batch_sizes"});
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
    if (const YAML::Node eager = capture["eager_batch_sizes"]) {
      if (!eager.IsSequence() || eager.size() == 0) {
        fail(eager, "'capture.eager_batch_sizes' must be a non-empty list of positive integers: the "
                    "batch sizes run eagerly only (prefill), beside the captured ones (decode)");
      }
      for (const auto& b : eager) {
        const std::uint64_t v = unsigned_int(b, "batch size");
        if (v == 0 || v > (1u << 20)) fail(b, "a batch size must be between 1 and 1048576");
        const auto size = static_cast<std::int64_t>(v);
        if (std::count(s.batch_sizes.begin(), s.batch_sizes.end(), size)) {
          fail(b, fmt::format("batch size {} is both captured and eager-only: list it in one of "
                              "batch_sizes and eager_batch_sizes",
                              v));
        }
        if (std::count(s.eager_batch_sizes.begin(), s.eager_batch_sizes.end(), size)) {
          fail(b, fmt::format("batch size {} is listed twice", v));
        }
        s.eager_batch_sizes.push_back(size);
      }
    }

    if (const YAML::Node cycles = root["cycles"]) {
      if (!cycles.IsSequence()) {
        fail(cycles, "'cycles' must be a list of - refit: {seed: N}, - reload: {} or - sleep: {level: 1}");
      }
      bool full_refit = false;  // a refit of every tensor so far (buckets assumed to cover them)
      for (const auto& cycle : cycles) {
        if (!cycle.IsMap()) {
          fail(cycle, "each cycle must be a mapping: - refit: {seed: N}, - reload: {} or - sleep: {level: 1}");
        }
        check_keys(cycle, "cycle", {"refit", "reload", "sleep"});
        if (cycle.size() != 1) {
          fail(cycle, "a cycle is one step: give refit, reload or sleep as separate list items (- refit: ...)");
        }
        RefitSpec spec;
        spec.where = where(cycle.Mark());
        if (const YAML::Node refit = cycle["refit"]) {
          parse_refit(refit, spec);
        } else if (const YAML::Node reload = cycle["reload"]) {
          if (!reload.IsNull() && !(reload.IsMap() && reload.size() == 0)) {
            fail(reload, "'reload' takes no options: write - reload: {} (it streams the weights the model holds now)");
          }
          spec.kind = CycleKind::reload;
          spec.has_seed = false;
        } else {
          parse_sleep(cycle["sleep"], spec);
        }
        // After a dummy load only the refits so far were streamed: a reload needs every tensor.
        if (spec.kind == CycleKind::refit && spec.only.empty()) full_refit = true;
        const bool streams_held = spec.kind == CycleKind::reload || (spec.kind == CycleKind::sleep && spec.sleep_level == 2 && !spec.has_seed);
        if (streams_held && s.load == LoadFormat::dummy && !full_refit) {
          fail(cycle, fmt::format("this {} streams the weights the model holds, but after load: dummy no "
                                  "weights were streamed yet: put a full refit (- refit: {{seed: N}}) "
                                  "before it{}",
                                  spec.kind == CycleKind::reload ? "reload" : "level-2 sleep",
                                  spec.kind == CycleKind::sleep ? ", or give the sleep a seed" : ""));
        }
        s.cycles.push_back(std::move(spec));
      }
      same_weights_warning(s);
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
          fail(kv.first, fmt::format("unknown mutation {}: `graphcheck list` shows them", printable(name)));
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
  void parse_refit(const YAML::Node& refit, RefitSpec& spec) {
    if (!refit.IsMap()) fail(refit, "'refit' must be a mapping: {seed: N, only: [prefix]}");
    check_keys(refit, "refit", {"seed", "only", "buckets", "pwal", "max_splits"});
    spec.seed = unsigned_int(required(refit, "seed", "refit"), "refit seed");
    if (const YAML::Node only = refit["only"]) spec.only = prefixes(only, "only");
    if (const YAML::Node buckets = refit["buckets"]) {
      if (refit["only"]) {
        fail(buckets, "a refit takes either 'only' or 'buckets', not both: give each bucket "
                      "its own prefixes");
      }
      if (buckets.IsScalar() && buckets.Scalar() == "sweep") {
        spec.sweep = true;
      } else if (!buckets.IsSequence() || buckets.size() == 0) {
        fail(buckets, "'buckets' must be 'sweep' or a non-empty list of {name: NAME, only: [prefix]}");
      } else {
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
    }
    if (const YAML::Node max = refit["max_splits"]) {
      if (!spec.sweep) fail(max, "'max_splits' bounds a bucket sweep: it needs buckets: sweep");
      const std::uint64_t v = unsigned_int(max, "max_splits");
      if (v == 0 || v > 100000) fail(max, "'max_splits' must be between 1 and 100000");
      spec.max_splits = static_cast<std::int64_t>(v);
    }
    if (const YAML::Node pwal = refit["pwal"]) {
      const std::string mode = scalar_string(pwal, "pwal");
      if (mode == "per_bucket") {
        spec.pwal_per_bucket = true;
      } else if (mode != "once") {
        fail(pwal, fmt::format("unknown pwal mode {}: use once (one PWAL after the last bucket) or "
                               "per_bucket (a chunked reload: stage, load and PWAL per bucket)",
                               printable(mode)));
      }
      if (spec.pwal_per_bucket && spec.buckets.empty() && !spec.sweep) {
        fail(pwal, "'pwal: per_bucket' needs buckets (a list, or sweep) to call the loader per bucket");
      }
    }
  }

  void parse_sleep(const YAML::Node& sleep, RefitSpec& spec) {
    if (!sleep.IsMap()) fail(sleep, "'sleep' must be a mapping: {level: 1} or {level: 2, seed: N}");
    check_keys(sleep, "sleep", {"level", "seed"});
    spec.kind = CycleKind::sleep;
    const YAML::Node level = required(sleep, "level", "sleep");
    const std::uint64_t v = unsigned_int(level, "sleep level");
    if (v != 1 && v != 2) {
      fail(level, "sleep level must be 1 (offload the weights, discard the rest) or 2 (discard "
                  "everything, reload after the wake)");
    }
    spec.sleep_level = static_cast<int>(v);
    spec.has_seed = false;
    if (const YAML::Node seed = sleep["seed"]) {
      if (spec.sleep_level != 2) {
        fail(seed, "'seed' gives the weights of the reload after a level-2 wake; level 1 keeps the "
                   "weights and reloads nothing: drop it, or use level: 2");
      }
      spec.seed = unsigned_int(seed, "sleep seed");
      spec.has_seed = true;
    }
  }

  // Refits that all carry the weights model A already holds cannot show a stale read: a graph
  // reading an old tensor reads the same numbers.
  static void same_weights_warning(Scenario& s) {
    if (s.cycles.empty()) return;
    for (const RefitSpec& c : s.cycles) {
      // A sweep's splits after the first stream seed + 1, seed + 2, ...; a refit of a dummy or
      // file-loaded model streams synthesized weights, which differ from what it holds.
      if (c.sweep || (c.new_weights() && (s.load == LoadFormat::dummy || !s.checkpoint.empty() || c.seed != s.seed))) return;
    }
    s.warnings.push_back(fmt::format(
        "every cycle of this scenario carries the weights the model already holds (reloads, "
        "sleeps, or refits with the initial seed {}): a stale read is bit-identical to a fresh "
        "one, so replay_diff and the poison checks cannot see it; add a refit with another seed",
        s.seed));
  }

  // A position inside the document being walked, for messages: a key or a list index.
  struct PathPart {
    const std::string* key = nullptr;  // nullptr: a list item at `index`
    std::size_t index = 0;
  };

  static std::string describe(const std::vector<PathPart>& path) {
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

  // Walks the whole document once, aliases expanded, before anything reads it: bounded depth and
  // size, and every string valid UTF-8. See Note [Scenario file limits].
  void check_document(const YAML::Node& root) const {
    std::size_t visited = 0;
    std::vector<PathPart> path;
    check_node(root, path, 1, visited);
  }

  void check_node(const YAML::Node& node, std::vector<PathPart>& path, int depth,
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

  void check_utf8(const YAML::Node& node, const std::string& text,
                  const std::vector<PathPart>& path, const char* what) const {
    if (const auto bad = invalid_utf8_at(text)) {
      fail(node, fmt::format("{} {} is not valid UTF-8 (byte 0x{:02x} at offset {} of {}): every "
                             "string in a scenario file must be UTF-8; save the file as UTF-8",
                             what, describe(path), static_cast<unsigned char>(text[*bad]), *bad,
                             printable(text)));
    }
  }

  // Note [Scenario names are path components]
  // The name becomes the directory REPORT_DIR/work/<name>/ and a name in every report, so it must
  // be one plain path component: not empty, "." or "..", no '/', '\\', spaces or control
  // characters (NUL included), at most k_max_name_bytes bytes. UTF-8 was checked already.
  void check_scenario_name(const YAML::Node& node, const std::string& name) const {
    std::string problem;
    if (name.empty()) {
      problem = "is empty";
    } else if (name == "." || name == "..") {
      problem = "names a directory ('.' or '..')";
    } else if (name.size() > k_max_name_bytes) {
      problem = fmt::format("is {} bytes long", name.size());
    } else {
      for (const char ch : name) {
        const auto c = static_cast<unsigned char>(ch);
        if (c == '/' || c == '\\') {
          problem = c == '/' ? "holds a slash" : "holds a backslash";
        } else if (c == ' ') {
          problem = "holds a space";
        } else if (c < 0x20 || c == 0x7f) {
          problem = fmt::format("holds the control character 0x{:02x}", c);
        }
        if (!problem.empty()) break;
      }
    }
    if (problem.empty()) return;
    fail(node, fmt::format("scenario name {} {}: the scenario name must be non-empty, without "
                           "slashes or spaces, because it names the directory "
                           "REPORT_DIR/work/<name>/: use printable characters other than '/' and "
                           "'\\', at most {} bytes, not '.' or '..' (e.g. dsv4-mhc-refit)",
                           printable(name), problem, k_max_name_bytes));
  }

  // The first tab in the indentation of a line up to `last_line` (0-based), as 0-based
  // (line, column): YAML forbids tabs there, and yaml-cpp's message does not say so.
  std::optional<std::pair<int, int>> tab_in_indentation(int last_line) const {
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
        fail(kv.first, fmt::format("key {} appears twice in {} (first at {}): keep one",
                                   printable(kv.first.Scalar()), context, where(it->second)));
      }
    }
  }

  void check_keys(const YAML::Node& map, const std::string& context,
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
    fail(node, fmt::format("'{}' must be true or false, got {}", what,
                           node.IsScalar() ? printable(node.Scalar()) : std::string("'a non-scalar'")));
  }

  std::uint64_t unsigned_int(const YAML::Node& node, const std::string& what) const {
    if (node.IsScalar()) {
      const std::string& text = node.Scalar();
      if (!text.empty() && std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isdigit(c) != 0; }) && text.size() < 20) {
        return std::stoull(text);
      }
    }
    fail(node, fmt::format("{} must be a non-negative integer, got {}", what,
                           node.IsScalar() ? printable(node.Scalar()) : std::string("'a non-scalar'")));
  }

  std::string probe_name(const YAML::Node& node) const {
    std::string name = scalar_string(node, "probe");
    if (std::find(m_catalog.probes.begin(), m_catalog.probes.end(), name) == m_catalog.probes.end()) {
      fail(node, fmt::format("unknown probe {}{}: known probes are {}", printable(name),
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
  const std::string& m_text;
  const ScenarioCatalog& m_catalog;
};

// Reads a scenario file, refusing FIFOs, directories and devices before opening them (see Note
// [Special files are refused before open] in regular_file.h) and files over the size limit
// before reading them.
std::string read_scenario_text(const std::string& path) {
  std::string problem;
  bool not_regular = false;
  RegularFile file = open_regular_file(path, problem, &not_regular);
  if (not_regular) {
    throw ScenarioError(fmt::format(
        "{}: cannot read the scenario file: it {}; give a regular *.yaml file (a directory given "
        "to `graphcheck run` is searched for them)",
        path, problem));
  }
  if (file.fd() < 0) {
    throw ScenarioError(
        fmt::format("{}: cannot read the scenario file ({}): check the path", path, problem));
  }
  if (file.size() > k_max_scenario_bytes) {
    throw ScenarioError(fmt::format(
        "{}: the scenario file is {} bytes, over the {}-byte limit on scenario files (a scenario "
        "takes a few hundred bytes): is this the right file?",
        path, file.size(), k_max_scenario_bytes));
  }
  std::string text(static_cast<std::size_t>(file.size()), '\0');
  std::size_t filled = 0;
  // Read until EOF, one byte past the limit at most (the file may have grown since fstat).
  for (;;) {
    if (filled == text.size()) {
      if (text.size() > k_max_scenario_bytes) break;
      text.resize(std::min(text.size() + 4096, k_max_scenario_bytes + 1));
    }
    const ::ssize_t got = ::read(file.fd(), text.data() + filled, text.size() - filled);
    if (got < 0) {
      if (errno == EINTR) continue;
      throw ScenarioError(fmt::format("{}: cannot read the scenario file ({}): check the path",
                                      path, std::strerror(errno)));
    }
    if (got == 0) break;
    filled += static_cast<std::size_t>(got);
  }
  text.resize(filled);
  return text;
}

}  // namespace

const char* to_string(CycleKind kind) {
  switch (kind) {
    case CycleKind::refit: return "refit";
    case CycleKind::reload: return "reload";
    case CycleKind::sleep: return "sleep";
  }
  return "unknown";
}

std::vector<std::string> RefitSpec::prefixes() const {
  if (buckets.empty()) return only;
  std::vector<std::string> all;
  for (const auto& b : buckets) all.insert(all.end(), b.only.begin(), b.only.end());
  return all;
}

Scenario parse_scenario_text(const std::string& text, const std::string& path,
                             const ScenarioCatalog& catalog) {
  return Parser(path, text, catalog).parse();
}

Scenario parse_scenario_file(const std::string& path, const ScenarioCatalog& catalog) {
  const std::string text = read_scenario_text(path);
  return parse_scenario_text(text, path, catalog);
}

std::vector<std::string> collect_scenario_files(const std::vector<std::string>& paths) {
  // ::stat, not open: a FIFO must not be opened (see regular_file.h).
  const auto not_a_scenario = [](const std::string& path, mode_t mode) {
    return ScenarioError(fmt::format(
        "{}: is {}, not a scenario file: scenario files must be regular *.yaml files", path,
        file_kind(mode)));
  };
  std::vector<std::string> files;
  for (const auto& path : paths) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      if (errno == ENOENT || errno == ENOTDIR) {
        throw ScenarioError(fmt::format("{}: no such scenario file or directory", path));
      }
      throw ScenarioError(fmt::format("{}: cannot read: {}", path, std::strerror(errno)));
    }
    if (S_ISDIR(st.st_mode)) {
      std::error_code ec;
      std::vector<std::string> found;
      fs::recursive_directory_iterator it(path, ec), end;
      if (ec) throw ScenarioError(fmt::format("{}: cannot read the directory: {}", path, ec.message()));
      for (; it != end; it.increment(ec)) {
        if (ec) throw ScenarioError(fmt::format("{}: cannot read the directory: {}", path, ec.message()));
        const auto& entry = *it;
        const auto ext = entry.path().extension();
        if (ext != ".yaml" && ext != ".yml") continue;
        struct stat entry_st {};
        if (::stat(entry.path().c_str(), &entry_st) != 0) continue;  // e.g. a dangling symlink
        if (S_ISREG(entry_st.st_mode)) {
          found.push_back(entry.path().string());
        } else if (!S_ISDIR(entry_st.st_mode)) {
          throw not_a_scenario(entry.path().string(), entry_st.st_mode);
        }
      }
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else if (S_ISREG(st.st_mode)) {
      files.push_back(path);
    } else {
      throw not_a_scenario(path, st.st_mode);
    }
  }
  return files;
}

}  // namespace graphcheck
