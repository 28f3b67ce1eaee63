// The scenario parser's steps: Parser::parse() and one member per part of a scenario file
// (model, load and checkpoint, capture, cycles, checks, mutations, the dummy-load options,
// poison, expect_error), each validating its keys and filling the Scenario. Torch-free.

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/depthguard.h>  // YAML::DeepRecursion (yaml-cpp 0.7+)
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <variant>
#include <vector>

#include "formats/scenario_parser.h"

namespace graphcheck::scenario_parser {

namespace fs = std::filesystem;

Scenario Parser::parse() {
  const YAML::Node root = load_document();
  Scenario s;
  s.file = m_path;
  parse_name(root, s);
  parse_model(root, s);
  parse_load_and_checkpoint(root, s);
  parse_seed_and_timeout(root, s);
  parse_capture(root, s);
  parse_cycles(root, s);
  parse_checks(root, s);
  parse_mutations(root, s);
  parse_dummy_constants(root, s);
  parse_dummy_growth(root, s);
  parse_poison(root, s);
  parse_expect_error(root, s);
  parse_distributed(root, s);
  return s;
}

YAML::Node Parser::load_document() const {
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
              "expect_error", "timeout", "distributed", "slow"});
  return root;
}

void Parser::parse_name(const YAML::Node& root, Scenario& s) {
  s.name = required_string(root, "scenario", "scenario file");
  check_scenario_name(root["scenario"], s.name);
  if (root["description"]) s.description = scalar_string(root["description"], "description");
}

