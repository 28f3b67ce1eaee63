// Unit tests for scenario files (parse_scenario_file, collect_scenario_files) and ModelConfig.
//
// Most tests use a hand-built ScenarioCatalog so that they do not depend on which fixtures,
// probes and mutations happen to be registered; one test checks default_catalog() itself.
// Every error test asserts the exact "file:line:column: " prefix and a key phrase.
#include "graphcheck/engine/scenario.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <random>
#include <filesystem>
#include <fstream>
#include <map>
#include <ostream>
#include <string>
#include <variant>
#include <vector>

#include "graphcheck/config.h"
#include "graphcheck/model.h"
#include "glob.h"
#include "graphcheck/engine/driver.h"
#include "graphcheck_test_config.h"
#include "temp_dir_test.h"
#include "session/runner.h"

namespace graphcheck {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

ScenarioCatalog test_catalog() {
  ScenarioCatalog catalog;
  catalog.fixtures = {"dsv4"};
  catalog.probes = {"address", "replay_diff"};
  catalog.is_mutation = [](const std::string& name) { return name == "mhc.rebind_broadcast"; };
  return catalog;
}


class ScenarioFileTest : public testing::TempDirTest {
 protected:
  // Writes `text` to m_dir/relative (creating folders) and returns the path.
  std::string write(const std::string& relative, const std::string& text) const {
    const fs::path path = m_dir / relative;
    fs::create_directories(path.parent_path());
    std::ofstream out(path, std::ios::binary);
    out << text;
    out.close();
    EXPECT_TRUE(out) << "cannot write " << path;
    return path.string();
  }

  // Parses the file and returns the ScenarioError message; a test failure when nothing throws.
  static std::string error_of(const std::string& path,
                              const ScenarioCatalog& catalog = test_catalog()) {
    try {
      (void)parse_scenario_file(path, catalog);
    } catch (const ScenarioError& e) {
      return e.what();
    }
    ADD_FAILURE() << path << " parsed without a ScenarioError";
    return {};
  }

  // Writes the scenario text and returns its ScenarioError message.
  std::string error_for(const std::string& text) const {
    return error_of(write("scenario.yaml", text));
  }

};

// ---- valid files ------------------------------------------------------------------------------

TEST_F(ScenarioFileTest, FullScenarioParsesEveryField) {
  const std::string path = write("full.yaml", R"(scenario: full-test
description: every field set
model:
  fixture: dsv4
  config:
    layers: 2
    ratio: 0.5
    fast: true
    quoted: "12"
    mode: plain
load: checkpoint
seed: 7
capture:
  batch_sizes: [1, 4, 16]
cycles:
  - refit: {seed: 2}
  - refit:
      seed: 3
      only: ["layers.0.", head.]
checks: all
mutations:
  mhc.rebind_broadcast: [address, replay_diff]
)");
  const Scenario s = parse_scenario_file(path, test_catalog());

  EXPECT_EQ(s.name, "full-test");
  EXPECT_EQ(s.description, "every field set");
  EXPECT_EQ(s.file, path);
  EXPECT_EQ(s.fixture, "dsv4");

  // Config values keep their YAML types; a quoted number stays a string.
  const auto& values = s.config.values();
  ASSERT_EQ(values.size(), 5u);
  EXPECT_TRUE(std::holds_alternative<std::int64_t>(values.at("layers")));
  EXPECT_TRUE(std::holds_alternative<double>(values.at("ratio")));
  EXPECT_TRUE(std::holds_alternative<bool>(values.at("fast")));
  EXPECT_TRUE(std::holds_alternative<std::string>(values.at("quoted")));
  EXPECT_TRUE(std::holds_alternative<std::string>(values.at("mode")));
  EXPECT_EQ(s.config.get_int("layers", 0), 2);
  EXPECT_DOUBLE_EQ(s.config.get_double("ratio", 0.0), 0.5);
  EXPECT_TRUE(s.config.get_bool("fast", false));
  EXPECT_EQ(s.config.get_string("quoted", ""), "12");
  EXPECT_EQ(s.config.get_string("mode", ""), "plain");
  EXPECT_EQ(s.config.where("layers"), path + ":6:13");
  EXPECT_EQ(s.config.where("mode"), path + ":10:11");
  EXPECT_THROW((void)s.config.get_int("quoted", 0), ConfigError);

  EXPECT_EQ(s.load, LoadFormat::checkpoint);
  EXPECT_STREQ(to_string(s.load), "checkpoint");
  EXPECT_TRUE(s.checkpoint.empty());
  EXPECT_EQ(s.seed, 7u);
  EXPECT_THAT(s.batch_sizes, ElementsAre(1, 4, 16));

  ASSERT_EQ(s.cycles.size(), 2u);
  EXPECT_EQ(s.cycles[0].seed, 2u);
  EXPECT_TRUE(s.cycles[0].only.empty());
  EXPECT_EQ(s.cycles[0].where, path + ":16:5");
  EXPECT_EQ(s.cycles[1].seed, 3u);
  EXPECT_THAT(s.cycles[1].only, ElementsAre("layers.0.", "head."));
  EXPECT_EQ(s.cycles[1].where, path + ":17:5");

  EXPECT_THAT(s.checks, ElementsAre("address", "replay_diff"));
  ASSERT_EQ(s.mutations.size(), 1u);
  EXPECT_THAT(s.mutations.at("mhc.rebind_broadcast"),
              ElementsAre("address", "replay_diff"));
}

TEST_F(ScenarioFileTest, MinimalScenarioGetsTheDefaults) {
  const std::string path = write("minimal.yaml", R"(scenario: minimal
model: {fixture: dsv4}
capture: {batch_sizes: [2]}
)");
  const Scenario s = parse_scenario_file(path, test_catalog());
  EXPECT_EQ(s.name, "minimal");
  EXPECT_TRUE(s.description.empty());
  EXPECT_TRUE(s.config.values().empty());
  EXPECT_EQ(s.load, LoadFormat::checkpoint);
  EXPECT_TRUE(s.checkpoint.empty());
  EXPECT_EQ(s.seed, 1u);
  EXPECT_THAT(s.batch_sizes, ElementsAre(2));
  EXPECT_TRUE(s.cycles.empty());
  EXPECT_THAT(s.checks, ElementsAre("address", "replay_diff"));  // no `checks`: all probes
  EXPECT_TRUE(s.mutations.empty());
}

TEST_F(ScenarioFileTest, ChecksListKeepsItsOrder) {
  const std::string path = write("checks.yaml", R"(scenario: checks
model: {fixture: dsv4}
capture: {batch_sizes: [1]}
checks: [replay_diff]
mutations:
  mhc.rebind_broadcast: [replay_diff]
)");
  const Scenario s = parse_scenario_file(path, test_catalog());
  EXPECT_THAT(s.checks, ElementsAre("replay_diff"));
  EXPECT_THAT(s.mutations.at("mhc.rebind_broadcast"), ElementsAre("replay_diff"));
}

TEST(ScenarioCatalogTest, DefaultCatalogKnowsTheBuiltInNames) {
  const ScenarioCatalog catalog = default_catalog();
  EXPECT_THAT(catalog.fixtures, ::testing::Contains("dsv4"));
  EXPECT_THAT(catalog.probes, ::testing::Contains("address"));
  EXPECT_THAT(catalog.probes, ::testing::Contains("replay_diff"));
  ASSERT_TRUE(catalog.is_mutation);
  EXPECT_TRUE(catalog.is_mutation("mhc.rebind_broadcast"));
  EXPECT_FALSE(catalog.is_mutation("mhc.no_such_mutation"));
}

TEST(ScenarioRepoFileTest, DsV4MhcRefitParsesWithTheDefaultCatalog) {
  const std::string path =
      (fs::path(GRAPHCHECK_TEST_SOURCE_DIR) / "scenarios" / "dsv4_mhc_refit.yaml").string();
  const ScenarioCatalog catalog = default_catalog();
  const Scenario s = parse_scenario_file(path, catalog);
  EXPECT_EQ(s.name, "dsv4-mhc-refit");
  EXPECT_THAT(s.description, StartsWith("RL weight sync"));
  EXPECT_EQ(s.fixture, "dsv4");
  EXPECT_EQ(s.config.get_int("layers", 0), 2);
  EXPECT_EQ(s.config.get_int("hidden", 0), 64);
  EXPECT_EQ(s.config.get_int("hc_mult", 0), 4);
  EXPECT_EQ(s.load, LoadFormat::checkpoint);
  EXPECT_EQ(s.seed, 1u);
  EXPECT_THAT(s.batch_sizes, ElementsAre(1, 4));
  ASSERT_EQ(s.cycles.size(), 3u);
  EXPECT_EQ(s.cycles[0].seed, 2u);
  EXPECT_TRUE(s.cycles[0].only.empty());
  EXPECT_EQ(s.cycles[1].seed, 3u);
  EXPECT_THAT(s.cycles[1].only, ElementsAre("layers.0."));
  EXPECT_EQ(s.cycles[2].seed, 4u);
  EXPECT_EQ(s.checks, catalog.probes);  // checks: all
  ASSERT_EQ(s.mutations.count("mhc.rebind_broadcast"), 1u);
  EXPECT_THAT(s.mutations.at("mhc.rebind_broadcast"),
              ElementsAre("address", "replay_diff", "hooks", "poison", "coverage"));
}

TEST(ScenarioRepoFileTest, EveryShippedScenarioParsesWithTheDefaultCatalog) {
  const auto files =
      collect_scenario_files({std::string(GRAPHCHECK_TEST_SOURCE_DIR) + "/scenarios"});
  ASSERT_GE(files.size(), 6u);
  for (const auto& file : files) {
    // scenarios/python/ names Python models: this C++ process refuses them with the type the CLI
    // leaves to `python -m graphcheck`; the Python front's tests run them.
    if (file.find("/scenarios/python/") != std::string::npos) {
      EXPECT_THROW((void)parse_scenario_file(file, default_catalog()), ScenarioNeedsFront) << file;
    } else {
      EXPECT_NO_THROW((void)parse_scenario_file(file, default_catalog())) << file;
    }
  }
}

TEST_F(ScenarioFileTest, PythonModelFileIsResolvedAgainstTheScenarioDirectory) {
  const std::string path = write("suite/py.yaml", R"(scenario: py
model: {python: "../models/./mine.py:make", config: {hidden: 8}}
capture: {batch_sizes: [1]}
)");
  ScenarioCatalog catalog = test_catalog();
  std::vector<std::string> prepared;
  catalog.prepare_model = [&](const std::string& kind, const std::string& spec) {
    prepared.push_back(kind + " " + spec);
    return std::string();
  };
  const Scenario s = parse_scenario_file(path, catalog);
  const std::string file = (m_dir / "models" / "mine.py").lexically_normal().string();
  EXPECT_EQ(s.fixture, "python:" + file + ":make");
  ASSERT_EQ(prepared.size(), 1u);
  EXPECT_EQ(prepared[0], "python " + file + ":make");
  EXPECT_EQ(s.config.get_int("hidden", 0), 8);
}

TEST(ScenarioPythonModel, ModuleSpecIsKeptAndErrorsNameThePlace) {
  ScenarioCatalog catalog = test_catalog();
  catalog.prepare_model = [](const std::string&, const std::string& spec) {
    return spec == "pkg.mod:broken" ? std::string("cannot load Python model 'pkg.mod:broken'") : std::string();
  };
  const std::string head = "scenario: py\nmodel: {python: ";
  const std::string tail = "}\ncapture: {batch_sizes: [1]}\n";
  EXPECT_EQ(parse_scenario_text(head + "\"pkg.mod:make\"" + tail, "s.yaml", catalog).fixture, "python:pkg.mod:make");
  for (const auto& [spec, message] : std::vector<std::pair<std::string, std::string>>{
           {"\"pkg.mod\"", "'model.python' is 'pkg.mod': write it as \"package.module:factory\""},
           {"\"pkg.mod:broken\"", "cannot load Python model 'pkg.mod:broken'"},
           {"\"a:b\", fixture: dsv4", "'model' names both a fixture and a Python model"}}) {
    try {
      (void)parse_scenario_text(head + spec + tail, "s.yaml", catalog);
      ADD_FAILURE() << spec << " parsed";
    } catch (const ScenarioError& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr(message)) << spec;
      EXPECT_THAT(e.what(), ::testing::StartsWith("s.yaml:2:")) << spec;
    }
  }
  // A process without the Python front refuses it with ScenarioNeedsFront, naming the command.
  try {
    (void)parse_scenario_text(head + "\"pkg.mod:make\"" + tail, "s.yaml", test_catalog());
    ADD_FAILURE() << "parsed without a Python front";
  } catch (const ScenarioNeedsFront& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("run it with `python -m graphcheck run s.yaml`"));
  }
}

