// libFuzzer target: the scenario parser (parse_scenario_text, the in-memory twin of
// parse_scenario_file) and the module-path glob matcher its patterns feed. Any input must either
// parse or raise ScenarioError; anything else (a crash, a sanitizer report, another exception
// such as a yaml-cpp one escaping, a leak, a hang) is a finding. Built by fuzz/CMakeLists.txt,
// run by ci/fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "glob.h"
#include "graphcheck/engine/scenario.h"

namespace gc = graphcheck;

namespace {

// The names the real catalog knows (driver.cpp's default_catalog needs libtorch), so that inputs
// get past the fixture and probe checks to everything behind them.
const gc::ScenarioCatalog& catalog() {
  static const gc::ScenarioCatalog c = [] {
    gc::ScenarioCatalog out;
    out.fixtures = {"deep_stack", "dsv4",      "dsv4_dspark", "dsv4_mtp", "engram",
                    "fp8_linear", "llama",     "mxfp4_moe",   "synthetic"};
    out.probes = {"address", "replay_diff", "hooks",      "poison",
                  "coverage", "census",     "init_count", "memory"};
    out.is_mutation = [](const std::string& name) {
      return name.find('.') != std::string::npos && name.size() < 64;
    };
    return out;
  }();
  return c;
}

const char* const k_paths[] = {"layers.0.mlp.experts.weight", "layers.12.attn.qkv_proj.weight",
                               "embed.weight", "(root)", ""};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const gc::Scenario s = gc::parse_scenario_text(text, "fuzz/scenario.yaml", catalog());
    // The patterns a scenario carries are matched against tensor names at run time.
    for (const auto& [pattern, value] : s.dummy_constants) {
      for (const char* path : k_paths) (void)gc::path_matches(pattern, path);
      (void)gc::path_matches(pattern, s.name);
    }
    for (const auto& pattern : s.poison.staged) {
      for (const char* path : k_paths) (void)gc::path_matches(pattern, path);
      (void)gc::path_matches(pattern, s.description);
    }
  } catch (const gc::ScenarioError&) {
    // A rejected file: the expected outcome for most inputs.
  }
  // The matcher on its own: the first line is the pattern, the rest the path.
  const std::string_view all(text);
  const std::size_t newline = all.find('\n');
  if (newline != std::string_view::npos) {
    (void)gc::path_matches(all.substr(0, newline), all.substr(newline + 1));
  }
  return 0;
}