// Note [Scenario names are path components]
// The name becomes the directory REPORT_DIR/work/<name>/ and a name in every report, so it must
// be one plain path component: not empty, "." or "..", no '/', '\\', spaces or control
// characters (NUL included), at most k_max_name_bytes bytes. UTF-8 was checked already.
void Parser::check_scenario_name(const YAML::Node& node, const std::string& name) const {
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

void Parser::parse_model(const YAML::Node& root, Scenario& s) {
  const YAML::Node model = required(root, "model", "scenario file");
  if (!model.IsMap()) fail(model, "'model' must be a mapping: {fixture: NAME, config: {...}}");
  check_keys(model, "model", {"fixture", "python", "config"});
  if (model["python"]) {
    parse_python_model(model, s);
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
}

void Parser::parse_python_model(const YAML::Node& model, Scenario& s) {
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
}

void Parser::parse_load_and_checkpoint(const YAML::Node& root, Scenario& s) {
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
}

void Parser::parse_seed_and_timeout(const YAML::Node& root, Scenario& s) {
  if (const YAML::Node seed = root["seed"]) s.seed = unsigned_int(seed, "seed");
  if (const YAML::Node slow = root["slow"]) s.slow = boolean(slow, "slow");
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
}

void Parser::parse_capture(const YAML::Node& root, Scenario& s) {
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
}

void Parser::parse_cycles(const YAML::Node& root, Scenario& s) {
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
}

void Parser::parse_refit(const YAML::Node& refit, RefitSpec& spec) {
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

void Parser::parse_sleep(const YAML::Node& sleep, RefitSpec& spec) {
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

void Parser::same_weights_warning(Scenario& s) {
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

void Parser::parse_checks(const YAML::Node& root, Scenario& s) {
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
}

void Parser::parse_mutations(const YAML::Node& root, Scenario& s) {
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
}

void Parser::parse_dummy_constants(const YAML::Node& root, Scenario& s) {
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
}

void Parser::parse_dummy_growth(const YAML::Node& root, Scenario& s) {
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
}

void Parser::parse_poison(const YAML::Node& root, Scenario& s) {
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
}

void Parser::parse_expect_error(const YAML::Node& root, Scenario& s) {
  if (const YAML::Node expect = root["expect_error"]) {
    s.expect_error = scalar_string(expect, "expect_error");
    if (s.expect_error.empty()) {
      fail(expect, "'expect_error' must be a non-empty part of the error message expected");
    }
    s.expect_error_where = where(expect.Mark());
  }
}

}  // namespace graphcheck::scenario_parser

namespace graphcheck::scenario_parser {

// Note [Distributed scenarios] (DESIGN §2.9): `distributed:` runs the scenario on world_size
// processes. What the engine supports on them is checked here, so that a scenario never runs
// half: plain refits only (each one streamed over the process group by the trainer), and a
// checkpoint load synthesized by the engine (every rank reads the full checkpoint, as workers do).
void Parser::parse_distributed(const YAML::Node& root, Scenario& s) {
  const YAML::Node node = root["distributed"];
  if (!node) return;
  if (!node.IsMap()) {
    fail(node, "'distributed' must be a mapping: {world_size: 2, trainer: 0, rollout: [0, 1], transfer: "
               "per_tensor}");
  }
  check_keys(node, "distributed", {"world_size", "trainer", "rollout", "backend", "transfer", "bucket_bytes", "timeout"});
  DistributedSpec d;
  const YAML::Node world = required(node, "world_size", "distributed");
  const std::uint64_t w = unsigned_int(world, "world_size");
  if (w < 2 || w > 64) fail(world, "'world_size' must be between 2 and 64 processes (one process needs no 'distributed')");
  d.world_size = static_cast<int>(w);
  if (const YAML::Node trainer = node["trainer"]) {
    const std::uint64_t t = unsigned_int(trainer, "trainer");
    if (t >= w) fail(trainer, fmt::format("'trainer' is rank {}, but world_size is {}: ranks are 0..{}", t, w, w - 1));
    d.trainer = static_cast<int>(t);
  }
  if (const YAML::Node rollout = node["rollout"]) {
    if (!rollout.IsSequence() || rollout.size() == 0) {
      fail(rollout, "'rollout' must be a non-empty list of ranks: those that run the lifecycle, in "
                    "tensor-parallel rank order");
    }
    for (const auto& r : rollout) {
      const std::uint64_t rank = unsigned_int(r, "rollout rank");
      if (rank >= w) fail(r, fmt::format("rollout rank {} is not below world_size {}", rank, w));
      if (std::find(d.rollout.begin(), d.rollout.end(), static_cast<int>(rank)) != d.rollout.end()) {
        fail(r, fmt::format("rollout rank {} is listed twice", rank));
      }
      d.rollout.push_back(static_cast<int>(rank));
    }
  } else {
    for (int r = 0; r < d.world_size; ++r) {
      if (r != d.trainer) d.rollout.push_back(r);
    }
  }
  for (int r = 0; r < d.world_size; ++r) {
    if (r != d.trainer && std::find(d.rollout.begin(), d.rollout.end(), r) == d.rollout.end()) {
      fail(node, fmt::format("rank {} is neither the trainer nor a rollout rank: give every rank of "
                             "world_size {} a role (or lower world_size)",
                             r, d.world_size));
    }
  }
  if (const YAML::Node backend = node["backend"]) {
    d.backend = scalar_string(backend, "backend");
    if (d.backend != "gloo" && d.backend != "nccl") {
      fail(backend, fmt::format("unknown process-group backend {}: use gloo (CPU) or nccl (GPU)", printable(d.backend)));
    }
  }
  if (const YAML::Node transfer = node["transfer"]) {
    const std::string mode = scalar_string(transfer, "transfer");
    if (mode == "per_tensor") {
      d.transfer = DistributedSpec::Transfer::per_tensor;
    } else if (mode == "packed") {
      d.transfer = DistributedSpec::Transfer::packed;
    } else {
      fail(transfer, fmt::format("unknown transfer {}: use per_tensor (one broadcast per tensor, its name, "
                                 "dtype and shape first) or packed (buckets of bucket_bytes)",
                                 printable(mode)));
    }
  }
  if (const YAML::Node bytes = node["bucket_bytes"]) {
    const std::uint64_t b = unsigned_int(bytes, "bucket_bytes");
    if (b < 64 || b > (1ull << 40)) fail(bytes, "'bucket_bytes' must be between 64 bytes and 1 TiB");
    if (d.transfer != DistributedSpec::Transfer::packed) fail(bytes, "'bucket_bytes' sizes packed buckets: set transfer: packed");
    d.bucket_bytes = static_cast<std::int64_t>(b);
  }
  if (const YAML::Node timeout = node["timeout"]) {
    const ModelConfig::Value v = timeout.IsScalar() ? config_value(timeout) : ModelConfig::Value{std::string()};
    const double seconds = std::holds_alternative<std::int64_t>(v) ? static_cast<double>(std::get<std::int64_t>(v))
                           : std::holds_alternative<double>(v)     ? std::get<double>(v)
                                                                   : -1.0;
    if (!(seconds > 0 && seconds <= 1e6)) {
      fail(timeout, "'distributed.timeout' must be a positive number of seconds: how long a collective waits for "
                    "the other ranks before it fails");
    }
    d.timeout = seconds;
  }
  // What runs on the ranks: plain refits, each streamed by the trainer.
  if (s.load != LoadFormat::checkpoint || !s.checkpoint.empty()) {
    fail(node, "a distributed scenario loads a checkpoint the engine synthesizes (every rank reads the full "
               "checkpoint, as workers do): set load: checkpoint and drop 'checkpoint:'");
  }
  const YAML::Node cycles = root["cycles"];
  for (std::size_t i = 0; i < s.cycles.size(); ++i) {
    const RefitSpec& c = s.cycles[i];
    if (c.kind != CycleKind::refit || c.sweep || !c.buckets.empty()) {
      const YAML::Node at = cycles && cycles.IsSequence() && i < cycles.size() ? cycles[i] : node;
      fail(at, "a distributed scenario's cycles are plain refits ({refit: {seed: N, only: [...]}}), each "
               "streamed by the trainer over the process group (transfer: packed for buckets); sleeps, "
               "reloads, bucket lists and sweeps run in one process only");
    }
  }
  if (s.cycles.empty()) {
    fail(node, "a distributed scenario needs refit cycles: the trainer streams each one to the rollout ranks");
  }
  if (s.dummy_growth) fail(node, "'dummy_growth' runs in one process only: drop it from a distributed scenario");
  s.distributed = std::move(d);
}

}  // namespace graphcheck::scenario_parser