TEST_F(ScenarioFileTest, RelativeCheckpointIsResolvedAgainstTheScenarioDirectory) {
  const std::string path = write("suite/relative.yaml", R"(scenario: relative
model: {fixture: dsv4}
checkpoint: ../ckpt/./weights.safetensors
capture: {batch_sizes: [1]}
)");
  const Scenario s = parse_scenario_file(path, test_catalog());
  EXPECT_EQ(s.checkpoint, (m_dir / "ckpt" / "weights.safetensors").lexically_normal().string());
}

TEST_F(ScenarioFileTest, AbsoluteCheckpointIsKept) {
  const std::string absolute = (m_dir / "elsewhere" / "w.safetensors").string();
  const std::string path = write("suite/absolute.yaml", "scenario: absolute\n"
                                                        "model: {fixture: dsv4}\n"
                                                        "checkpoint: " + absolute + "\n"
                                                        "capture: {batch_sizes: [1]}\n");
  EXPECT_EQ(parse_scenario_file(path, test_catalog()).checkpoint, absolute);
}

// ---- errors: keys -----------------------------------------------------------------------------

TEST_F(ScenarioFileTest, MisspelledTopLevelKeySuggestsTheRightOne) {
  const std::string message = error_for(R"(scenario: typo
model: {fixture: dsv4}
captur: {batch_sizes: [1]}
)");
  EXPECT_THAT(message, StartsWith(path_of("scenario.yaml") + ":3:1: "));
  EXPECT_THAT(message,
              HasSubstr("unknown key 'captur' in scenario file (did you mean 'capture'?)"));
}

TEST_F(ScenarioFileTest, UnknownKeyInModel) {
  const std::string message = error_for(R"(scenario: typo
model:
  fixture: dsv4
  confg: {layers: 1}
capture: {batch_sizes: [1]}
)");
  EXPECT_THAT(message, StartsWith(path_of("scenario.yaml") + ":4:3: "));
  EXPECT_THAT(message, HasSubstr("unknown key 'confg' in model (did you mean 'config'?)"));
}

TEST_F(ScenarioFileTest, UnknownKeyInCapture) {
  const std::string message = error_for(R"(scenario: typo
model: {fixture: dsv4}
capture:
  batch_sizes: [1]
  graphs: 2
)");
  EXPECT_THAT(message, StartsWith(path_of("scenario.yaml") + ":5:3: "));
  EXPECT_THAT(message, HasSubstr("unknown key 'graphs' in capture"));
  EXPECT_THAT(message, HasSubstr("allowed keys are batch_sizes"));
  EXPECT_THAT(message, Not(HasSubstr("did you mean")));  // nothing close to suggest
}

TEST_F(ScenarioFileTest, UnknownKeyInRefit) {
  const std::string message = error_for(R"(scenario: typo
model: {fixture: dsv4}
capture: {batch_sizes: [1]}
cycles:
  - refit: {seed: 2, olny: [layers.]}
)");
  EXPECT_THAT(message, StartsWith(path_of("scenario.yaml") + ":5:22: "));
  EXPECT_THAT(message, HasSubstr("unknown key 'olny' in refit (did you mean 'only'?)"));
}

TEST_F(ScenarioFileTest, UnknownKeyInCycle) {
  const std::string message = error_for(R"(scenario: typo
model: {fixture: dsv4}
capture: {batch_sizes: [1]}
cycles:
  - refti: {seed: 2}
)");
  EXPECT_THAT(message, StartsWith(path_of("scenario.yaml") + ":5:5: "));
  EXPECT_THAT(message, HasSubstr("unknown key 'refti' in cycle (did you mean 'refit'?)"));
}

// ---- cycle kinds: sleep / wake, reload, bucket sweeps, chunked reloads, prefill -------------

TEST_F(ScenarioFileTest, CycleKindsParse) {
  const Scenario s = parse_scenario_file(write("kinds.yaml", R"(scenario: kinds
model: {fixture: dsv4}
capture: {batch_sizes: [1, 2], eager_batch_sizes: [8, 16]}
cycles:
  - refit: {seed: 2}
  - sleep: {level: 1}
  - sleep: {level: 2}
  - sleep: {level: 2, seed: 5}
  - reload: {}
  - reload:
  - refit: {seed: 6, buckets: sweep, max_splits: 4, pwal: per_bucket}
  - refit: {seed: 7, pwal: per_bucket, buckets: [{name: a, only: [layers.0.]}, {name: b, only: [layers.1.]}]}
  - refit: {seed: 8, pwal: once, buckets: [{name: a, only: [layers.0.]}]}
)"), test_catalog());
  ASSERT_EQ(s.cycles.size(), 9u);
  EXPECT_EQ(s.eager_batch_sizes, (std::vector<std::int64_t>{8, 16}));
  EXPECT_EQ(s.cycles[0].kind, CycleKind::refit);
  EXPECT_TRUE(s.cycles[0].new_weights());
  EXPECT_EQ(s.cycles[1].kind, CycleKind::sleep);
  EXPECT_EQ(s.cycles[1].sleep_level, 1);
  EXPECT_FALSE(s.cycles[1].new_weights());
  EXPECT_EQ(s.cycles[2].sleep_level, 2);
  EXPECT_FALSE(s.cycles[2].has_seed);
  EXPECT_FALSE(s.cycles[2].new_weights());
  EXPECT_TRUE(s.cycles[3].has_seed);
  EXPECT_EQ(s.cycles[3].seed, 5u);
  EXPECT_TRUE(s.cycles[3].new_weights());
  EXPECT_EQ(s.cycles[4].kind, CycleKind::reload);
  EXPECT_EQ(s.cycles[5].kind, CycleKind::reload);
  EXPECT_FALSE(s.cycles[4].new_weights());
  EXPECT_TRUE(s.cycles[6].sweep);
  EXPECT_EQ(s.cycles[6].max_splits, 4);
  EXPECT_TRUE(s.cycles[6].pwal_per_bucket);
  EXPECT_TRUE(s.cycles[7].pwal_per_bucket);
  EXPECT_EQ(s.cycles[7].buckets.size(), 2u);
  EXPECT_FALSE(s.cycles[8].pwal_per_bucket);
  EXPECT_TRUE(s.warnings.empty()) << s.warnings.front();
}

TEST_F(ScenarioFileTest, CyclesThatAllCarryTheHeldWeightsGetAWarning) {
  const Scenario same = parse_scenario_file(write("same.yaml", R"(scenario: same
model: {fixture: dsv4}
seed: 3
capture: {batch_sizes: [1]}
cycles:
  - reload: {}
  - sleep: {level: 2}
  - refit: {seed: 3}
)"), test_catalog());
  ASSERT_EQ(same.warnings.size(), 1u);
  EXPECT_THAT(same.warnings[0], HasSubstr("every cycle of this scenario carries the weights the model already holds"));
  EXPECT_THAT(same.warnings[0], HasSubstr("add a refit with another seed"));

  const Scenario other = parse_scenario_file(write("other.yaml", R"(scenario: other
model: {fixture: dsv4}
seed: 3
capture: {batch_sizes: [1]}
cycles:
  - reload: {}
  - sleep: {level: 2, seed: 4}
)"), test_catalog());
  EXPECT_TRUE(other.warnings.empty());
  const Scenario none = parse_scenario_file(write("none.yaml", R"(scenario: none
model: {fixture: dsv4}
capture: {batch_sizes: [1]}
)"), test_catalog());
  EXPECT_TRUE(none.warnings.empty());
}

TEST_F(ScenarioFileTest, CycleKindErrorsNameThePlaceAndTheFix) {
  const auto cycles = [](const std::string& cycle) {
    return "scenario: bad\nmodel: {fixture: dsv4}\ncapture: {batch_sizes: [1]}\ncycles:\n" + cycle;
  };
  EXPECT_THAT(error_for(cycles("  - sleep: {level: 3}\n")),
              AllOf(HasSubstr(":5:20: "), HasSubstr("sleep level must be 1")));
  EXPECT_THAT(error_for(cycles("  - sleep: {}\n")), HasSubstr("'level'"));
  EXPECT_THAT(error_for(cycles("  - sleep: {level: 1, seed: 4}\n")),
              AllOf(HasSubstr(":5:29: "), HasSubstr("level 1 keeps the weights")));
  EXPECT_THAT(error_for(cycles("  - sleep: {levle: 1}\n")), HasSubstr("unknown key 'levle' in sleep (did you mean 'level'?)"));
  EXPECT_THAT(error_for(cycles("  - reload: {seed: 2}\n")), HasSubstr("'reload' takes no options"));
  EXPECT_THAT(error_for(cycles("  - refit: {seed: 2}\n    reload: {}\n")),
              AllOf(HasSubstr(":5:5: "), HasSubstr("a cycle is one step")));
  EXPECT_THAT(error_for(cycles("  - refit: {seed: 2, buckets: swep}\n")),
              HasSubstr("'buckets' must be 'sweep' or a non-empty list"));
  EXPECT_THAT(error_for(cycles("  - refit: {seed: 2, max_splits: 4}\n")),
              HasSubstr("'max_splits' bounds a bucket sweep: it needs buckets: sweep"));
  EXPECT_THAT(error_for(cycles("  - refit: {seed: 2, buckets: sweep, max_splits: 0}\n")),
              HasSubstr("'max_splits' must be between 1 and 100000"));
  EXPECT_THAT(error_for(cycles("  - refit: {seed: 2, pwal: per_bucket}\n")),
              HasSubstr("'pwal: per_bucket' needs buckets"));
  EXPECT_THAT(error_for(cycles("  - refit: {seed: 2, buckets: sweep, pwal: each}\n")),
              HasSubstr("unknown pwal mode 'each': use once"));
  const auto dummy = [](const std::string& cycle) {
    return "scenario: bad\nmodel: {fixture: dsv4}\nload: dummy\ncapture: {batch_sizes: [1]}\ncycles:\n" + cycle;
  };
  EXPECT_THAT(error_for(dummy("  - reload: {}\n")),
              AllOf(HasSubstr(":6:5: "), HasSubstr("after load: dummy no weights were streamed yet: put a full refit")));
  EXPECT_THAT(error_for(dummy("  - refit: {seed: 2, only: [layers.0.]}\n  - sleep: {level: 2}\n")),
              AllOf(HasSubstr(":7:5: "), HasSubstr("or give the sleep a seed")));
  EXPECT_NO_THROW((void)parse_scenario_file(write("dummy_ok.yaml", dummy("  - refit: {seed: 2}\n  - reload: {}\n  - sleep: {level: 2}\n")),
                                            test_catalog()));
  EXPECT_THAT(error_for("scenario: bad\nmodel: {fixture: dsv4}\ncapture: {batch_sizes: [1, 4], eager_batch_sizes: [4]}\n"),
              AllOf(HasSubstr(":3:52: "), HasSubstr("batch size 4 is both captured and eager-only")));
  EXPECT_THAT(error_for("scenario: bad\nmodel: {fixture: dsv4}\ncapture: {batch_sizes: [1], eager_batch_sizes: []}\n"),
              HasSubstr("'capture.eager_batch_sizes' must be a non-empty list"));
}

// Issue 27: `distributed:` (Note [Distributed scenarios]).
TEST_F(ScenarioFileTest, DistributedBlockParsesWithDefaultsAndRoles) {
  const std::string base = "scenario: d\nmodel: {fixture: dsv4}\ncapture: {batch_sizes: [1]}\ncycles:\n  - refit: {seed: 2}\n";
  const Scenario s = parse_scenario_file(write("d.yaml", base + "distributed: {world_size: 3}\n"), test_catalog());
  ASSERT_TRUE(s.distributed);
  EXPECT_EQ(s.distributed->world_size, 3);
  EXPECT_EQ(s.distributed->trainer, 0);
  EXPECT_EQ(s.distributed->rollout, (std::vector<int>{1, 2}));  // every rank but the trainer
  EXPECT_FALSE(s.distributed->colocated());
  EXPECT_EQ(s.distributed->tp_rank(2), 1);
  EXPECT_EQ(s.distributed->tp_rank(0), -1);
  EXPECT_EQ(s.distributed->transfer, DistributedSpec::Transfer::per_tensor);
  const Scenario c = parse_scenario_file(
      write("c.yaml", base + "distributed: {world_size: 2, rollout: [0, 1], transfer: packed, bucket_bytes: 4096, "
                             "timeout: 30, backend: gloo}\n"),
      test_catalog());
  EXPECT_TRUE(c.distributed->colocated());
  EXPECT_EQ(c.distributed->bucket_bytes, 4096);
  EXPECT_EQ(c.distributed->timeout, 30);
  EXPECT_EQ(c.distributed->backend, "gloo");
  EXPECT_FALSE(parse_scenario_file(write("one.yaml", base), test_catalog()).distributed);
}

TEST_F(ScenarioFileTest, DistributedErrorsNameThePlaceAndTheFix) {
  const auto with = [](const std::string& block, const std::string& cycles = "  - refit: {seed: 2}\n") {
    return "scenario: d\nmodel: {fixture: dsv4}\ncapture: {batch_sizes: [1]}\ncycles:\n" + cycles + block;
  };
  EXPECT_THAT(error_for(with("distributed: {world_size: 1}\n")),
              AllOf(HasSubstr(":6:27: "), HasSubstr("'world_size' must be between 2 and 64")));
  EXPECT_THAT(error_for(with("distributed: {world_size: 2, trainer: 2}\n")), HasSubstr("ranks are 0..1"));
  EXPECT_THAT(error_for(with("distributed: {world_size: 3, rollout: [1]}\n")),
              HasSubstr("rank 2 is neither the trainer nor a rollout rank"));
  EXPECT_THAT(error_for(with("distributed: {world_size: 2, rollout: [1, 1]}\n")), HasSubstr("listed twice"));
  EXPECT_THAT(error_for(with("distributed: {world_size: 2, transfer: bulk}\n")),
              HasSubstr("unknown transfer 'bulk': use per_tensor"));
  EXPECT_THAT(error_for(with("distributed: {world_size: 2, bucket_bytes: 4096}\n")),
              HasSubstr("'bucket_bytes' sizes packed buckets: set transfer: packed"));
  EXPECT_THAT(error_for(with("distributed: {world_size: 2, backend: mpi}\n")),
              HasSubstr("unknown process-group backend 'mpi': use gloo (CPU) or nccl (GPU)"));
  EXPECT_THAT(error_for(with("distributed: {world_size: 2, wolrd: 3}\n")), HasSubstr("unknown key 'wolrd' in distributed"));
  EXPECT_THAT(error_for(with("distributed: {world_size: 2}\n", "  - refit: {seed: 2}\n  - sleep: {level: 1}\n")),
              AllOf(HasSubstr(":6:5: "), HasSubstr("a distributed scenario's cycles are plain refits")));
  EXPECT_THAT(error_for(with("distributed: {world_size: 2}\n", "  - refit: {seed: 2, buckets: sweep}\n")),
              HasSubstr("sleeps, reloads, bucket lists and sweeps run in one process only"));
  EXPECT_THAT(error_for("scenario: d\nmodel: {fixture: dsv4}\nload: dummy\ncapture: {batch_sizes: [1]}\ncycles:\n"
                        "  - refit: {seed: 2}\ndistributed: {world_size: 2}\n"),
              HasSubstr("a distributed scenario loads a checkpoint the engine synthesizes"));
}

TEST(TensorParallel, ShardsFollowVllmsParallelLayers) {
  const std::vector<std::int64_t> w = {64, 32};
  const TensorParallel column{"*", TensorParallel::Kind::column, 0};
  const TensorParallel row{"*", TensorParallel::Kind::row, 0};
  const TensorParallel vocab{"*", TensorParallel::Kind::vocab, 0};
  TensorShard s = tensor_shard(column, "q", w, 1, 2);
  EXPECT_TRUE(s.sharded);
  EXPECT_EQ(s.describe(), "rows 32..63");
  EXPECT_EQ(tensor_shard(row, "o", w, 1, 2).describe(), "columns 16..31");
  EXPECT_FALSE(tensor_shard(row, "bias", std::vector<std::int64_t>{64}, 1, 2).sharded);  // a row layer's bias
  EXPECT_EQ(tensor_shard(vocab, "lm_head", std::vector<std::int64_t>{51, 8}, 1, 2).describe(), "rows 26..50");
  EXPECT_FALSE(tensor_shard(column, "q", w, 0, 1).sharded);
  try {
    (void)tensor_shard(column, "q_proj", std::vector<std::int64_t>{63, 8}, 0, 2);
    ADD_FAILURE() << "no ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_THAT(std::string(e.what()), AllOf(HasSubstr("'q_proj' is 63 along dim 0"), HasSubstr("2 equal parts")));
  }
  const std::vector<TensorParallel> specs = {{"layers.*.attn.q_proj.weight", TensorParallel::Kind::column, 0},
                                             {"layers.**", TensorParallel::Kind::replicated, 0}};
  EXPECT_EQ(find_tensor_parallel(specs, "layers.3.attn.q_proj.weight"), &specs[0]);
  EXPECT_EQ(find_tensor_parallel(specs, "layers.3.norm.weight"), &specs[1]);
  EXPECT_EQ(find_tensor_parallel(specs, "lm_head.weight"), nullptr);
}

// ---- errors: names ----------------------------------------------------------------------------

TEST_F(ScenarioFileTest, UnknownFixture) {
  const std::string message = error_for(R"(scenario: names
model: {fixture: dsv3}
capture: {batch_sizes: [1]}
)");
  EXPECT_THAT(message, StartsWith(path_of("scenario.yaml") + ":2:18: "));
  EXPECT_THAT(message, HasSubstr("unknown fixture 'dsv3' (did you mean 'dsv4'?)"));
  EXPECT_THAT(message, HasSubstr("known fixtures are dsv4"));
}

TEST_F(ScenarioFileTest, UnknownProbeInChecks) {
  const std::string message = error_for(R"(scenario: names
model: {fixture: dsv4}
capture: {batch_sizes: [1]}
checks: [address, replay_dif]
)");
  EXPECT_THAT(message, StartsWith(path_of("scenario.yaml") + ":4:19: "));
  EXPECT_THAT(message, HasSubstr("unknown probe 'replay_dif' (did you mean 'replay_diff'?)"));
  EXPECT_THAT(message, HasSubstr("known probes are address, replay_diff"));
}

TEST_F(ScenarioFileTest, ChecksMustBeAllOrAList) {
  const std::string message = error_for(R"(scenario: names
model: {fixture: dsv4}
capture: {batch_sizes: [1]}
checks: everything
)");
  EXPECT_THAT(message, StartsWith(path_of("scenario.yaml") + ":4:9: "));
  EXPECT_THAT(message, HasSubstr("'checks' must be 'all' or a list of probe names"));
}

TEST_F(ScenarioFileTest, UnknownMutation) {
  const std::string message = error_for(R"(scenario: names
model: {fixture: dsv4}
capture: {batch_sizes: [1]}
checks: all
mutations:
  mhc.rebind_bcast: [address]
)");
  EXPECT_THAT(message, StartsWith(path_of("scenario.yaml") + ":6:3: "));
  EXPECT_THAT(message, HasSubstr("unknown mutation 'mhc.rebind_bcast'"));
}

TEST_F(ScenarioFileTest, MutationProbeMustBeInChecks) {
  const std::string message = error_for(R"(scenario: names
model: {fixture: dsv4}
capture: {batch_sizes: [1]}
checks: [address]
mutations:
  mhc.rebind_broadcast: [address, replay_diff]
)");
  EXPECT_THAT(message, StartsWith(path_of("scenario.yaml") + ":6:35: "));
  EXPECT_THAT(message, HasSubstr("probe 'replay_diff' must catch mutation 'mhc.rebind_broadcast' "
                                 "but is not in this scenario's checks"));
}

TEST_F(ScenarioFileTest, MutationMustListItsProbes) {
  const std::string message = error_for(R"(scenario: names
model: {fixture: dsv4}
capture: {batch_sizes: [1]}
mutations:
  mhc.rebind_broadcast: []
)");
  EXPECT_THAT(message, StartsWith(path_of("scenario.yaml") + ":5:25: "));
  EXPECT_THAT(message, HasSubstr("mutation 'mhc.rebind_broadcast' must list the probes"));
}

TEST_F(ScenarioFileTest, ScenarioNameWithSpacesIsRejected) {
  const std::string message = error_for(R"(scenario: "two words"
model: {fixture: dsv4}
capture: {batch_sizes: [1]}
)");
  EXPECT_THAT(message, StartsWith(path_of("scenario.yaml") + ":1:11: "));
  EXPECT_THAT(message, HasSubstr("without slashes or spaces"));
}

// ---- errors: batch_sizes ----------------------------------------------------------------------

struct BatchSizesCase {
  const char* label;
  const char* value;     // written after "capture: {batch_sizes: ", which puts it at column 24
  const char* location;  // line:column of the offending node
  const char* phrase;
};

std::ostream& operator<<(std::ostream& out, const BatchSizesCase& c) {
  return out << c.label << " (batch_sizes: " << c.value << ")";
}

class BatchSizesError : public ScenarioFileTest,
                        public ::testing::WithParamInterface<BatchSizesCase> {};

TEST_P(BatchSizesError, NamesTheOffendingNode) {
  const BatchSizesCase& c = GetParam();
  const std::string message = error_for(std::string("scenario: sizes\n"
                                                    "model: {fixture: dsv4}\n"
                                                    "capture: {batch_sizes: ") +
                                        c.value + "}\n");
  EXPECT_THAT(message, StartsWith(path_of("scenario.yaml") + ":" + c.location + ": "));
  EXPECT_THAT(message, HasSubstr(c.phrase));
}

INSTANTIATE_TEST_SUITE_P(
    Scenario, BatchSizesError,
    ::testing::Values(
        BatchSizesCase{"Empty", "[]", "3:24", "'capture.batch_sizes' must be a non-empty list"},
        BatchSizesCase{"NotAList", "4", "3:24", "'capture.batch_sizes' must be a non-empty list"},
        BatchSizesCase{"Zero", "[1, 0]", "3:28", "a batch size must be between 1 and 1048576"},
        BatchSizesCase{"TooLarge", "[2000000]", "3:25",
                       "a batch size must be between 1 and 1048576"},
        BatchSizesCase{"Duplicate", "[4, 2, 4]", "3:31", "batch size 4 is listed twice"},
        BatchSizesCase{"Negative", "[-2]", "3:25",
                       "batch size must be a non-negative integer, got '-2'"},
        BatchSizesCase{"Fraction", "[1.5]", "3:25",
                       "batch size must be a non-negative integer, got '1.5'"},
        BatchSizesCase{"Word", "[1, two]", "3:28",
                       "batch size must be a non-negative integer, got 'two'"}),
    [](const ::testing::TestParamInfo<BatchSizesCase>& info) { return info.param.label; });

// ---- errors: missing keys, syntax, values -----------------------------------------------------

TEST_F(ScenarioFileTest, MissingScenarioKey) {
  const std::string message = error_for(R"(model: {fixture: dsv4}
capture: {batch_sizes: [1]}
)");
  EXPECT_THAT(message, StartsWith(path_of("scenario.yaml") + ":1:1: "));
  EXPECT_THAT(message, HasSubstr("missing required key 'scenario' in scenario file"));
}

TEST_F(ScenarioFileTest, MissingModelKey) {
  const std::string message = error_for(R"(scenario: missing
capture: {batch_sizes: [1]}
)");
  EXPECT_THAT(message, StartsWith(path_of("scenario.yaml") + ":1:1: "));
  EXPECT_THAT(message, HasSubstr("missing required key 'model' in scenario file"));
}

TEST_F(ScenarioFileTest, MissingCaptureKey) {
  const std::string message = error_for(R"(scenario: missing
model: {fixture: dsv4}
)");
  EXPECT_THAT(message, StartsWith(path_of("scenario.yaml") + ":1:1: "));
  EXPECT_THAT(message, HasSubstr("missing required key 'capture' in scenario file"));
}

TEST_F(ScenarioFileTest, MissingFixtureKeyPointsAtTheModelMap) {
  const std::string message = error_for(R"(scenario: missing
model: {config: {layers: 1}}
capture: {batch_sizes: [1]}
)");
  EXPECT_THAT(message, StartsWith(path_of("scenario.yaml") + ":2:8: "));
  EXPECT_THAT(message, HasSubstr("missing required key 'fixture' in model"));
}

TEST_F(ScenarioFileTest, MissingRefitSeed) {
  const std::string message = error_for(R"(scenario: missing
model: {fixture: dsv4}
capture: {batch_sizes: [1]}
cycles:
  - refit: {only: [layers.]}
)");
  EXPECT_THAT(message, StartsWith(path_of("scenario.yaml") + ":5:12: "));
  EXPECT_THAT(message, HasSubstr("missing required key 'seed' in refit"));
}

TEST_F(ScenarioFileTest, InvalidYamlReportsTheParserPosition) {
  const std::string message = error_for(R"(scenario: broken
model:
  fixture: dsv4
 config: {layers: 1}
capture: {batch_sizes: [1]}
)");
  EXPECT_THAT(message, StartsWith(path_of("scenario.yaml") + ":4:2: invalid YAML: "));
  EXPECT_THAT(message, HasSubstr("end of map not found"));
}

TEST_F(ScenarioFileTest, TopLevelMustBeAMapping) {
  const std::string message = error_for("- scenario: list\n- model: {fixture: dsv4}\n");
  EXPECT_THAT(message, StartsWith(path_of("scenario.yaml") + ":1:1: "));
  EXPECT_THAT(message, HasSubstr("a scenario file must be a mapping"));
}

TEST_F(ScenarioFileTest, LoadDummyParses) {
  const std::string path = write("dummy.yaml", R"(scenario: load
model: {fixture: dsv4}
load: dummy
capture: {batch_sizes: [1]}
)");
  EXPECT_EQ(parse_scenario_file(path, test_catalog()).load, LoadFormat::dummy);
}

TEST_F(ScenarioFileTest, DummyLoadWithACheckpointFileIsRejected) {
  const std::string message = error_for(R"(scenario: load
model: {fixture: dsv4}
load: dummy
checkpoint: x.safetensors
capture: {batch_sizes: [1]}
)");
  EXPECT_THAT(message, StartsWith(path_of("scenario.yaml") + ":4:13: "));
  EXPECT_THAT(message, HasSubstr("load: dummy"));
}

TEST_F(ScenarioFileTest, UnknownLoadFormat) {
  const std::string message = error_for(R"(scenario: load
model: {fixture: dsv4}
load: bogus
capture: {batch_sizes: [1]}
)");
  EXPECT_THAT(message, StartsWith(path_of("scenario.yaml") + ":3:7: "));
  EXPECT_THAT(message, HasSubstr("unknown load format 'bogus': use checkpoint or dummy"));
}

TEST_F(ScenarioFileTest, EmptyOnlyListIsRejected) {
  const std::string message = error_for(R"(scenario: only
model: {fixture: dsv4}
capture: {batch_sizes: [1]}
cycles:
  - refit: {seed: 2, only: []}
)");
  EXPECT_THAT(message, StartsWith(path_of("scenario.yaml") + ":5:28: "));
  EXPECT_THAT(message, HasSubstr("'only' must be a non-empty list of tensor-name prefixes"));
}

TEST_F(ScenarioFileTest, NonScalarConfigValueIsRejected) {
  const std::string message = error_for(R"(scenario: config
model: {fixture: dsv4, config: {layers: [1, 2]}}
capture: {batch_sizes: [1]}
)");
  EXPECT_THAT(message, StartsWith(path_of("scenario.yaml") + ":2:41: "));
  EXPECT_THAT(message, HasSubstr("config key 'layers' must be a scalar"));
}

TEST_F(ScenarioFileTest, NegativeSeedIsRejected) {
  const std::string message = error_for(R"(scenario: seed
model: {fixture: dsv4}
seed: -1
capture: {batch_sizes: [1]}
)");
  EXPECT_THAT(message, StartsWith(path_of("scenario.yaml") + ":3:7: "));
  EXPECT_THAT(message, HasSubstr("seed must be a non-negative integer, got '-1'"));
}

TEST_F(ScenarioFileTest, MissingFileIsAScenarioError) {
  const std::string missing = path_of("no_such.yaml");
  const std::string message = error_of(missing);
  EXPECT_THAT(message, StartsWith(missing + ": "));
  EXPECT_THAT(message, HasSubstr("cannot read the scenario file"));
}

// ---- collect_scenario_files -------------------------------------------------------------------

TEST_F(ScenarioFileTest, CollectFindsYamlFilesRecursivelyAndSorted) {
  const std::string b = write("suite/b.yaml", "x: 1\n");
  const std::string a = write("suite/a.yml", "x: 1\n");
  const std::string c = write("suite/nested/c.yaml", "x: 1\n");
  (void)write("suite/notes.txt", "not a scenario\n");
  (void)write("suite/nested/d.yaml.bak", "x: 1\n");
  const std::string single = write("single.yaml", "x: 1\n");

  EXPECT_THAT(collect_scenario_files({path_of("suite")}), ElementsAre(a, b, c));
  // Explicit files are kept, and the caller's order of paths is kept.
  EXPECT_THAT(collect_scenario_files({single, path_of("suite")}), ElementsAre(single, a, b, c));
  EXPECT_TRUE(collect_scenario_files({}).empty());
}

TEST_F(ScenarioFileTest, CollectRejectsAMissingPath) {
  const std::string missing = path_of("no_such_dir");
  try {
    (void)collect_scenario_files({missing});
    ADD_FAILURE() << "collect_scenario_files accepted a missing path";
  } catch (const ScenarioError& e) {
    EXPECT_THAT(e.what(), StartsWith(missing + ": "));
    EXPECT_THAT(e.what(), HasSubstr("no such scenario file or directory"));
  }
}

// ---- ModelConfig ------------------------------------------------------------------------------

// Runs `read` and returns the ConfigError message; a test failure when nothing throws.
template <typename Read>
std::string config_error(Read read) {
  try {
    read();
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no ConfigError";
  return {};
}

TEST(ScenarioModelConfig, TypedGettersReturnValuesOrFallbacks) {
  ModelConfig config;
  config.set("layers", std::int64_t{3}, "s.yaml:2:5");
  config.set("ratio", 0.25, "s.yaml:3:5");
  config.set("fast", true, "s.yaml:4:5");
  config.set("mode", std::string("fold"), "s.yaml:5:5");

  EXPECT_EQ(config.get_int("layers", 0), 3);
  EXPECT_DOUBLE_EQ(config.get_double("ratio", 0.0), 0.25);
  EXPECT_DOUBLE_EQ(config.get_double("layers", 0.0), 3.0);  // an integer is a number too
  EXPECT_TRUE(config.get_bool("fast", false));
  EXPECT_EQ(config.get_string("mode", ""), "fold");

  EXPECT_EQ(config.get_int("absent_int", 42), 42);
  EXPECT_DOUBLE_EQ(config.get_double("absent_double", 1.5), 1.5);
  EXPECT_FALSE(config.get_bool("absent_bool", false));
  EXPECT_EQ(config.get_string("absent_string", "dflt"), "dflt");

  EXPECT_EQ(config.where("layers"), "s.yaml:2:5");
  EXPECT_EQ(config.where("absent_int"), "config");
  EXPECT_EQ(to_string(ModelConfig::Value{true}), "true");
  EXPECT_EQ(to_string(ModelConfig::Value{std::int64_t{-7}}), "-7");
  EXPECT_EQ(to_string(ModelConfig::Value{std::string("x")}), "x");
}

TEST(ScenarioModelConfig, WrongTypeNamesKeyAndLocation) {
  ModelConfig config;
  config.set("layers", std::string("two"), "s.yaml:2:13");
  config.set("ratio", std::string("half"), "s.yaml:3:12");
  config.set("fast", std::int64_t{1}, "s.yaml:4:11");
  config.set("mode", 0.5, "s.yaml:5:11");

  std::string message = config_error([&] { (void)config.get_int("layers", 0); });
  EXPECT_THAT(message, StartsWith("s.yaml:2:13: "));
  EXPECT_THAT(message, HasSubstr("config key 'layers' must be an integer, got a string ('two')"));

  message = config_error([&] { (void)config.get_double("ratio", 0.0); });
  EXPECT_THAT(message, StartsWith("s.yaml:3:12: "));
  EXPECT_THAT(message, HasSubstr("config key 'ratio' must be a number, got a string ('half')"));

  message = config_error([&] { (void)config.get_bool("fast", false); });
  EXPECT_THAT(message, StartsWith("s.yaml:4:11: "));
  EXPECT_THAT(message, HasSubstr("config key 'fast' must be true or false, got an integer ('1')"));

  message = config_error([&] { (void)config.get_string("mode", ""); });
  EXPECT_THAT(message, StartsWith("s.yaml:5:11: "));
  EXPECT_THAT(message, HasSubstr("config key 'mode' must be a string, got a number ('0.5')"));

  message = config_error([&] { (void)config.get_int("mode", 0); });
  EXPECT_THAT(message, HasSubstr("config key 'mode' must be an integer, got a number"));
}

TEST(ScenarioModelConfig, WrongTypeWithoutLocationSaysConfig) {
  ModelConfig config;
  config.set("layers", true);
  EXPECT_THAT(config_error([&] { (void)config.get_int("layers", 0); }),
              StartsWith("config: config key 'layers' must be an integer, got a boolean"));
}

TEST(ScenarioModelConfig, RangeCheck) {
  ModelConfig config;
  config.set("layers", std::int64_t{9}, "s.yaml:2:13");
  config.set("hidden", std::int64_t{64}, "s.yaml:3:13");

  EXPECT_EQ(config.get_int("hidden", 8, 1, 64), 64);  // bounds are inclusive
  EXPECT_EQ(config.get_int("hidden", 8, 64, 128), 64);
  EXPECT_EQ(config.get_int("absent", 8, 1, 64), 8);

  const std::string message = config_error([&] { (void)config.get_int("layers", 1, 1, 8); });
  EXPECT_THAT(message, StartsWith("s.yaml:2:13: "));
  EXPECT_THAT(message, HasSubstr("config key 'layers' = 9 is out of range: use a value in [1, 8]"));
  EXPECT_THROW((void)config.get_int("layers", 1, 10, 20), ConfigError);
}

TEST(ScenarioModelConfig, UnusedKeysListsWhatNobodyRead) {
  ModelConfig config;
  config.set("layers", std::int64_t{2});
  config.set("hiden", std::int64_t{64});  // a misspelling nobody reads
  config.set("mode", std::string("x"));
  EXPECT_THAT(config.unused_keys(), ElementsAre("hiden", "layers", "mode"));

  (void)config.get_int("layers", 0);
  (void)config.get_int("hidden", 0);  // absent: the fallback, does not use "hiden"
  EXPECT_THAT(config.unused_keys(), ElementsAre("hiden", "mode"));

  // A read that throws still counts as a read: the key is not unknown, it has a wrong type.
  EXPECT_THROW((void)config.get_int("mode", 0), ConfigError);
  EXPECT_THAT(config.unused_keys(), ElementsAre("hiden"));
}

TEST(ScenarioModelConfig, SetReplacesValueAndLocation) {
  ModelConfig config;
  config.set("layers", std::int64_t{2}, "a.yaml:1:1");
  config.set("layers", std::int64_t{4}, "b.yaml:2:2");
  EXPECT_EQ(config.values().size(), 1u);
  EXPECT_EQ(config.get_int("layers", 0), 4);
  EXPECT_EQ(config.where("layers"), "b.yaml:2:2");
}

}  // namespace
}  // namespace graphcheck

namespace graphcheck {
namespace {

TEST_F(ScenarioFileTest, DuplicateTopLevelKeyNamesBothPlaces) {
  const std::string message = error_for(R"(scenario: dup
model: {fixture: dsv4}
capture: {batch_sizes: [1]}
capture: {batch_sizes: [2]}
)");
  EXPECT_THAT(message, StartsWith(path_of("scenario.yaml") + ":4:1: "));
  EXPECT_THAT(message, HasSubstr("key 'capture' appears twice in scenario file (first at "));
  EXPECT_THAT(message, HasSubstr("scenario.yaml:3:1)"));
}

TEST_F(ScenarioFileTest, DuplicateConfigKeyIsRejected) {
  const std::string message = error_for(R"(scenario: dup
model: {fixture: dsv4, config: {layers: 1, layers: 2}}
capture: {batch_sizes: [1]}
)");
  EXPECT_THAT(message, HasSubstr("key 'layers' appears twice in model.config"));
}

TEST_F(ScenarioFileTest, NonScalarConfigKeyIsAScenarioError) {
  const std::string message = error_for(R"(scenario: odd
model: {fixture: dsv4, config: {[x]: 1}}
capture: {batch_sizes: [1]}
)");
  EXPECT_THAT(message, StartsWith(path_of("scenario.yaml") + ":2:33: "));
  EXPECT_THAT(message, HasSubstr("keys in model.config must be strings"));
}

TEST_F(ScenarioFileTest, DuplicateProbeInChecksIsRejected) {
  const std::string message = error_for(R"(scenario: dup
model: {fixture: dsv4}
capture: {batch_sizes: [1]}
checks: [address, address]
)");
  EXPECT_THAT(message, StartsWith(path_of("scenario.yaml") + ":4:19: "));
  EXPECT_THAT(message, HasSubstr("probe 'address' is listed twice"));
}

TEST(ScenarioModelConfigText, HexAndNanStayStringsAndWholeDoublesLookLikeNumbers) {
  EXPECT_EQ(to_string(ModelConfig::Value{2.0}), "2.0");
  EXPECT_EQ(to_string(ModelConfig::Value{0.5}), "0.5");
}

}  // namespace
}  // namespace graphcheck

namespace graphcheck {
namespace {

TEST_F(ScenarioFileTest, DummyConstantsAndGrowthParse) {
  const std::string path = write("growth.yaml", R"(scenario: growth
model: {fixture: dsv4}
load: dummy
capture: {batch_sizes: [1]}
dummy_constants: {table.weight: 1.0, table.weight_scale_inv: 127}
dummy_growth: {key: depth, values: [1, 2, 4]}
)");
  const Scenario s = parse_scenario_file(path, test_catalog());
  EXPECT_EQ(s.dummy_constants.at("table.weight"), 1.0);
  EXPECT_EQ(s.dummy_constants.at("table.weight_scale_inv"), 127.0);
  ASSERT_TRUE(s.dummy_growth.has_value());
  EXPECT_EQ(s.dummy_growth->key, "depth");
  EXPECT_THAT(s.dummy_growth->values, ElementsAre(1, 2, 4));
}

TEST_F(ScenarioFileTest, DummyOptionsNeedTheDummyLoad) {
  const std::string message = error_for(R"(scenario: growth
model: {fixture: dsv4}
capture: {batch_sizes: [1]}
dummy_growth: {key: depth, values: [1, 2]}
)");
  EXPECT_THAT(message, StartsWith(path_of("scenario.yaml") + ":4:15: "));
  EXPECT_THAT(message, HasSubstr("'dummy_growth' needs load: dummy"));
}

TEST_F(ScenarioFileTest, DummyConstantMustBeANumber) {
  const std::string message = error_for(R"(scenario: growth
model: {fixture: dsv4}
load: dummy
capture: {batch_sizes: [1]}
dummy_constants: {table.weight: one}
)");
  EXPECT_THAT(message, HasSubstr("dummy constant for 'table.weight' must be a number, got 'one'"));
}

// ---- refit buckets, poison options, expect_error ------------------------------------------------

ScenarioCatalog poison_catalog() {
  ScenarioCatalog catalog = test_catalog();
  catalog.probes.push_back("poison");
  return catalog;
}

TEST_F(ScenarioFileTest, BucketsPoisonAndExpectErrorParse) {
  const std::string path = write("quant.yaml", R"(scenario: quant
model: {fixture: dsv4}
capture: {batch_sizes: [1]}
cycles:
  - refit: {seed: 2}
  - refit:
      seed: 3
      buckets:
        - {name: first, only: ["layers.0."]}
        - {name: second, only: ["layers.1.", "head."]}
checks: [poison, replay_diff]
poison: {staged: ["layers.*.weight_scale_inv"], poison_before_refit: true}
expect_error: "use moe_backend: deep_gemm"
)");
  const Scenario s = parse_scenario_file(path, poison_catalog());
  ASSERT_EQ(s.cycles.size(), 2u);
  EXPECT_TRUE(s.cycles[0].buckets.empty());
  EXPECT_TRUE(s.cycles[0].prefixes().empty());
  ASSERT_EQ(s.cycles[1].buckets.size(), 2u);
  EXPECT_EQ(s.cycles[1].buckets[0].name, "first");
  EXPECT_THAT(s.cycles[1].buckets[1].only, ElementsAre("layers.1.", "head."));
  EXPECT_THAT(s.cycles[1].prefixes(), ElementsAre("layers.0.", "layers.1.", "head."));
  EXPECT_THAT(s.poison.staged, ElementsAre("layers.*.weight_scale_inv"));
  EXPECT_TRUE(s.poison.before_refit);
  EXPECT_EQ(s.expect_error, "use moe_backend: deep_gemm");
  EXPECT_EQ(s.expect_error_where, path + ":13:15");
}

TEST_F(ScenarioFileTest, OnlyAndBucketsTogetherAreRejected) {
  const std::string message = error_of(write("scenario.yaml", R"(scenario: b
model: {fixture: dsv4}
capture: {batch_sizes: [1]}
cycles:
  - refit: {seed: 2, only: ["a."], buckets: [{name: x, only: ["b."]}]}
)"));
  EXPECT_THAT(message, StartsWith(path_of("scenario.yaml") + ":5:45: "));
  EXPECT_THAT(message, HasSubstr("either 'only' or 'buckets', not both"));
}

TEST_F(ScenarioFileTest, BucketErrorsNameThePlace) {
  EXPECT_THAT(error_for(R"(scenario: b
model: {fixture: dsv4}
capture: {batch_sizes: [1]}
cycles:
  - refit: {seed: 2, buckets: [{name: x, only: ["a."]}, {name: x, only: ["b."]}]}
)"),
              AllOf(StartsWith(path_of("scenario.yaml") + ":5:64: "),
                    HasSubstr("bucket 'x' is listed twice in this refit")));
  EXPECT_THAT(error_for(R"(scenario: b
model: {fixture: dsv4}
capture: {batch_sizes: [1]}
cycles:
  - refit: {seed: 2, buckets: [{name: x}]}
)"),
              HasSubstr("missing required key 'only' in bucket"));
  EXPECT_THAT(error_for(R"(scenario: b
model: {fixture: dsv4}
capture: {batch_sizes: [1]}
cycles:
  - refit: {seed: 2, buckets: [{name: x, onyl: ["a."]}]}
)"),
              HasSubstr("unknown key 'onyl' in bucket (did you mean 'only'?)"));
  EXPECT_THAT(error_for(R"(scenario: b
model: {fixture: dsv4}
capture: {batch_sizes: [1]}
cycles:
  - refit: {seed: 2, buckets: []}
)"),
              HasSubstr("'buckets' must be 'sweep' or a non-empty list"));
}

TEST_F(ScenarioFileTest, PoisonOptionsAreValidated) {
  // The probe must be in checks.
  EXPECT_THAT(error_of(write("scenario.yaml", R"(scenario: p
model: {fixture: dsv4}
capture: {batch_sizes: [1]}
cycles: [{refit: {seed: 2}}]
checks: [replay_diff]
poison: {poison_before_refit: true}
)"), poison_catalog()),
              AllOf(StartsWith(path_of("scenario.yaml") + ":6:9: "),
                    HasSubstr("the poison probe, which is not in this scenario's checks")));
  // It acts on refits.
  EXPECT_THAT(error_of(write("scenario.yaml", R"(scenario: p
model: {fixture: dsv4}
capture: {batch_sizes: [1]}
poison: {staged: ["a.*"]}
)"), poison_catalog()),
              HasSubstr("this scenario has no refit cycles"));
  EXPECT_THAT(error_of(write("scenario.yaml", R"(scenario: p
model: {fixture: dsv4}
capture: {batch_sizes: [1]}
cycles: [{refit: {seed: 2}}]
poison: {poison_before_refit: yes}
)"), poison_catalog()),
              AllOf(StartsWith(path_of("scenario.yaml") + ":5:31: "),
                    HasSubstr("'poison_before_refit' must be true or false, got 'yes'")));
  EXPECT_THAT(error_of(write("scenario.yaml", R"(scenario: p
model: {fixture: dsv4}
capture: {batch_sizes: [1]}
cycles: [{refit: {seed: 2}}]
poison: {staged: []}
)"), poison_catalog()),
              HasSubstr("'poison.staged' must be a non-empty list of tensor-name patterns"));
  EXPECT_THAT(error_of(write("scenario.yaml", R"(scenario: p
model: {fixture: dsv4}
capture: {batch_sizes: [1]}
cycles: [{refit: {seed: 2}}]
poison: {stage: ["a"]}
)"), poison_catalog()),
              HasSubstr("unknown key 'stage' in poison (did you mean 'staged'?)"));
}

TEST_F(ScenarioFileTest, EmptyExpectErrorIsRejected) {
  EXPECT_THAT(error_for(R"(scenario: e
model: {fixture: dsv4}
capture: {batch_sizes: [1]}
expect_error: ""
)"),
              AllOf(StartsWith(path_of("scenario.yaml") + ":4:15: "),
                    HasSubstr("'expect_error' must be a non-empty part of the error message")));
}

// ---- hostile input: each a ScenarioError naming the place, never a hang or a crash ------------

constexpr const char* k_valid_tail = "model: {fixture: dsv4}\ncapture: {batch_sizes: [1]}\n";

TEST_F(ScenarioFileTest, FifoAndDirectoryAreRefusedWithoutBlocking) {
  const std::string fifo = path_of("pipe.yaml");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << "mkfifo " << fifo;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THAT(error_of(fifo), AllOf(StartsWith(fifo + ": "),
                                    HasSubstr("is a FIFO (named pipe), not a regular file")));
  try {
    (void)collect_scenario_files({fifo});
    ADD_FAILURE() << "collect_scenario_files accepted a FIFO";
  } catch (const ScenarioError& e) {
    EXPECT_THAT(e.what(), AllOf(StartsWith(fifo + ": "), HasSubstr("is a FIFO (named pipe), not a "
                                                                   "scenario file")));
  }
  // A FIFO named *.yaml inside a directory is an error too, not silently skipped.
  try {
    (void)collect_scenario_files({m_dir.string()});
    ADD_FAILURE() << "collect_scenario_files accepted a directory holding a FIFO";
  } catch (const ScenarioError& e) {
    EXPECT_THAT(e.what(), HasSubstr("pipe.yaml: is a FIFO"));
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_THAT(error_of(m_dir.string()),
              AllOf(StartsWith(m_dir.string() + ": "), HasSubstr("is a directory, not a regular file")));
  if (fs::exists("/dev/zero")) {
    EXPECT_THAT(error_of("/dev/zero"), HasSubstr("is a character device"));
  }
}

TEST_F(ScenarioFileTest, EmptyFileAndOversizedFile) {
  EXPECT_THAT(error_of(write("empty.yaml", "")),
              AllOf(StartsWith(path_of("empty.yaml") + ":1:1: "), HasSubstr("holds no YAML document")));
  EXPECT_THAT(error_of(write("comments.yaml", "# nothing\n")), HasSubstr("holds no YAML document"));
  const std::string big = "scenario: big\ndescription: \"" + std::string(1 << 20, 'x') + "\"\n";
  EXPECT_THAT(error_of(write("big.yaml", big)),
              AllOf(StartsWith(path_of("big.yaml") + ": "), HasSubstr("over the 1048576-byte limit")));
}

TEST_F(ScenarioFileTest, DeepNestingNamesTheLimit) {
  // Past yaml-cpp's own guard (2000 levels), whose message was "bad file".
  const std::string flow = "scenario: deep\ndescription: " + std::string(100'000, '[') +
                           std::string(100'000, ']') + "\n";
  EXPECT_THAT(error_of(write("flow.yaml", flow)),
              AllOf(StartsWith(path_of("flow.yaml") + ":"), HasSubstr("YAML nested deeper than 64 levels"),
                    Not(HasSubstr("bad file"))));
  std::string maps = "scenario: deep\nmodel: ";
  for (int i = 0; i < 100'000; ++i) maps += "{a: ";
  maps += "1" + std::string(100'000, '}') + "\n";
  EXPECT_THAT(error_of(write("maps.yaml", maps)), HasSubstr("YAML nested deeper than 64 levels"));
  // Below yaml-cpp's guard, above graphcheck's: the position and the path are named.
  const std::string shallow =
      "scenario: deep\ndescription: " + std::string(100, '[') + std::string(100, ']') + "\n";
  EXPECT_THAT(error_of(write("shallow.yaml", shallow)),
              AllOf(StartsWith(path_of("shallow.yaml") + ":2:77: "),
                    HasSubstr("YAML nested deeper than 64 levels at 'description[0][0]")));
}

TEST_F(ScenarioFileTest, AliasBombIsRefused) {
  std::string bomb = "scenario: bomb\na0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 10; ++i) {
    bomb += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int k = 0; k < 10; ++k) bomb += (k ? ", *a" : "*a") + std::to_string(i - 1);
    bomb += "]\n";
  }
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THAT(error_of(write("bomb.yaml", bomb)),
              AllOf(StartsWith(path_of("bomb.yaml") + ":"),
                    HasSubstr("expands to more than 100000 YAML nodes"), HasSubstr("alias bomb")));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  // An alias of a node inside itself would expand for ever.
  EXPECT_THAT(error_of(write("cycle.yaml", "scenario: c\ndescription: &a [*a]\n")),
              HasSubstr("nested deeper than 64 levels"));
  // Aliases that stay small are fine.
  const std::string path = write("alias.yaml", "scenario: alias\nmodel: {fixture: dsv4}\n"
                                               "capture: {batch_sizes: &sizes [1, 4]}\n"
                                               "cycles: [{refit: {seed: 2}}, {refit: {seed: 3}}]\n");
  EXPECT_THAT(parse_scenario_file(path, test_catalog()).batch_sizes, ElementsAre(1, 4));
}

TEST_F(ScenarioFileTest, InvalidUtf8IsRefusedWithTheKey) {
  EXPECT_THAT(error_for(std::string("scenario: u\ndescription: ab\xff") + "cd\n" + k_valid_tail),
              AllOf(StartsWith(path_of("scenario.yaml") + ":2:14: "),
                    HasSubstr("the value of 'description' is not valid UTF-8 (byte 0xff at offset 2 "
                              "of 'ab\\xffcd')")));
  EXPECT_THAT(error_for(std::string("scenario: u\nmodel: {fixture: dsv4, config: {l\xc3: 1}}\n"
                                    "capture: {batch_sizes: [1]}\n")),
              AllOf(StartsWith(path_of("scenario.yaml") + ":2:33: "),
                    HasSubstr("a key in 'model.config' is not valid UTF-8")));
  // Overlong forms and surrogates are not UTF-8 either; the name is checked like any string.
  EXPECT_THAT(error_for(std::string("scenario: \xc0\xaf\n") + k_valid_tail),
              HasSubstr("the value of 'scenario' is not valid UTF-8"));
  EXPECT_THAT(error_for(std::string("scenario: a\xed\xa0\x80\n") + k_valid_tail),
              HasSubstr("is not valid UTF-8 (byte 0xed at offset 1"));
  // Valid multi-byte UTF-8 passes.
  const std::string path = write("ok.yaml", std::string("scenario: caf\xc3\xa9-\xe2\x9c\x93\n") + k_valid_tail);
  EXPECT_EQ(parse_scenario_file(path, test_catalog()).name, "caf\xc3\xa9-\xe2\x9c\x93");
}

struct NameCase {
  const char* label;
  const char* yaml;  // the value after "scenario: "
  const char* phrase;
};

std::ostream& operator<<(std::ostream& out, const NameCase& c) { return out << c.label; }

class ScenarioNameError : public ScenarioFileTest, public ::testing::WithParamInterface<NameCase> {};

TEST_P(ScenarioNameError, IsRefusedAtParseTime) {
  const NameCase& c = GetParam();
  EXPECT_THAT(error_for(std::string("scenario: ") + c.yaml + "\n" + k_valid_tail),
              AllOf(StartsWith(path_of("scenario.yaml") + ":1:11: "), HasSubstr(c.phrase),
                    HasSubstr("without slashes or spaces"), HasSubstr("not '.' or '..'")));
}

INSTANTIATE_TEST_SUITE_P(
    Scenario, ScenarioNameError,
    ::testing::Values(NameCase{"Empty", "\"\"", "scenario name '' is empty"},
                      NameCase{"Dot", "\".\"", "scenario name '.' names a directory"},
                      NameCase{"DotDot", "..", "scenario name '..' names a directory"},
                      NameCase{"Slash", "a/b", "holds a slash"},
                      NameCase{"ParentPath", "../../etc", "holds a slash"},
                      NameCase{"Backslash", "'a\\b'", "holds a backslash"},
                      NameCase{"Space", "\"a b\"", "holds a space"},
                      NameCase{"Tab", "\"a\\tb\"", "holds the control character 0x09"},
                      NameCase{"Nul", "\"a\\0b\"", "scenario name 'a\\x00b' holds the control character 0x00"},
                      NameCase{"Escape", "\"a\\x1bb\"", "holds the control character 0x1b"},
                      NameCase{"TooLong",
                               "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                               "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                               "is 158 bytes long"}),
    [](const ::testing::TestParamInfo<NameCase>& info) { return info.param.label; });

TEST_F(ScenarioFileTest, TabsInTheIndentationAreNamed) {
  EXPECT_THAT(error_for("scenario: t\nmodel:\n\tfixture: dsv4\ncapture: {batch_sizes: [1]}\n"),
              AllOf(StartsWith(path_of("scenario.yaml") + ":3:1: "),
                    HasSubstr("tab character in the indentation: YAML indents with spaces only")));
  EXPECT_THAT(error_for("scenario: t\nmodel:\n  fixture: dsv4\n  \tconfig: {layers: 1}\n"
                        "capture: {batch_sizes: [1]}\n"),
              AllOf(StartsWith(path_of("scenario.yaml") + ":4:3: "), HasSubstr("tab character")));
  // A tab inside a block scalar is text, not indentation.
  const std::string path = write("ok.yaml", std::string("scenario: t\ndescription: |\n  \tindented\n") + k_valid_tail);
  EXPECT_EQ(parse_scenario_file(path, test_catalog()).description, "\tindented\n");
}

struct TypeCase {
  const char* label;
  const char* text;
  const char* location;
  const char* phrase;
};

std::ostream& operator<<(std::ostream& out, const TypeCase& c) { return out << c.label; }

class WrongYamlType : public ScenarioFileTest, public ::testing::WithParamInterface<TypeCase> {};

TEST_P(WrongYamlType, NamesTheKeyAndThePlace) {
  const TypeCase& c = GetParam();
  EXPECT_THAT(error_for(c.text), AllOf(StartsWith(path_of("scenario.yaml") + ":" + c.location + ": "),
                                       HasSubstr(c.phrase)));
}

INSTANTIATE_TEST_SUITE_P(
    Scenario, WrongYamlType,
    ::testing::Values(
        TypeCase{"NameIsAList", "scenario: [a]\nmodel: {fixture: dsv4}\ncapture: {batch_sizes: [1]}\n",
                 "1:11", "'scenario' must be a string"},
        TypeCase{"ModelIsAList", "scenario: t\nmodel: [dsv4]\ncapture: {batch_sizes: [1]}\n", "2:8",
                 "'model' must be a mapping"},
        TypeCase{"CaptureIsAList", "scenario: t\nmodel: {fixture: dsv4}\ncapture: [1]\n", "3:10",
                 "'capture' must be a mapping"},
        TypeCase{"BatchSizesIsAMap",
                 "scenario: t\nmodel: {fixture: dsv4}\ncapture: {batch_sizes: {a: 1}}\n", "3:24",
                 "'capture.batch_sizes' must be a non-empty list"},
        TypeCase{"CyclesIsAMap",
                 "scenario: t\nmodel: {fixture: dsv4}\ncapture: {batch_sizes: [1]}\ncycles: {refit: 1}\n",
                 "4:9", "'cycles' must be a list"},
        TypeCase{"RefitIsAList",
                 "scenario: t\nmodel: {fixture: dsv4}\ncapture: {batch_sizes: [1]}\ncycles: [{refit: [1]}]\n",
                 "4:18", "'refit' must be a mapping"},
        TypeCase{"OnlyIsAMap",
                 "scenario: t\nmodel: {fixture: dsv4}\ncapture: {batch_sizes: [1]}\n"
                 "cycles: [{refit: {seed: 1, only: {a: b}}}]\n",
                 "4:34", "'only' must be a non-empty list"},
        TypeCase{"ConfigIsAList", "scenario: t\nmodel: {fixture: dsv4, config: [1]}\ncapture: {batch_sizes: [1]}\n",
                 "2:32", "'model.config' must be a mapping"},
        TypeCase{"DescriptionIsAMap",
                 "scenario: t\ndescription: {a: 1}\nmodel: {fixture: dsv4}\ncapture: {batch_sizes: [1]}\n",
                 "2:14", "'description' must be a string"},
        TypeCase{"SeedIsAList", "scenario: t\nseed: [1]\nmodel: {fixture: dsv4}\ncapture: {batch_sizes: [1]}\n",
                 "2:7", "seed must be a non-negative integer, got 'a non-scalar'"},
        TypeCase{"ChecksIsAMap",
                 "scenario: t\nmodel: {fixture: dsv4}\ncapture: {batch_sizes: [1]}\nchecks: {address: 1}\n",
                 "4:9", "'checks' must be 'all' or a list of probe names"},
        TypeCase{"DuplicateNestedKey",
                 "scenario: t\nmodel: {fixture: dsv4}\ncapture: {batch_sizes: [1], batch_sizes: [2]}\n",
                 "3:29", "key 'batch_sizes' appears twice in capture (first at"}),
    [](const ::testing::TestParamInfo<TypeCase>& info) { return info.param.label; });

TEST_F(ScenarioFileTest, ParseScenarioTextMatchesTheFile) {
  const std::string text = std::string("scenario: text\n") + k_valid_tail;
  const Scenario from_text = parse_scenario_text(text, path_of("virtual/s.yaml"), test_catalog());
  EXPECT_EQ(from_text.name, "text");
  EXPECT_EQ(from_text.file, path_of("virtual/s.yaml"));
  try {
    (void)parse_scenario_text("scenario: [", "mem.yaml", test_catalog());
    ADD_FAILURE() << "parse_scenario_text accepted broken YAML";
  } catch (const ScenarioError& e) {
    EXPECT_THAT(e.what(), StartsWith("mem.yaml:"));
  }
}

// ---- module-path patterns ---------------------------------------------------------------------

// The recursive matcher glob.cpp had before (exponential, unbounded recursion), as a reference for
// the semantics on small inputs.
bool reference_path_matches(std::string_view pattern, std::string_view path) {
  if (pattern.empty()) return path.empty();
  if (pattern.substr(0, 2) == "**") {
    for (std::size_t i = 0; i <= path.size(); ++i) {
      if (reference_path_matches(pattern.substr(2), path.substr(i))) return true;
    }
    return false;
  }
  if (pattern[0] == '*') {
    for (std::size_t i = 0; i <= path.size(); ++i) {
      if (reference_path_matches(pattern.substr(1), path.substr(i))) return true;
      if (i < path.size() && path[i] == '.') break;
    }
    return false;
  }
  return !path.empty() && pattern[0] == path[0] &&
         reference_path_matches(pattern.substr(1), path.substr(1));
}

TEST(PathPatterns, AgreeWithTheRecursiveDefinition) {
  std::mt19937 rng(7);
  const char pattern_chars[] = {'a', 'b', '.', '*', '*'};
  const char path_chars[] = {'a', 'b', '.'};
  for (int round = 0; round < 20'000; ++round) {
    std::string pattern, path;
    for (std::size_t i = rng() % 8; i > 0; --i) pattern += pattern_chars[rng() % 5];
    for (std::size_t i = rng() % 10; i > 0; --i) path += path_chars[rng() % 3];
    ASSERT_EQ(path_matches(pattern, path), reference_path_matches(pattern, path))
        << "pattern '" << pattern << "', path '" << path << "'";
  }
  EXPECT_TRUE(path_matches("layers.*.experts", "layers.0.experts"));
  EXPECT_FALSE(path_matches("layers.*.experts", "layers.0.mlp.experts"));
  EXPECT_TRUE(path_matches("**.experts", "layers.0.mlp.experts"));
  EXPECT_TRUE(path_matches("layers.***", "layers.0.mlp"));  // "**" then "*"
  EXPECT_TRUE(path_matches("", ""));
  EXPECT_FALSE(path_matches("", "a"));
}

TEST(PathPatterns, PathologicalPatternsMatchInLinearTime) {
  // The old matcher took time exponential in the number of stars here, and recursed once per
  // character of the path.
  std::string pattern;
  for (int i = 0; i < 40; ++i) pattern += "**a";
  pattern += "b";
  const std::string path(100'000, 'a');
  std::string single;
  for (int i = 0; i < 40; ++i) single += "*a";
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(path_matches(pattern, path));
  EXPECT_FALSE(path_matches(single + "b", path));
  EXPECT_TRUE(path_matches(pattern, path + "b"));
  EXPECT_TRUE(path_matches(std::string(1000, '*'), path));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

// Note [Huge pages for the scenario's heap]: glibc's heap asks for huge pages in a scenario's
// process, unless the user's own tunables say otherwise; the rest of the environment is kept.
TEST(ScenarioEnvironment, TheHeapAsksForHugePagesUnlessTheUserSaysOtherwise) {
  const auto of = [](std::vector<const char*> env) {
    env.push_back(nullptr);
    return session::scenario_environment(env.data());
  };
  EXPECT_EQ(of({"PATH=/bin", "HOME=/root"}),
            (std::vector<std::string>{"PATH=/bin", "HOME=/root", "GLIBC_TUNABLES=glibc.malloc.hugetlb=1"}));
  EXPECT_EQ(of({"GLIBC_TUNABLES=glibc.malloc.check=3"}),
            (std::vector<std::string>{"GLIBC_TUNABLES=glibc.malloc.check=3:glibc.malloc.hugetlb=1"}));
  EXPECT_EQ(of({"GLIBC_TUNABLES="}), (std::vector<std::string>{"GLIBC_TUNABLES=glibc.malloc.hugetlb=1"}));
  EXPECT_EQ(of({"GLIBC_TUNABLES=glibc.malloc.hugetlb=0"}),
            (std::vector<std::string>{"GLIBC_TUNABLES=glibc.malloc.hugetlb=0"}));
  EXPECT_EQ(session::scenario_environment(nullptr), (std::vector<std::string>{"GLIBC_TUNABLES=glibc.malloc.hugetlb=1"}));
}

}  // namespace
}  // namespace graphcheck
