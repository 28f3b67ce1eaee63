// Event order: a recording probe against the expected list (begin events in probe order, end
// events in reverse), and model failures becoming failed checks.

#include <c10/core/CPUAllocator.h>
#include <gtest/gtest.h>
#include <torch/nn/module.h>
#include <torch/types.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "graphcheck/checkpoint.h"
#include "graphcheck/engine/driver.h"
#include "graphcheck/engine/session.h"
#include "graphcheck/model.h"
#include "graphcheck/mutation.h"
#include "graphcheck/probe.h"
#include "graphcheck/engine/reporter.h"
#include "graphcheck_test_config.h"
#include "support/file_reaper.h"

namespace graphcheck {
namespace {

class RecordingProbe final : public Probe {
 public:
  RecordingProbe(std::string id, std::vector<std::string>& log) : m_id(std::move(id)), m_log(log) {}
  [[nodiscard]] std::string name() const override { return "recording"; }

  void on_scenario_begin(RunContext&) override { add("scenario_begin"); }
  void on_construct_begin(RunContext&, const PhaseEvent& e) override { add("construct_begin", e); }
  void on_construct_end(RunContext&, const PhaseEvent& e) override { add("construct_end", e); }
  void on_load_begin(RunContext&, const LoadEvent& e) override { add("load_begin", e); }
  void on_load_end(RunContext&, const LoadEvent& e) override {
    add(fmt::format("load_end[{} tensors]", e.loaded.size()), e);
  }
  void on_pwal_begin(RunContext&, const PhaseEvent& e) override { add("pwal_begin", e); }
  void on_pwal_end(RunContext&, const PhaseEvent& e) override { add("pwal_end", e); }
  void on_warmup_begin(RunContext&, const PhaseEvent& e) override { add("warmup_begin", e); }
  void on_warmup_end(RunContext&, const PhaseEvent& e) override { add("warmup_end", e); }
  void on_capture_begin(RunContext&, const CaptureEvent& e) override { add("capture_begin", e); }
  void on_capture_end(RunContext&, const CaptureEvent& e) override {
    add(e.graph ? "capture_end" : "capture_end[no graph]", e);
  }
  void on_replay_begin(RunContext&, const ReplayEvent& e) override { add("replay_begin", e); }
  void on_replay_end(RunContext&, const ReplayEvent& e) override { add("replay_end", e); }
  void on_compare_begin(RunContext&, const CompareEvent& e) override { add("compare_begin", e); }
  void on_compare_end(RunContext&, const CompareEvent& e) override { add("compare_end", e); }
  void on_refit_begin(RunContext&, const PhaseEvent& e) override { add("refit_begin", e); }
  void on_refit_end(RunContext&, const PhaseEvent& e) override { add("refit_end", e); }
  void on_sleep_begin(RunContext&, const SleepEvent& e) override { add(fmt::format("sleep_begin[{}]", e.level), e); }
  void on_sleep_end(RunContext&, const SleepEvent& e) override { add("sleep_end", e); }
  void on_wake_begin(RunContext&, const SleepEvent& e) override { add("wake_begin", e); }
  void on_wake_end(RunContext&, const SleepEvent& e) override { add("wake_end", e); }
  void on_hook(RunContext&, const HookEvent& e) override {
    m_log.push_back(fmt::format("{} hook {} {} in {}@{}", m_id, e.module_path, e.hook,
                                to_string(e.phase), e.cycle));
  }
  void on_scenario_end(RunContext&) override { add("scenario_end"); }

 private:
  void add(const std::string& what) { m_log.push_back(m_id + " " + what); }
  void add(const std::string& what, const PhaseEvent& e) {
    m_log.push_back(fmt::format("{} {} {}@{} b{}", m_id, what, to_string(e.phase), e.cycle, e.batch_size));
  }
  std::string m_id;
  std::vector<std::string>& m_log;
};

Scenario tiny_scenario(std::vector<std::string> checks = {}) {
  Scenario s;
  s.name = "tiny";
  s.file = "tiny.yaml";
  s.fixture = "dsv4";
  s.config.set("layers", std::int64_t{1});
  s.config.set("hidden", std::int64_t{8});
  s.config.set("hc_mult", std::int64_t{2});
  s.config.set("experts", std::int64_t{2});
  s.config.set("intermediate", std::int64_t{4});
  s.batch_sizes = {1, 2};
  s.cycles = {RefitSpec{2, {}, {}, ""}};
  s.checks = std::move(checks);
  return s;
}

RunOptions options_with(std::vector<Probe*> probes) {
  RunOptions o;
  o.work_dir = std::string(GRAPHCHECK_TEST_BINARY_DIR) + "/driver_events_work";
  o.extra_probes = std::move(probes);
  return o;
}

// dsv4's load_weights() runs PWAL itself, then the loader runs it again: the hooks fire in both
// phases, MegaMoE before mHC.
template <class Begin, class End>
void hooks_in_load_and_pwal(int cycle, Begin& begin, End& end) {
  begin(fmt::format("load_begin load@{} b0", cycle));
  begin(fmt::format("hook layers.0.experts finalize_mega_moe_weights in load@{}", cycle));
  begin(fmt::format("hook layers.0 finalize_mhc_broadcast_weights in load@{}", cycle));
  end(fmt::format("load_end[6 tensors] load@{} b0", cycle));
  begin(fmt::format("pwal_begin pwal@{} b0", cycle));
  begin(fmt::format("hook layers.0.experts finalize_mega_moe_weights in pwal@{}", cycle));
  begin(fmt::format("hook layers.0 finalize_mhc_broadcast_weights in pwal@{}", cycle));
  end(fmt::format("pwal_end pwal@{} b0", cycle));
}

// Expected events for one probe, or for two probes interleaved (begin A B, end B A).
std::vector<std::string> expected(const std::vector<std::string>& ids) {
  std::vector<std::string> out;
  auto begin = [&](const std::string& what) {
    for (const auto& id : ids) out.push_back(id + " " + what);
  };
  auto end = [&](const std::string& what) {
    for (auto it = ids.rbegin(); it != ids.rend(); ++it) out.push_back(*it + " " + what);
  };
  begin("scenario_begin");
  begin("construct_begin construct@0 b0");
  end("construct_end construct@0 b0");
  hooks_in_load_and_pwal(0, begin, end);
  for (int b : {1, 2}) {
    begin(fmt::format("warmup_begin warmup@0 b{}", b));
    end(fmt::format("warmup_end warmup@0 b{}", b));
  }
  for (int b : {1, 2}) {
    begin(fmt::format("capture_begin capture@0 b{}", b));
    end(fmt::format("capture_end capture@0 b{}", b));
  }
  for (int cycle : {0, 1}) {
    if (cycle == 1) {
      begin("refit_begin refit@1 b0");
      hooks_in_load_and_pwal(1, begin, end);
      end("refit_end refit@1 b0");
    }
    for (int b : {1, 2}) {
      begin(fmt::format("replay_begin replay@{} b{}", cycle, b));
      end(fmt::format("replay_end replay@{} b{}", cycle, b));
      begin(fmt::format("compare_begin compare@{} b{}", cycle, b));
      end(fmt::format("compare_end compare@{} b{}", cycle, b));
    }
  }
  begin("scenario_end");
  return out;
}

TEST(DriverEvents, OneProbeSeesEveryPhaseInOrder) {
  std::vector<std::string> log;
  RecordingProbe probe("A", log);
  ScenarioRecord r = run_scenario(tiny_scenario(), options_with({&probe}));
  EXPECT_EQ(r.status, Status::passed) << r.reason;
  EXPECT_EQ(log, expected({"A"}));
}

TEST(DriverEvents, BeginEventsInProbeOrderEndEventsReversed) {
  std::vector<std::string> log;
  RecordingProbe a("A", log), b("B", log);
  ScenarioRecord r = run_scenario(tiny_scenario(), options_with({&a, &b}));
  EXPECT_EQ(r.status, Status::passed) << r.reason;
  EXPECT_EQ(log, expected({"A", "B"}));
}

TEST(DriverEvents, ReferenceModelAndOtherPassesAreNotReported) {
  // The driver builds model B every cycle, the idempotence pass re-runs PWAL after every PWAL,
  // the validate pass replays fresh inputs, and every checkpoint is synthesized by a fresh model:
  // none of their hooks or events may reach a probe of the observe pass.
  std::vector<std::string> log;
  RecordingProbe probe("A", log);
  ScenarioRecord r = run_scenario(tiny_scenario({"replay_diff", "address", "hooks", "memory"}),
                                  options_with({&probe}));
  EXPECT_EQ(r.status, Status::passed) << r.reason;
  EXPECT_EQ(log, expected({"A"}));
  EXPECT_EQ(r.probes, (std::vector<std::string>{"replay_diff", "address", "hooks", "memory"}));
}

// A level-1 sleep: sleep and wake windows, no load, then the replays; a level-2 sleep: the
// reload follows the wake as refit events of the same cycle. Prefill (eager-only) compares come
// before the graphs' of each cycle, without a graph.
TEST(DriverEvents, SleepWakeAndPrefillEventsInOrder) {
  std::vector<std::string> log;
  RecordingProbe probe("A", log);
  Scenario s = tiny_scenario();
  s.batch_sizes = {1};
  s.eager_batch_sizes = {3};
  RefitSpec level1;
  level1.kind = CycleKind::sleep;
  level1.sleep_level = 1;
  level1.has_seed = false;
  RefitSpec level2 = level1;
  level2.sleep_level = 2;
  s.cycles = {level1, level2};
  ScenarioRecord r = run_scenario(s, options_with({&probe}));
  EXPECT_EQ(r.status, Status::passed) << r.reason;
  std::vector<std::string> expected_tail;
  for (int cycle : {1, 2}) {
    expected_tail.push_back(fmt::format("A sleep_begin[{}] sleep@{} b0", cycle, cycle));
    expected_tail.push_back(fmt::format("A sleep_end sleep@{} b0", cycle));
    expected_tail.push_back(fmt::format("A wake_begin wake@{} b0", cycle));
    expected_tail.push_back(fmt::format("A wake_end wake@{} b0", cycle));
    if (cycle == 2) {
      expected_tail.push_back("A refit_begin refit@2 b0");
      std::vector<std::string> loads;
      auto add = [&](const std::string& what) { loads.push_back("A " + what); };
      hooks_in_load_and_pwal(2, add, add);
      expected_tail.insert(expected_tail.end(), loads.begin(), loads.end());
      expected_tail.push_back("A refit_end refit@2 b0");
    }
    expected_tail.push_back(fmt::format("A compare_begin compare@{} b3", cycle));
    expected_tail.push_back(fmt::format("A compare_end compare@{} b3", cycle));
    expected_tail.push_back(fmt::format("A replay_begin replay@{} b1", cycle));
    expected_tail.push_back(fmt::format("A replay_end replay@{} b1", cycle));
    expected_tail.push_back(fmt::format("A compare_begin compare@{} b1", cycle));
    expected_tail.push_back(fmt::format("A compare_end compare@{} b1", cycle));
  }
  expected_tail.push_back("A scenario_end");
  ASSERT_GE(log.size(), expected_tail.size());
  EXPECT_EQ(std::vector<std::string>(log.end() - static_cast<std::ptrdiff_t>(expected_tail.size()), log.end()),
            expected_tail);
}

TEST(DriverEvents, DummyLoadSkipsLoadWeightsAndRunsPwal) {
  std::vector<std::string> log;
  RecordingProbe probe("A", log);
  Scenario s = tiny_scenario();
  s.load = LoadFormat::dummy;
  s.cycles.clear();
  ScenarioRecord r = run_scenario(s, options_with({&probe}));
  EXPECT_EQ(r.status, Status::passed) << r.reason;
  const std::vector<std::string> head(log.begin() + 3, log.begin() + 8);
  EXPECT_EQ(head, (std::vector<std::string>{
                      "A load_begin load@0 b0", "A load_end[6 tensors] load@0 b0",
                      "A pwal_begin pwal@0 b0",
                      "A hook layers.0.experts finalize_mega_moe_weights in pwal@0",
                      "A hook layers.0 finalize_mhc_broadcast_weights in pwal@0"}));
}

// ---- failures -------------------------------------------------------------------------------

class ThrowingModel final : public LifecycleModel {
 public:
  explicit ThrowingModel(const ModelConfig& c) : m_throw_in(c.get_string("throw_in", "forward")) {
    m_module.register_parameter("w", torch::zeros({2, 2}));
  }
  torch::nn::Module& module() override { return m_module; }
  std::set<std::string> load_weights(WeightStream& weights) override {
    if (m_throw_in == "load") throw std::runtime_error("loader exploded");
    return load_module_weights(*this, weights);
  }
  void process_weights_after_loading() override {
    if (m_throw_in == "pwal") TORCH_CHECK(false, "transformed weights missing");
  }
  torch::Tensor forward(const torch::Tensor& x) override {
    TORCH_CHECK(m_throw_in != "forward", "forward: weights were never finalized");
    return torch::matmul(x, m_module.named_parameters()["w"]);
  }
  torch::Tensor make_input(std::int64_t b, std::uint64_t) override { return torch::ones({b, 2}); }
  std::vector<NamedTensor> synthesize_checkpoint(std::uint64_t seed) override {
    if (m_throw_in == "refit_synthesis" && seed == 77) throw std::runtime_error("no weights for seed 77");
    return LifecycleModel::synthesize_checkpoint(seed);
  }

 private:
  std::string m_throw_in;
  torch::nn::Module m_module;
};
GRAPHCHECK_REGISTER_MODEL("test_throwing", [](const ModelConfig& c) {
  return std::make_unique<ThrowingModel>(c);
});

ScenarioRecord run_throwing(const std::string& where) {
  Scenario s;
  s.name = "throwing-" + where;
  s.file = "throwing.yaml";
  s.fixture = "test_throwing";
  s.config.set("throw_in", where, "throwing.yaml:3:5");
  s.batch_sizes = {1};
  s.checks = {"replay_diff", "address"};
  return run_scenario(s, options_with({}));
}

TEST(DriverFailures, ModelExceptionsBecomeFailedChecksWithPhaseAndMessage) {
  struct Case {
    std::string where, phase, text;
  };
  for (const Case& c : {Case{"forward", "warmup", "forward: weights were never finalized"},
                        Case{"pwal", "pwal", "transformed weights missing"},
                        Case{"load", "load", "loader exploded"}}) {
    ScenarioRecord r = run_throwing(c.where);
    EXPECT_EQ(r.status, Status::failed) << c.where << ": " << r.reason;
    ASSERT_EQ(r.findings.size(), 1u) << c.where;
    EXPECT_EQ(r.findings[0].probe, "driver");
    EXPECT_EQ(r.findings[0].phase, c.phase);
    EXPECT_NE(r.findings[0].message.find(c.text), std::string::npos) << r.findings[0].message;
  }
}

// Note [Synthesis before the model]: the first pass synthesizes every refit's checkpoint before it
// constructs model A, but a synthesis that fails there is reported where the lifecycle meets it:
// in the refit, its cycle, after an initial load that went well.
TEST(DriverFailures, AFailedRefitSynthesisIsReportedInItsRefit) {
  Scenario s;
  s.name = "throwing-refit-synthesis";
  s.file = "throwing.yaml";
  s.fixture = "test_throwing";
  s.config.set("throw_in", std::string("refit_synthesis"), "throwing.yaml:3:5");
  s.batch_sizes = {1};
  s.cycles = {RefitSpec{77, {}, {}, ""}};
  s.checks = {"replay_diff", "address"};
  const ScenarioRecord r = run_scenario(s, options_with({}));
  EXPECT_EQ(r.status, Status::failed) << r.reason;
  ASSERT_EQ(r.findings.size(), 1u);
  EXPECT_EQ(r.findings[0].probe, "driver");
  EXPECT_EQ(r.findings[0].phase, "refit");
  EXPECT_EQ(r.findings[0].cycle, 1);
  EXPECT_NE(r.findings[0].message.find("no weights for seed 77"), std::string::npos)
      << r.findings[0].message;
}

TEST(DriverFailures, UnknownConfigKeyIsAUserError) {
  Scenario s = tiny_scenario();
  s.config.set("hiden", std::int64_t{8}, "x.yaml:4:30");
  ScenarioRecord r = run_scenario(s, options_with({}));
  EXPECT_EQ(r.status, Status::error);
  EXPECT_NE(r.reason.find("x.yaml:4:30: unknown config key 'hiden'"), std::string::npos) << r.reason;
}

TEST(DriverFailures, ConfigOutOfRangeIsAUserError) {
  Scenario s = tiny_scenario();
  s.config.set("hidden", std::int64_t{0}, "x.yaml:4:30");
  ScenarioRecord r = run_scenario(s, options_with({}));
  EXPECT_EQ(r.status, Status::error);
  EXPECT_NE(r.reason.find("'hidden' = 0 is out of range"), std::string::npos) << r.reason;
}

TEST(DriverFailures, RefitPrefixMatchingNothingIsAUserError) {
  Scenario s = tiny_scenario();
  s.cycles = {RefitSpec{2, {"layers.7."}, {}, ""}};
  ScenarioRecord r = run_scenario(s, options_with({}));
  EXPECT_EQ(r.status, Status::error);
  EXPECT_NE(r.reason.find("layers.7."), std::string::npos) << r.reason;
}

TEST(DriverFailures, MutationIsScopedToTheScenario) {
  RunOptions o = options_with({});
  o.mutations = {"mhc.rebind_broadcast"};
  ScenarioRecord mutated = run_scenario(tiny_scenario({"address", "replay_diff"}), o);
  EXPECT_EQ(mutated.status, Status::failed);
  EXPECT_EQ(mutated.failed_probes(), (std::set<std::string>{"address", "replay_diff"}));
  EXPECT_FALSE(mutation::enabled("mhc.rebind_broadcast"));
  ScenarioRecord clean = run_scenario(tiny_scenario({"address", "replay_diff"}), options_with({}));
  EXPECT_EQ(clean.status, Status::passed);
  EXPECT_TRUE(clean.findings.empty());
}

}  // namespace
}  // namespace graphcheck

// ---- pass isolation -------------------------------------------------------------------------

namespace graphcheck {
namespace {

// Every model call, with the instance that made it, in one log shared with a recording probe.
std::vector<std::string> g_pass_log;
int g_next_instance = 0;

class LoggingModel final : public LifecycleModel {
 public:
  explicit LoggingModel(const ModelConfig&) : m_id(g_next_instance++) {
    m_module.register_parameter("w", torch::zeros({2, 2}));
    log("construct");
  }
  torch::nn::Module& module() override { return m_module; }
  std::set<std::string> load_weights(WeightStream& weights) override {
    log("load_weights");
    return load_module_weights(*this, weights);
  }
  void process_weights_after_loading() override { log("pwal"); }
  void stage_for_refit() override { log("stage_for_refit"); }
  torch::Tensor forward(const torch::Tensor& x) override {
    log("forward");
    return torch::matmul(x, m_module.named_parameters()["w"]);
  }
  torch::Tensor make_input(std::int64_t b, std::uint64_t seed) override {
    return torch::full({b, 2}, static_cast<double>(seed % 7) - 3.0);
  }
  std::vector<NamedTensor> synthesize_checkpoint(std::uint64_t seed) override {
    log("synthesize");
    return LifecycleModel::synthesize_checkpoint(seed);
  }

 private:
  void log(const std::string& what) { g_pass_log.push_back(fmt::format("model#{} {}", m_id, what)); }
  int m_id;
  torch::nn::Module m_module;
};
GRAPHCHECK_REGISTER_MODEL("test_logging", [](const ModelConfig& c) {
  return std::make_unique<LoggingModel>(c);
});

// Probes get no model control in any pass (passes act, probes observe): RunContext has no
// control() any more.
template <class Context>
concept HandsOutControl = requires(Context& c) { c.control(); };
static_assert(!HandsOutControl<RunContext>, "no pass may hand probes model control");

// Records its events and checks that the observe pass gives it no control.
class IsolationProbe final : public EmptyProbe {
 public:
  [[nodiscard]] std::string name() const override { return "isolation"; }
  void on_scenario_begin(RunContext& ctx) override {
    EXPECT_EQ(ctx.pass(), Pass::observe);
    g_pass_log.push_back("probe scenario_begin");
  }
  void on_construct_begin(RunContext&, const PhaseEvent& e) override { begin(e); }
  void on_construct_end(RunContext&, const PhaseEvent& e) override { end(e); }
  void on_load_begin(RunContext&, const LoadEvent& e) override { begin(e); }
  void on_load_end(RunContext&, const LoadEvent& e) override { end(e); }
  void on_pwal_begin(RunContext&, const PhaseEvent& e) override { begin(e); }
  void on_pwal_end(RunContext&, const PhaseEvent& e) override { end(e); }
  void on_warmup_begin(RunContext&, const PhaseEvent& e) override { begin(e); }
  void on_warmup_end(RunContext&, const PhaseEvent& e) override { end(e); }
  void on_capture_begin(RunContext&, const CaptureEvent& e) override { begin(e); }
  void on_capture_end(RunContext&, const CaptureEvent& e) override { end(e); }
  void on_replay_begin(RunContext&, const ReplayEvent& e) override { begin(e); }
  void on_replay_end(RunContext&, const ReplayEvent& e) override { end(e); }
  void on_compare_begin(RunContext&, const CompareEvent& e) override { begin(e); }
  void on_compare_end(RunContext&, const CompareEvent& e) override { end(e); }
  void on_refit_begin(RunContext&, const PhaseEvent& e) override { begin(e); }
  void on_refit_end(RunContext&, const PhaseEvent& e) override { end(e); }
  void on_scenario_end(RunContext&) override { g_pass_log.push_back("probe scenario_end"); }

 private:
  static void begin(const PhaseEvent& e) { g_pass_log.push_back(fmt::format("probe begin {}", to_string(e.phase))); }
  static void end(const PhaseEvent& e) { g_pass_log.push_back(fmt::format("probe end {}", to_string(e.phase))); }
};

TEST(PassIsolation, ObserveProbesSeeOnlyModelACallsOfTheirOwnPhaseInsideWindows) {
  g_pass_log.clear();
  g_next_instance = 0;
  Scenario s;
  s.name = "isolation";
  s.file = "isolation.yaml";
  s.fixture = "test_logging";
  s.batch_sizes = {1, 2};
  s.cycles = {RefitSpec{2, {}, {}, ""}, RefitSpec{3, {}, {}, ""}};
  s.checks = ProbeRegistry::get().names();  // every pass runs
  IsolationProbe probe;
  ScenarioRecord r = run_scenario(s, options_with({&probe}));
  EXPECT_EQ(r.status, Status::passed) << r.reason;
  EXPECT_EQ(r.passes, (std::vector<std::string>{"validate", "observe", "idempotence", "census",
                                                "poison", "coverage", "stream_order"}));

  // The probe saw one scenario (the observe pass) and nothing of the others.
  EXPECT_EQ(std::count(g_pass_log.begin(), g_pass_log.end(), "probe scenario_begin"), 1);
  const auto first = std::find(g_pass_log.begin(), g_pass_log.end(), "probe scenario_begin");
  const auto last = std::find(g_pass_log.begin(), g_pass_log.end(), "probe scenario_end");
  ASSERT_LT(first, last);

  // Model A is the instance constructed inside the observe pass's construct window.
  std::string a;
  std::vector<std::string> open;  // phases whose window is open
  const std::map<std::string, std::set<std::string>> allowed = {
      {"construct", {"construct"}},
      {"load", {"load_weights"}},
      {"pwal", {"pwal"}},
      {"warmup", {"forward"}},
      {"capture", {"forward"}},
      {"replay", {}},
      {"compare", {"forward"}},
      {"refit", {"stage_for_refit"}}};
  int calls_in_windows = 0;
  for (auto it = first; it != last; ++it) {
    const std::string& line = *it;
    if (line.rfind("probe begin ", 0) == 0) {
      open.push_back(line.substr(12));
      continue;
    }
    if (line.rfind("probe end ", 0) == 0) {
      ASSERT_FALSE(open.empty());
      EXPECT_EQ(open.back(), line.substr(10));
      open.pop_back();
      continue;
    }
    if (line.rfind("model#", 0) != 0) continue;
    const std::string instance = line.substr(0, line.find(' '));
    const std::string call = line.substr(line.find(' ') + 1);
    if (open.empty()) {
      // Between windows: the driver's own work (model B, checkpoint synthesis), never model A.
      EXPECT_NE(instance, a) << "model A called outside every window: " << line;
      continue;
    }
    if (open.back() == "construct" && call == "construct" && a.empty()) a = instance;
    EXPECT_EQ(instance, a) << "another instance called inside the " << open.back() << " window: " << line;
    EXPECT_TRUE(allowed.at(open.back()).count(call)) << line << " inside the " << open.back() << " window";
    ++calls_in_windows;
  }
  EXPECT_TRUE(open.empty());
  EXPECT_FALSE(a.empty());
  EXPECT_GT(calls_in_windows, 10);
  // The other passes did run, each on instances of their own.
  std::set<std::string> instances;
  for (const auto& line : g_pass_log) {
    if (line.rfind("model#", 0) == 0) instances.insert(line.substr(0, line.find(' ')));
  }
  EXPECT_GT(instances.size(), 6u);
}

TEST(PassIsolation, FindingsNameTheirPassAndARebindShowsAFiniteStaleDifference) {
  RunOptions o = options_with({});
  o.mutations = {"mhc.rebind_broadcast"};
  Scenario s = tiny_scenario(ProbeRegistry::get().names());
  ScenarioRecord r = run_scenario(s, o);
  EXPECT_EQ(r.status, Status::failed);
  std::map<std::string, std::set<std::string>> passes_of;
  for (const auto& f : r.findings) passes_of[f.probe].insert(f.pass);
  EXPECT_EQ(passes_of["replay_diff"], (std::set<std::string>{"observe"}));
  EXPECT_EQ(passes_of["address"], (std::set<std::string>{"observe"}));
  EXPECT_EQ(passes_of["poison"], (std::set<std::string>{"poison"}));
  EXPECT_EQ(passes_of["coverage"], (std::set<std::string>{"coverage"}));
  int replay_findings = 0;
  for (const auto& f : r.findings) {
    if (f.probe != "replay_diff" || f.subject != "replay vs eager(A)") continue;
    ++replay_findings;
    for (const auto& [k, v] : f.evidence) {
      if (k == "max_abs") {
        EXPECT_TRUE(std::isfinite(std::stod(v))) << "poison leaked into replay_diff: " << v;
      }
    }
  }
  EXPECT_GT(replay_findings, 0);
}

}  // namespace
}  // namespace graphcheck

// ---- the write census on loaders of other shapes --------------------------------------------

namespace graphcheck {
namespace {

// Loads by rebinding each parameter to a copy of the loaded tensor (set_data), as some loaders
// do before anything is captured; its dummy loader skips `w2` when asked to.
class RebindingModel final : public LifecycleModel {
 public:
  explicit RebindingModel(const ModelConfig& c) : m_skip_w2(c.get_bool("dummy_skips_w2", false)) {
    m_module.register_parameter("w1", torch::zeros({2, 2}));
    m_module.register_parameter("w2", torch::zeros({2, 2}));
  }
  torch::nn::Module& module() override { return m_module; }
  std::set<std::string> load_weights(WeightStream& weights) override {
    std::set<std::string> loaded;
    auto params = m_module.named_parameters();
    while (auto item = weights.next()) {
      params[item->name].set_data(item->tensor.clone());
      loaded.insert(item->name);
    }
    return loaded;
  }
  void load_dummy_weights(std::uint64_t) override {
    auto params = m_module.named_parameters();
    params["w1"].fill_(0.5);
    if (!m_skip_w2) params["w2"].fill_(0.25);
  }
  void process_weights_after_loading() override {}
  torch::Tensor forward(const torch::Tensor& x) override {
    auto params = m_module.named_parameters();
    return torch::matmul(x, params["w1"]) + torch::matmul(x, params["w2"]);
  }
  torch::Tensor make_input(std::int64_t b, std::uint64_t) override { return torch::ones({b, 2}); }

 private:
  bool m_skip_w2;
  torch::nn::Module m_module;
};
GRAPHCHECK_REGISTER_MODEL("test_rebinding", [](const ModelConfig& c) {
  return std::make_unique<RebindingModel>(c);
});

Scenario rebinding_scenario() {
  Scenario s;
  s.name = "rebinding";
  s.file = "rebinding.yaml";
  s.fixture = "test_rebinding";
  s.batch_sizes = {1};
  s.checks = {"census", "replay_diff"};
  return s;
}

TEST(WriteCensus, ALoaderThatRebindsBeforeAnyCaptureIsNoFinding) {
  ScenarioRecord r = run_scenario(rebinding_scenario(), options_with({}));
  EXPECT_EQ(r.status, Status::passed) << (r.findings.empty() ? r.reason : r.findings[0].message);
  double rebound = 0;
  for (const auto& m : r.measurements) {
    if (m.tag == "gc/census/rebound_by_loader") rebound += m.value;
  }
  EXPECT_EQ(rebound, 2) << "both names were rebound by the loader, not written";
}

TEST(WriteCensus, ADummyLoaderThatSkipsATensorIsNamed) {
  Scenario s = rebinding_scenario();
  s.load = LoadFormat::dummy;
  s.config.set("dummy_skips_w2", true, "rebinding.yaml:3:5");
  s.checks = {"census", "init_count"};
  ScenarioRecord r = run_scenario(s, options_with({}));
  EXPECT_EQ(r.status, Status::failed);
  std::map<std::string, std::string> by_probe;
  for (const auto& f : r.findings) by_probe[f.probe] = f.subject + ": " + f.message;
  EXPECT_NE(by_probe["census"].find("w2: 'w2' still holds the poison the census wrote before the "
                                    "initial dummy load in 4 of 4 elements"),
            std::string::npos)
      << by_probe["census"];
  EXPECT_NE(by_probe["init_count"].find("tensor 'w2' was written 0 times"), std::string::npos)
      << by_probe["init_count"];
}

}  // namespace
}  // namespace graphcheck

// ---- verdicts as data -----------------------------------------------------------------------

namespace graphcheck {
namespace {

Finding finding_of(std::string probe, std::string pass) {
  Finding f;
  f.probe = std::move(probe);
  f.pass = std::move(pass);
  f.subject = "x";
  f.message = "y";
  return f;
}

// A probe that throws in one event: a finding of probe "harness" naming it and the event; the
// scenario goes on, and the other probes' checks still run.
class ThrowingProbe final : public EmptyProbe {
 public:
  [[nodiscard]] std::string name() const override { return "thrower"; }
  void on_pwal_end(RunContext&, const PhaseEvent& e) override {
    ++calls;
    if (e.cycle == 0) throw std::runtime_error("the probe's own bug");
  }
  int calls = 0;
};

TEST(ProbeFailures, AProbeThatThrowsIsAHarnessFindingAndTheScenarioGoesOn) {
  RunOptions o = options_with({});
  o.mutations = {"mhc.rebind_broadcast"};
  ThrowingProbe thrower;
  o.extra_probes = {&thrower};
  Scenario s = tiny_scenario({"address", "replay_diff", "hooks"});
  ScenarioRecord r = run_scenario(s, o);
  EXPECT_EQ(r.status, Status::failed) << r.reason;
  std::vector<const Finding*> harness;
  bool address = false, replay_diff = false;
  for (const auto& f : r.findings) {
    if (f.probe == "harness") harness.push_back(&f);
    address = address || f.probe == "address";
    replay_diff = replay_diff || f.probe == "replay_diff";
  }
  ASSERT_EQ(harness.size(), 1u);
  EXPECT_NE(harness[0]->message.find("probe 'thrower'"), std::string::npos) << harness[0]->message;
  EXPECT_NE(harness[0]->message.find("on_pwal_end"), std::string::npos) << harness[0]->message;
  EXPECT_NE(harness[0]->message.find("the probe's own bug"), std::string::npos) << harness[0]->message;
  EXPECT_EQ(harness[0]->pass, "observe");
  EXPECT_EQ(harness[0]->cycle, 0);
  // The lifecycle went on past the throw: the refit's PWAL reached the probe too, and the other
  // probes' checks (the mutation's catches after the refit) ran.
  EXPECT_EQ(thrower.calls, 2);
  EXPECT_TRUE(address);
  EXPECT_TRUE(replay_diff);
  bool timed_replay = false;
  for (const auto& m : r.measurements) timed_replay = timed_replay || m.tag == "gc/timing/replay";
  EXPECT_TRUE(timed_replay);
}

TEST(MutationVerdicts, CreditOnlyFromTheProbesOwnPassesAndNetOfTheCleanRun) {
  ScenarioRecord r;
  r.name = "s";
  r.expected_catches = {{"m", {"poison", "replay_diff", "address"}}};
  r.findings = {finding_of("poison", "observe"),       // not a pass poison runs in
                finding_of("replay_diff", "validate"),  // one of replay_diff's passes
                finding_of("address", "observe"), finding_of("driver", "census")};
  MutationVerdict v = session::judge_mutation(r, "m", /*clean_failed=*/{"address"});
  EXPECT_TRUE(v.declared);
  EXPECT_EQ(v.caught, (std::map<std::string, std::string>{{"replay_diff", "validate"}, {"driver", "census"}}));
  EXPECT_EQ(v.missed, (std::vector<std::string>{"poison", "address"}));
  EXPECT_FALSE(v.ok());
  EXPECT_EQ(verdict_line(r, v),
            "mutation m on s: NOT caught by declared probe(s) poison, address [driver: census pass; "
            "replay_diff: validate pass]");
}

TEST(MutationVerdicts, EveryRunWithAMutationCarriesItsVerdictInEveryReport) {
  RunOptions o = options_with({});
  o.mutations = {"mhc.rebind_broadcast"};
  Scenario s = tiny_scenario({"address", "replay_diff"});
  s.mutations = {{"mhc.rebind_broadcast", {"address", "replay_diff"}}};
  RunRecord run;
  run.scenarios.push_back(run_scenario(s, o));
  ASSERT_EQ(run.scenarios[0].verdicts.size(), 1u);
  EXPECT_TRUE(run.scenarios[0].verdicts[0].ok());
  EXPECT_EQ(run.scenarios[0].verdicts[0].caught.at("address"), "observe");
  const std::string json = json_report(run);
  EXPECT_NE(json.find("\"verdicts\""), std::string::npos);
  EXPECT_NE(json.find("\"mutation\": \"mhc.rebind_broadcast\""), std::string::npos);
  const std::string junit = junit_report(run);
  EXPECT_NE(junit.find("mutation_verdict"), std::string::npos);
  EXPECT_NE(junit.find("caught by address, replay_diff"), std::string::npos) << junit;
}

TEST(KillMatrix, RowsAreDataInJsonAndJunit) {
  KillMatrix m;
  m.probes = {"address", "census"};
  ScenarioRecord clean;
  clean.name = "s";
  KillMatrixRow clean_row = session::kill_matrix_row(m, clean, "");
  EXPECT_EQ(clean_row.verdict, "ok");
  ScenarioRecord mutated;
  mutated.name = "s";
  mutated.status = Status::failed;
  mutated.expected_catches = {{"m", {"address", "census"}}};
  mutated.findings = {finding_of("census", "census")};
  mutated.verdicts = {session::judge_mutation(mutated, "m")};
  KillMatrixRow row = session::kill_matrix_row(m, mutated, "m");
  EXPECT_EQ(row.cells.at("census"), "KILLED:census");
  EXPECT_EQ(row.cells.at("address"), "MISSED");
  EXPECT_EQ(row.verdict, "FAIL: not caught by address");
  EXPECT_NE(kill_matrix_line(m, row).find("     census"), std::string::npos);
  m.rows = {clean_row, row};
  m.problems = {"s m: FAIL: not caught by address"};
  RunRecord run;
  run.kill_matrix = m;
  const std::string json = json_report(run);
  EXPECT_NE(json.find("\"kill_matrix\""), std::string::npos);
  EXPECT_NE(json.find("\"census\": \"KILLED:census\""), std::string::npos) << json;
  const std::string junit = junit_report(run);
  EXPECT_NE(junit.find("<testsuite name=\"kill matrix\" tests=\"2\" failures=\"1\">"), std::string::npos) << junit;
  EXPECT_NE(junit.find("FAIL: not caught by address"), std::string::npos);
}

// The session judges each mutated run against its own scenario's clean run, in plan order
// whatever order the records arrive in, and every row that is not ok is a problem.
TEST(KillMatrix, TheSessionJudgesRowsInPlanOrderNetOfTheCleanRun) {
  Scenario s = tiny_scenario({"address", "census"});
  s.mutations = {{"mhc.rebind_broadcast", {"address", "census"}}};
  const session::Plan plan = session::plan_mutants({s});
  ASSERT_EQ(plan.items.size(), 2u);
  EXPECT_EQ(plan.items[1].mutation, "mhc.rebind_broadcast");
  EXPECT_EQ(plan.items[1].clean, 0u);
  EXPECT_EQ(plan.declared, (std::set<std::string>{"mhc.rebind_broadcast"}));

  ScenarioRecord clean;  // the clean run already fails census
  clean.name = "tiny";
  clean.status = Status::failed;
  clean.findings = {finding_of("census", "census")};
  ScenarioRecord mutated;
  mutated.name = "tiny";
  mutated.status = Status::failed;
  mutated.expected_catches = {{"mhc.rebind_broadcast", {"address", "census"}}};
  mutated.findings = {finding_of("address", "observe"), finding_of("census", "census")};

  session::KillMatrixBuilder builder(plan);
  std::vector<ScenarioRecord> scenarios;
  EXPECT_TRUE(builder.add(1, mutated, scenarios).empty());  // waits for its clean run
  const std::vector<KillMatrixRow> rows = builder.add(0, clean, scenarios);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].verdict, "FAIL: the clean run fails");
  EXPECT_EQ(rows[1].cells.at("address"), "KILLED:observe");
  EXPECT_EQ(rows[1].cells.at("census"), "MISSED");  // no credit: the clean run fails it too
  EXPECT_EQ(rows[1].verdict, "FAIL: not caught by census");
  ASSERT_EQ(scenarios.size(), 2u);
  ASSERT_EQ(scenarios[1].verdicts.size(), 1u);
  EXPECT_EQ(scenarios[1].verdicts[0].missed, (std::vector<std::string>{"census"}));
  EXPECT_EQ(builder.matrix().problems.size(), 2u);
  // Every known mutation that this plan does not declare is a problem of a whole-suite run.
  const std::vector<std::string> undeclared = builder.require_all_declared();
  EXPECT_EQ(undeclared.size(), mutation::all().size() - 1);
}

TEST(Session, UnknownMutationsAndForeignOnesAreNamed) {
  Scenario s = tiny_scenario({"address"});
  std::string error;
  EXPECT_FALSE(session::plan_run({s}, {"no.such_mutation"}, error));
  EXPECT_NE(error.find("unknown mutation 'no.such_mutation': known mutations are"), std::string::npos) << error;
  const std::optional<session::Plan> plan = session::plan_run({s}, {"mhc.rebind_broadcast"}, error);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->runnable(), 1u);  // the dsv4 fixture owns it
  // A mutation of another fixture skips the scenario, naming the owner.
  for (const auto& m : mutation::all()) {
    if (mutation::applies_to(m, s.fixture)) continue;
    const std::optional<session::Plan> foreign = session::plan_run({s}, {m.name}, error);
    ASSERT_TRUE(foreign);
    EXPECT_EQ(foreign->runnable(), 0u);
    EXPECT_NE(foreign->items[0].skip.find("belongs to fixture '" + m.owner + "'"), std::string::npos);
    break;
  }
}

class CountingReporter : public Reporter {
 public:
  explicit CountingReporter(std::string path) : m_path(std::move(path)) {}
  void on_run_done(const RunRecord& run) override { write_file_atomically(m_path, std::to_string(run.scenarios.size())); }

 private:
  std::string m_path;
};

TEST(ReporterRegistry, BuiltinsComeFirstAndAPluginCanAddOne) {
  auto& registry = ReporterRegistry::get();
  const std::vector<std::string> names = registry.names();
  ASSERT_GE(names.size(), 5u);
  EXPECT_EQ(std::vector<std::string>(names.begin(), names.begin() + 5),
            (std::vector<std::string>{"json", "junit", "markdown", "html", "trace"}));
  EXPECT_EQ(registry.find("junit")->default_file("graphcheck"), "junit.xml");
  EXPECT_EQ(registry.find("junit")->default_file("mutants"), "mutants-junit.xml");
  EXPECT_EQ(registry.find("trace")->default_file("mutants"), "mutants-trace.json");
  auto factory = [](const std::string& path) { return std::make_unique<CountingReporter>(path); };
  EXPECT_TRUE(registry.add({"test-count", "scenario count", nullptr, factory}));
  ASSERT_NE(registry.find("test-count"), nullptr);
  EXPECT_EQ(registry.names().back(), "test-count");
}

// As models and probes: a name registered twice outside a plugin's load is a build error of the
// binary (a plugin's clash is refused and reported: e2e.plugin_name_clash), and so is a name
// that cannot be a flag.
TEST(ReporterRegistryDeathTest, ATakenOrMalformedNameAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto factory = [](const std::string& path) { return std::make_unique<CountingReporter>(path); };
  EXPECT_EXIT((void)ReporterRegistry::get().add({"json", "again", nullptr, factory}),
              ::testing::KilledBySignal(SIGABRT), "reporter 'json' is registered twice");
  EXPECT_EXIT((void)ReporterRegistry::get().add({"Bad Name", "", nullptr, factory}),
              ::testing::KilledBySignal(SIGABRT), "its name must be");
}

}  // namespace
}  // namespace graphcheck

// ---- a model that returns a preallocated output buffer --------------------------------------

namespace graphcheck {
namespace {

class PreallocatedOutputModel final : public LifecycleModel {
 public:
  explicit PreallocatedOutputModel(const ModelConfig&) {
    m_module.register_parameter("w", torch::zeros({2, 2}));
  }
  torch::nn::Module& module() override { return m_module; }
  std::set<std::string> load_weights(WeightStream& weights) override {
    return load_module_weights(*this, weights);
  }
  void process_weights_after_loading() override {}
  torch::Tensor forward(const torch::Tensor& x) override {
    if (!m_out.defined() || m_out.size(0) != x.size(0)) m_out = torch::empty({x.size(0), 2});
    m_out.copy_(torch::matmul(x, m_module.named_parameters()["w"]));
    return m_out;  // the same buffer every call, as serving code often does
  }
  torch::Tensor make_input(std::int64_t b, std::uint64_t seed) override {
    return torch::full({b, 2}, static_cast<double>(seed % 5) + 1.0);
  }
  std::vector<NamedTensor> extra_tensors() override { return {{"out", m_out}}; }

 private:
  torch::nn::Module m_module;
  torch::Tensor m_out;
};
GRAPHCHECK_REGISTER_MODEL("test_prealloc", [](const ModelConfig& c) {
  return std::make_unique<PreallocatedOutputModel>(c);
});

TEST(ContractShapes, APreallocatedOutputBufferIsNoCoverageOrReplayFinding) {
  Scenario s;
  s.name = "prealloc";
  s.file = "prealloc.yaml";
  s.fixture = "test_prealloc";
  s.batch_sizes = {2};
  s.cycles = {RefitSpec{2, {}, {}, ""}};
  s.checks = {"coverage", "replay_diff"};
  ScenarioRecord r = run_scenario(s, options_with({}));
  EXPECT_EQ(r.status, Status::passed) << (r.findings.empty() ? r.reason : r.findings[0].message);
}


// ---- the streamed tensors the harness records (copy-on-need) -----------------------------------

// A loader that abuses what it is streamed: "scribble" doubles the streamed tensor in place and
// loads half of it (the model holds the checkpoint's values, the streamed tensor does not);
// "raw" and "raw_one" write it through its pointer, where no version counter sees it (Note
// [Written pages of a map]); "keep_write" rebinds "w" onto each tensor streamed for it (a rebind
// at every refit: the stale-graph bug, so only the stream-order test loads it), halves it there,
// and PWAL checks that it still holds that (then doubles it back);
// "keep" makes the first tensor streamed for "w" that parameter (before any capture; later loads
// copy into it) and PWAL doubles it in place (forward halves it).
// Either would change the harness's record of the checkpoint if it were kept without a check,
// and model B (built from the records) would disagree with model A.
class StreamAbusingModel final : public LifecycleModel {
 public:
  explicit StreamAbusingModel(const ModelConfig& c) : m_mode(c.get_string("mode", "scribble")) {
    m_module.register_parameter("v", torch::zeros({4, 4}), false);
    m_module.register_parameter("w", torch::zeros({4, 4}), false);
    m_module.register_buffer("pad", torch::zeros({1}, torch::kUInt8));  // a byte: loaded as it comes
  }
  torch::nn::Module& module() override { return m_module; }
  std::set<std::string> load_weights(WeightStream& weights) override {
    std::set<std::string> loaded;
    while (auto item = weights.next()) {
      if (item->name == "pad") {
        m_module.named_buffers()["pad"].copy_(item->tensor);
        loaded.insert(item->name);
        continue;
      }
      torch::Tensor w = m_module.named_parameters()[item->name];
      if (m_mode == "keep_write" && item->name == "w") {
        w.set_data(item->tensor);
        w.mul_(0.5);
        m_written = w.clone();
      } else if (m_mode == "keep" && item->name == "w" && m_kept.empty()) {
        w.set_data(item->tensor);
        m_kept = item->name;
      } else if (m_mode == "keep" || m_mode == "keep_write") {
        w.copy_(item->tensor);
      } else if (m_mode == "raw" || m_mode == "raw_one") {
        // Through the pointer, as a kernel writes: no version counter moves. "raw" doubles every
        // element and loads half of it; "raw_one" adds 1 to the last element only and takes it off
        // again in the parameter.
        auto* p = item->tensor.data_ptr<float>();
        const std::int64_t n = item->tensor.numel();
        if (m_mode == "raw") {
          for (std::int64_t i = 0; i < n; ++i) p[i] *= 2;
          w.copy_(item->tensor / 2);
        } else {
          p[n - 1] += 1;
          w.copy_(item->tensor);
          w.view(-1)[n - 1].sub_(1);
        }
      } else {
        item->tensor.mul_(2);
        w.copy_(item->tensor / 2);
      }
      loaded.insert(item->name);
    }
    return loaded;
  }
  void process_weights_after_loading() override {
    if (!m_kept.empty()) m_module.named_parameters()[m_kept].mul_(2);
    if (m_written.defined() && !torch::equal(m_module.named_parameters()["w"], m_written)) {
      throw std::runtime_error("'w' no longer holds what load_weights() wrote into it");
    }
    if (m_written.defined()) m_module.named_parameters()["w"].mul_(2);
    m_written = torch::Tensor();
  }
  torch::Tensor forward(const torch::Tensor& x) override {
    auto params = m_module.named_parameters();
    const auto held = [&](const std::string& name) { return name == m_kept ? params[name] / 2 : params[name]; };
    return torch::matmul(x, held("v")) + torch::matmul(x, held("w"));
  }
  torch::Tensor make_input(std::int64_t b, std::uint64_t) override { return torch::ones({b, 4}); }

 private:
  std::string m_mode;
  std::string m_kept;  // "keep": "w", rebound onto the first tensor it was streamed for it
  torch::Tensor m_written;  // "keep_write": what load_weights() left in "w" (a view it was streamed, halved)
  torch::nn::Module m_module;
};
GRAPHCHECK_REGISTER_MODEL("test_stream_abuser", [](const ModelConfig& c) {
  return std::make_unique<StreamAbusingModel>(c);
});

// The checkpoint a scenario's load read, as a name -> tensor map.
std::map<std::string, torch::Tensor> checkpoint_file(const std::string& path) {
  std::map<std::string, torch::Tensor> out;
  SafetensorsWeightStream stream(path);
  while (auto item = stream.next()) out[item->name] = item->tensor;
  return out;
}

class StreamedRecorder final : public EmptyProbe {
 public:
  [[nodiscard]] std::string name() const override { return "streamed_recorder"; }
  void on_load_end(RunContext&, const LoadEvent& e) override {
    if (e.format == LoadFormat::checkpoint) loads.push_back(e);
  }
  std::vector<LoadEvent> loads;
};

TEST(StreamRecords, ALoaderThatWritesIntoOrKeepsWhatItIsStreamedLeavesTheRecordsIntact) {
  for (const std::string mode : {"scribble", "keep", "raw", "raw_one"}) {
    Scenario s;
    s.name = "abuser-" + mode;
    s.file = "abuser.yaml";
    s.fixture = "test_stream_abuser";
    s.config.set("mode", mode, "abuser.yaml:2:5");
    s.batch_sizes = {1};
    s.cycles = {RefitSpec{2, {}, {}, ""}, RefitSpec{3, {}, {}, ""}};
    s.checks = {"replay_diff"};
    StreamedRecorder recorder;
    ScenarioRecord r = run_scenario(s, options_with({&recorder}));
    EXPECT_EQ(r.status, Status::passed) << mode << ": " << (r.findings.empty() ? r.reason : r.findings[0].message);
    ASSERT_FALSE(recorder.loads.empty()) << mode;
    for (const LoadEvent& e : recorder.loads) {
      const std::string path = e.source.substr(e.source.find('\'') + 1, e.source.rfind('\'') - e.source.find('\'') - 1);
      const auto file = checkpoint_file(path);
      for (const NamedTensor& t : e.streamed) {
        ASSERT_TRUE(file.count(t.name)) << t.name;
        EXPECT_TRUE(torch::equal(t.tensor, file.at(t.name)))
            << mode << ": the record of '" << t.name << "' from " << e.source << " is not the checkpoint's";
      }
    }
  }
}

// The orders the stream-order pass loaded (its gc/stream_order/orders measurement); -1 without one.
double stream_orders(const ScenarioRecord& r) {
  for (const auto& m : r.measurements) {
    if (m.tag == "gc/stream_order/orders") return m.value;
  }
  return -1;
}

// A scenario of the stream abuser in one of its modes, checked by `check` alone.
Scenario abuser_scenario(const std::string& name, const std::string& mode, const std::string& check) {
  Scenario s;
  s.name = name;
  s.file = "abuser.yaml";
  s.fixture = "test_stream_abuser";
  s.config.set("mode", mode, "abuser.yaml:2:5");
  s.batch_sizes = {1};
  s.checks = {check};
  return s;
}

// The stream-order pass passes on the abuser in `mode` (no order finding) and compared some orders.
void expect_no_order_finding(const Scenario& s, const std::string& mode) {
  const ScenarioRecord r = run_scenario(s, options_with({}));
  EXPECT_EQ(r.status, Status::passed) << mode << ": " << (r.findings.empty() ? r.reason : r.findings[0].message);
  EXPECT_GT(stream_orders(r), 0) << mode;
}

// Note [Views streamed where nothing keeps them]: the stream-order pass streams the map's views
// themselves to a loader that keeps none, and clones to one that does; neither a loader that
// writes into what it is streamed (through torch or its pointer) nor one that keeps a view and
// writes it in PWAL makes the next model stream other bytes, which would read as an order the
// load depends on.
// The same for a user's checkpoint whose float tensors the file does not align (a byte first):
// the stream copies them, and the pass clones those copies as before, so a loader's writes into
// them reach no later model.
TEST(StreamOrderViews, TensorsTheFileDoesNotAlignAreClonedForEveryModel) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(GRAPHCHECK_TEST_BINARY_DIR) / "stream_order_unaligned";
  fs::create_directories(dir);
  const std::string path = (dir / "unaligned.safetensors").string();
  std::string header =
      R"({"pad":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"v":{"dtype":"F32","shape":[4,4],"data_offsets":[1,65]},)"
      R"("w":{"dtype":"F32","shape":[4,4],"data_offsets":[65,129]}})";
  header += std::string((8 - header.size() % 8) % 8, ' ');
  std::string image(8, '\0');
  for (int i = 0; i < 8; ++i) image[static_cast<std::size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  image += header;
  image += '\x03';
  for (int i = 0; i < 32; ++i) {
    const float value = 0.25F * static_cast<float>(i % 7) - 0.5F;
    image.append(reinterpret_cast<const char*>(&value), sizeof value);
  }
  {
    std::ofstream out(path, std::ios::binary);
    out.write(image.data(), static_cast<std::streamsize>(image.size()));
  }
  for (const std::string mode : {"scribble", "raw"}) {
    Scenario s = abuser_scenario("abuser-unaligned-" + mode, mode, "stream_order");
    s.checkpoint = path;
    expect_no_order_finding(s, mode);
  }
}

TEST(StreamOrderViews, ALoaderThatWritesIntoOrKeepsWhatItIsStreamedIsNoOrderFinding) {
  for (const std::string mode : {"scribble", "keep", "keep_write", "raw", "raw_one"}) {
    expect_no_order_finding(abuser_scenario("abuser-orders-" + mode, mode, "stream_order"), mode);
  }
}


// The stream-order pass's builds are spans of the trace, one per model it builds and loads (the
// canonical order and each other order; the canonical one again only where an order differs),
// each inside the pass's span, as model B's are.
TEST(StreamOrderSpans, EachModelThePassBuildsIsASpanInsideThePass) {
  const ScenarioRecord r = run_scenario(tiny_scenario({"stream_order"}), options_with({}));
  ASSERT_EQ(r.status, Status::passed) << r.reason;
  const double orders = stream_orders(r);
  ASSERT_GT(orders, 0);
  const Span* pass = nullptr;
  std::vector<const Span*> builds;
  for (const auto& span : r.spans) {
    if (span.pass == "stream_order" && span.phase.empty()) pass = &span;
    if (span.phase == "stream-order model") builds.push_back(&span);
  }
  ASSERT_NE(pass, nullptr);
  ASSERT_EQ(builds.size(), static_cast<std::size_t>(orders) + 1);  // no order differs on dsv4
  for (const Span* b : builds) {
    EXPECT_EQ(b->pass, "stream_order");
    EXPECT_EQ(b->cycle, 0);  // the initial load's orders
    EXPECT_GE(b->start, pass->start);
    EXPECT_LE(b->start + b->seconds, pass->start + pass->seconds + 1e-9);
    EXPECT_GT(b->seconds, 0);
  }
}

// Where an order's load differs, the pass builds the canonical model once more beside it, to say
// which elements differ: that build is a span of its own name, so that it is told from the
// builds every run makes (the bench's floor leaves it out).
TEST(StreamOrderSpans, TheCanonicalModelBuiltAgainBesideADifferingOrderIsNamedSo) {
  Scenario s;
  s.name = "order";
  s.file = "order.yaml";
  s.fixture = "order_scale";
  s.config.set("layers", std::int64_t{2});
  s.config.set("hidden", std::int64_t{16});
  s.batch_sizes = {1};
  s.checks = {"stream_order"};
  RunOptions o = options_with({});
  o.mutations = {"order_scale.combine_on_arrival"};
  const ScenarioRecord r = run_scenario(s, o);
  ASSERT_EQ(r.status, Status::failed) << r.reason;
  const double orders = stream_orders(r);
  ASSERT_GT(orders, 0);
  int builds = 0, again = 0;
  for (const auto& span : r.spans) {
    if (span.phase == "stream-order model") ++builds;
    if (span.phase == "stream-order model, canonical again") ++again;
  }
  EXPECT_EQ(builds, static_cast<int>(orders) + 1);
  EXPECT_EQ(again, 1);  // built once, kept for every later order that differs
}

// A model with a cache made with torch::empty that no load writes (a KV cache, a workspace).
class UninitialisedCacheModel final : public LifecycleModel {
 public:
  explicit UninitialisedCacheModel(const ModelConfig&) {
    for (const char* name : {"a", "b", "w"}) m_module.register_parameter(name, torch::zeros({4, 4}), false);
    m_cache = torch::empty({4096});
  }
  torch::nn::Module& module() override { return m_module; }
  std::set<std::string> load_weights(WeightStream& weights) override { return load_module_weights(*this, weights); }
  void process_weights_after_loading() override {}
  torch::Tensor forward(const torch::Tensor& x) override {
    return torch::matmul(x, m_module.named_parameters()["w"]);
  }
  torch::Tensor make_input(std::int64_t b, std::uint64_t seed) override {
    return torch::full({b, 4}, static_cast<double>(seed % 5) + 1.0);
  }
  std::vector<NamedTensor> extra_tensors() override { return {{"cache", m_cache}}; }
  [[nodiscard]] const torch::Tensor& cache() const { return m_cache; }

 private:
  torch::nn::Module m_module;
  torch::Tensor m_cache;
};
GRAPHCHECK_REGISTER_MODEL("test_uninitialised_cache", [](const ModelConfig& c) {
  return std::make_unique<UninitialisedCacheModel>(c);
});

// While it lives, every CPU block comes filled with a byte that changes from one block to the
// next: the leftovers a reused heap block holds, made certain (glibc's reuse depends on the heap).
// Installed at the counting allocator's priority (counting_allocator.cpp), which then wraps it.
class DirtyCpuMemory final : public c10::Allocator {
 public:
  DirtyCpuMemory() : m_inner(c10::GetCPUAllocator()) { c10::SetCPUAllocator(this, kPriority); }
  ~DirtyCpuMemory() override { c10::SetCPUAllocator(m_inner, kPriority); }
  DirtyCpuMemory(const DirtyCpuMemory&) = delete;
  DirtyCpuMemory& operator=(const DirtyCpuMemory&) = delete;
  c10::DataPtr allocate(std::size_t n) override {
    c10::DataPtr p = m_inner->allocate(n);
    if (n > 0) std::memset(p.get(), 0x40 + static_cast<int>(m_blocks++ % 64), n);
    return p;
  }
  [[nodiscard]] c10::DeleterFnPtr raw_deleter() const override { return m_inner->raw_deleter(); }
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }

 private:
  static constexpr std::uint8_t kPriority = 200;
  c10::Allocator* m_inner;
  std::uint64_t m_blocks = 0;
};

// Note [Fresh memory alike in every build]: a cache no load writes holds leftovers that differ
// from one build to the next; the stream-order pass takes none of that for an order the load
// depends on.
TEST(StreamOrderFreshMemory, ACacheMadeWithEmptyThatNoLoadWritesIsNoOrderFinding) {
  const DirtyCpuMemory dirty;
  {  // the premise: two builds' caches hold different bytes
    const auto one = ModelRegistry::get().find("test_uninitialised_cache")->factory(ModelConfig{});
    const auto two = ModelRegistry::get().find("test_uninitialised_cache")->factory(ModelConfig{});
    ASSERT_FALSE(torch::equal(dynamic_cast<const UninitialisedCacheModel&>(*one).cache(),
                              dynamic_cast<const UninitialisedCacheModel&>(*two).cache()));
  }
  Scenario s;
  s.name = "uninitialised-cache";
  s.file = "cache.yaml";
  s.fixture = "test_uninitialised_cache";
  s.batch_sizes = {1};
  s.checks = {"stream_order"};
  const ScenarioRecord r = run_scenario(s, options_with({}));
  EXPECT_GT(stream_orders(r), 0);
  EXPECT_EQ(r.status, Status::passed) << (r.findings.empty() ? r.reason : r.findings[0].message);
}

// ---- hooks on a partial refit (Note [Hooks on a partial refit]) --------------------------------

// Two layers, each with a weight and a table PWAL derives from it through the hook 'derive'
// (declared for every layer). "dirty": PWAL re-derives only the layers whose weight changed since
// the last PWAL. "first_only": PWAL derives at the first load and never again (the bug).
class DirtyFlagModel final : public LifecycleModel {
 public:
  explicit DirtyFlagModel(const ModelConfig& c)
      : m_mode(c.get_string("mode", "dirty")), m_renamed(c.get_string("names", "live") == "renamed") {
    for (const char* name : {"a", "b"}) {
      auto layer = m_module.register_module(name, std::make_shared<torch::nn::Module>());
      layer->register_parameter("w", torch::zeros({4, 4}), false);
      layer->register_buffer("table", torch::zeros({4, 4}));
      m_layers.push_back(layer);
    }
  }
  torch::nn::Module& module() override { return m_module; }
  std::set<std::string> load_weights(WeightStream& weights) override { return load_module_weights(*this, weights); }
  void process_weights_after_loading() override {
    torch::NoGradGuard no_grad;
    GRAPHCHECK_HOOK(this, "settle");
    for (std::size_t i = 0; i < m_layers.size(); ++i) {
      torch::Tensor w = m_layers[i]->named_parameters()["w"];
      const std::int64_t version = static_cast<std::int64_t>(w._version());
      if (m_versions.size() <= i) m_versions.push_back(-1);
      const bool derive = m_mode == "first_only" ? m_versions[i] < 0 : m_versions[i] != version;
      m_versions[i] = version;
      if (!derive) continue;
      GRAPHCHECK_HOOK(m_layers[i].get(), "derive");
      m_layers[i]->named_buffers()["table"].copy_(w * 2);
    }
  }
  torch::Tensor forward(const torch::Tensor& x) override {
    torch::Tensor y = x;
    for (auto& layer : m_layers) y = torch::matmul(y, layer->named_buffers()["table"]);
    return y;
  }
  torch::Tensor make_input(std::int64_t b, std::uint64_t seed) override {
    return torch::full({b, 4}, static_cast<double>(seed % 5) + 1.0);
  }
  // names "renamed": the checkpoint calls layer x's weight 'src_x.w' (a mapping to the live 'x.w').
  std::vector<CheckpointShard> checkpoint_mapping() override {
    if (!m_renamed) return {};
    return {{"src_a.w", "a.w", 0, 0, CheckpointShard::kWhole}, {"src_b.w", "b.w", 0, 0, CheckpointShard::kWhole}};
  }
  // "**": every module, which is not the model itself; "settle" is announced on the LifecycleModel
  // and declared on the root module: both are the model.
  [[nodiscard]] std::vector<ExpectedHook> expected_hooks() const override {
    return {ExpectedHook("*", "derive"), ExpectedHook("**", "derive"), ExpectedHook("(root)", "settle")};
  }

 private:
  std::string m_mode;
  bool m_renamed;
  torch::nn::Module m_module;
  std::vector<std::shared_ptr<torch::nn::Module>> m_layers;
  std::vector<std::int64_t> m_versions;
};
GRAPHCHECK_REGISTER_MODEL("test_dirty_flag", [](const ModelConfig& c) { return std::make_unique<DirtyFlagModel>(c); });

std::vector<std::string> hook_subjects(const ScenarioRecord& r) {
  std::vector<std::string> out;
  for (const Finding& f : r.findings) {
    if (f.probe == "hooks") out.push_back(f.subject + " @ cycle " + std::to_string(f.cycle));
  }
  return out;
}

// A refit of layer b only: a PWAL that re-derives only what changed skips layer a, which is no
// finding; one that never re-derives is still caught on layer b, the layer the refit streamed.
// Wildcards match the model's modules, not the model, and a hook announced on the LifecycleModel
// ran for "(root)".
TEST(HooksOnAPartialRefit, AModuleTheRefitDidNotStreamNeedNotRunItsHooks) {
  Scenario s;
  s.name = "dirty-flag";
  s.file = "dirty.yaml";
  s.fixture = "test_dirty_flag";
  s.batch_sizes = {1};
  s.cycles = {RefitSpec{2, {"b."}, {}, ""}, RefitSpec{3, {}, {}, ""}};
  s.checks = {"hooks"};
  const ScenarioRecord clean = run_scenario(s, options_with({}));
  EXPECT_EQ(clean.status, Status::passed) << (clean.findings.empty() ? clean.reason : clean.findings[0].message);

  s.config.set("mode", std::string("first_only"), "dirty.yaml:3:9");
  const ScenarioRecord buggy = run_scenario(s, options_with({}));
  // Once per pattern that names the module ("*" and "**").
  const std::vector<std::string> expected = {"derive on b @ cycle 1", "derive on b @ cycle 1", "derive on a @ cycle 2",
                                             "derive on b @ cycle 2", "derive on a @ cycle 2", "derive on b @ cycle 2"};
  EXPECT_EQ(hook_subjects(buggy), expected);

  // The same under checkpoint names the mapping renames: what the refit touches is read as live
  // tensors ('src_b.w' streams to 'b.w'), not as the checkpoint's prefixes.
  s.config.set("names", std::string("renamed"), "dirty.yaml:4:9");
  s.cycles = {RefitSpec{2, {"src_b."}, {}, ""}, RefitSpec{3, {}, {}, ""}};
  EXPECT_EQ(hook_subjects(run_scenario(s, options_with({}))), expected);
  s.config.set("mode", std::string("dirty"), "dirty.yaml:3:9");
  const ScenarioRecord renamed_clean = run_scenario(s, options_with({}));
  EXPECT_EQ(renamed_clean.status, Status::passed) << hook_subjects(renamed_clean).size();
}

// ---- what holds a memory finding's bytes (Note [What holds the bytes]) ---------------------------

// Keeps a copy of its weight from every PWAL, in a list the model exposes (extra_tensors()).
class HistoryModel final : public LifecycleModel {
 public:
  explicit HistoryModel(const ModelConfig&) { m_module.register_parameter("w", torch::zeros({16, 16}), false); }
  torch::nn::Module& module() override { return m_module; }
  std::set<std::string> load_weights(WeightStream& weights) override { return load_module_weights(*this, weights); }
  void process_weights_after_loading() override { m_history.push_back(m_module.named_parameters()["w"].clone()); }
  torch::Tensor forward(const torch::Tensor& x) override { return torch::matmul(x, m_module.named_parameters()["w"]); }
  torch::Tensor make_input(std::int64_t b, std::uint64_t seed) override {
    return torch::full({b, 16}, static_cast<double>(seed % 5) + 1.0);
  }
  std::vector<NamedTensor> extra_tensors() override {
    std::vector<NamedTensor> out;
    for (std::size_t i = 0; i < m_history.size(); ++i) out.push_back({"history." + std::to_string(i), m_history[i]});
    return out;
  }

 private:
  torch::nn::Module m_module;
  std::vector<torch::Tensor> m_history;
};
GRAPHCHECK_REGISTER_MODEL("test_history", [](const ModelConfig& c) { return std::make_unique<HistoryModel>(c); });

TEST(MemoryHolders, GrowthOverARefitNamesTheTensorThatHoldsIt) {
  Scenario s;
  s.name = "history";
  s.file = "history.yaml";
  s.fixture = "test_history";
  s.batch_sizes = {1};
  s.cycles = {RefitSpec{2, {}, {}, ""}, RefitSpec{3, {}, {}, ""}};
  s.checks = {"memory"};
  const ScenarioRecord r = run_scenario(s, options_with({}));
  const Finding* growth = nullptr;
  for (const Finding& f : r.findings) {
    if (f.subject == "live bytes across refit cycles" && f.cycle == 1) growth = &f;
  }
  ASSERT_NE(growth, nullptr) << (r.findings.empty() ? r.reason : r.findings[0].message);
  EXPECT_NE(growth->message.find("allocated in it and still alive: history.1 (1024 bytes)"), std::string::npos)
      << growth->message;
  const auto held = std::find_if(growth->evidence.begin(), growth->evidence.end(),
                                 [](const auto& kv) { return kv.first == "held_by"; });
  ASSERT_NE(held, growth->evidence.end());
  EXPECT_EQ(held->second, "history.1");
}

// ---- a loader that derives per load_weights() call (Note [Stream order]) ------------------------

// Derives `fused` from the head and the scale when a call brings the head, reading whatever scale
// is live then; in one call the scale has arrived by the call's end, in a sync's buckets it may
// come in a later call.
class PerCallModel final : public LifecycleModel {
 public:
  explicit PerCallModel(const ModelConfig&) {
    m_module.register_parameter("scale", torch::zeros({4}), false);
    m_module.register_parameter("head", torch::zeros({4, 4}), false);
    m_fused = torch::zeros({4, 4});
  }
  torch::nn::Module& module() override { return m_module; }
  std::set<std::string> load_weights(WeightStream& weights) override {
    std::set<std::string> loaded = load_module_weights(*this, weights);
    if (loaded.count("head")) m_fused.copy_(m_module.named_parameters()["head"] * m_module.named_parameters()["scale"]);
    return loaded;
  }
  void process_weights_after_loading() override {}
  torch::Tensor forward(const torch::Tensor& x) override { return torch::matmul(x, m_fused); }
  torch::Tensor make_input(std::int64_t b, std::uint64_t seed) override {
    return torch::full({b, 4}, static_cast<double>(seed % 5) + 1.0);
  }
  std::vector<NamedTensor> extra_tensors() override { return {{"fused", m_fused}}; }

 private:
  torch::nn::Module m_module;
  torch::Tensor m_fused;
};
GRAPHCHECK_REGISTER_MODEL("test_per_call", [](const ModelConfig& c) { return std::make_unique<PerCallModel>(c); });

// In a scenario that refits (RL weight sync sends buckets as calls of their own) the finding says
// the calls, not the order, are the cause; one that never refits loads in one call, as vLLM's
// contract has it, and is not cut.
TEST(StreamOrderCalls, ATensorDerivedPerLoadWeightsCallIsAFindingOfTheCallsWhereTheScenarioRefits) {
  Scenario s;
  s.name = "per-call";
  s.file = "per_call.yaml";
  s.fixture = "test_per_call";
  s.batch_sizes = {1};
  s.checks = {"stream_order"};
  const ScenarioRecord once = run_scenario(s, options_with({}));
  EXPECT_EQ(once.status, Status::passed) << (once.findings.empty() ? once.reason : once.findings[0].message);

  s.cycles = {RefitSpec{2, {}, {}, ""}};
  const ScenarioRecord r = run_scenario(s, options_with({}));
  ASSERT_EQ(r.status, Status::failed) << r.reason;
  ASSERT_EQ(r.findings.size(), 1u);
  EXPECT_EQ(r.findings[0].subject, "fused");
  const std::string& m = r.findings[0].message;
  EXPECT_NE(m.find("the load depends on how its stream is cut into load_weights() calls"), std::string::npos) << m;
  EXPECT_NE(m.find("streamed reversed, one load_weights() call per tensor leaves 1 live tensor"), std::string::npos)
      << m;
  EXPECT_NE(m.find("every order in one call agrees"), std::string::npos) << m;
  const std::vector<Cause> causes = session::triage(r, "");
  ASSERT_EQ(causes.size(), 1u);
  EXPECT_NE(causes.front().summary.find("depends on how the load's stream is cut into load_weights() calls"),
            std::string::npos)
      << causes.front().summary;
}

// ---- a loader written for other names than the generated checkpoint's (Note [Generated names]) --

// Expects the checkpoint to hold 'w' as two halves, 'w.top' and 'w.bottom' (the mapping inside
// its loader, none declared), and fails in its own code on any other name.
class OwnNamesModel final : public LifecycleModel {
 public:
  explicit OwnNamesModel(const ModelConfig&) { m_module.register_parameter("w", torch::zeros({4, 4}), false); }
  torch::nn::Module& module() override { return m_module; }
  std::set<std::string> load_weights(WeightStream& weights) override {
    while (auto item = weights.next()) {
      if (item->name != "w.top" && item->name != "w.bottom") throw std::out_of_range("no shard for " + item->name);
    }
    return {};
  }
  void process_weights_after_loading() override {}
  torch::Tensor forward(const torch::Tensor& x) override { return torch::matmul(x, m_module.named_parameters()["w"]); }
  torch::Tensor make_input(std::int64_t b, std::uint64_t) override { return torch::ones({b, 4}); }

 private:
  torch::nn::Module m_module;
};
GRAPHCHECK_REGISTER_MODEL("test_own_names", [](const ModelConfig& c) { return std::make_unique<OwnNamesModel>(c); });

TEST(GeneratedNames, ALoaderThatFailsOnTheGeneratedNamesIsToldWhatTheCheckpointHolds) {
  Scenario s;
  s.name = "own-names";
  s.file = "own_names.yaml";
  s.fixture = "test_own_names";
  s.batch_sizes = {1};
  s.checks = {"census"};
  const ScenarioRecord r = run_scenario(s, options_with({}));
  ASSERT_EQ(r.status, Status::failed) << r.reason;
  ASSERT_FALSE(r.findings.empty());
  const std::string& message = r.findings.front().message;
  EXPECT_NE(message.find("no shard for w"), std::string::npos) << message;
  EXPECT_NE(message.find("generated by graphcheck under the live model's own names ('w')"), std::string::npos)
      << message;
}

// Note [Synthesis before the model]: one fresh model synthesizes every seed where the default
// synthesis runs; a model's own synthesize_checkpoint() is still called on a freshly constructed
// model every time (model.h), each seed on an instance of its own.
class OwnSynthesisModel final : public LifecycleModel {
 public:
  static inline int syntheses = 0, on_a_used_instance = 0;
  explicit OwnSynthesisModel(const ModelConfig&) { m_module.register_parameter("w", torch::zeros({4, 4}), false); }
  torch::nn::Module& module() override { return m_module; }
  std::set<std::string> load_weights(WeightStream& weights) override { return load_module_weights(*this, weights); }
  void process_weights_after_loading() override {}
  torch::Tensor forward(const torch::Tensor& x) override { return torch::matmul(x, m_module.named_parameters()["w"]); }
  torch::Tensor make_input(std::int64_t b, std::uint64_t) override { return torch::ones({b, 4}); }
  std::vector<NamedTensor> synthesize_checkpoint(std::uint64_t seed) override {
    ++syntheses;
    if (m_synthesized) ++on_a_used_instance;
    m_synthesized = true;
    return {{"w", torch::full({4, 4}, static_cast<float>(seed))}};
  }

 private:
  torch::nn::Module m_module;
  bool m_synthesized = false;
};
GRAPHCHECK_REGISTER_MODEL("test_own_synthesis", [](const ModelConfig& c) { return std::make_unique<OwnSynthesisModel>(c); });

TEST(Presynthesis, AModelsOwnSynthesisRunsOnAFreshModelForEverySeed) {
  Scenario s;
  s.name = "own-synthesis";
  s.file = "own_synthesis.yaml";
  s.fixture = "test_own_synthesis";
  s.batch_sizes = {1};
  s.checks = {"census"};
  for (std::uint64_t seed : {2, 3}) {
    RefitSpec r;
    r.seed = seed;
    s.cycles.push_back(r);
  }
  OwnSynthesisModel::syntheses = OwnSynthesisModel::on_a_used_instance = 0;
  const ScenarioRecord r = run_scenario(s, options_with({}));
  ASSERT_EQ(r.status, Status::passed) << r.reason;
  EXPECT_EQ(OwnSynthesisModel::syntheses, 3);
  EXPECT_EQ(OwnSynthesisModel::on_a_used_instance, 0);
}

// Note [Fresh memory alike in every build]: the deterministic mode the stream-order pass builds
// in says nothing of itself (its alerts would read as if the user had asked for it); the model's
// own warnings still reach the handler.
class AlertingModel final : public LifecycleModel {
 public:
  explicit AlertingModel(const ModelConfig&) {
    for (const char* name : {"a", "b", "c"}) m_module.register_parameter(name, torch::zeros({2, 2}), false);
  }
  torch::nn::Module& module() override { return m_module; }
  std::set<std::string> load_weights(WeightStream& weights) override { return load_module_weights(*this, weights); }
  void process_weights_after_loading() override {
    at::globalContext().alertNotDeterministic("test_alerting_op");  // a warning in the pass's mode only
    TORCH_WARN("the model's own warning");
  }
  torch::Tensor forward(const torch::Tensor& x) override { return torch::matmul(x, m_module.named_parameters()["a"]); }
  torch::Tensor make_input(std::int64_t b, std::uint64_t) override { return torch::ones({b, 2}); }

 private:
  torch::nn::Module m_module;
};
GRAPHCHECK_REGISTER_MODEL("test_alerting", [](const ModelConfig& c) { return std::make_unique<AlertingModel>(c); });

class RecordingWarnings final : public c10::WarningHandler {
 public:
  void process(const c10::Warning& warning) override { messages.push_back(warning.msg()); }
  std::vector<std::string> messages;
};

TEST(StreamOrderFreshMemory, TheDeterministicModeOfTheBuildsSaysNothingOfItself) {
  Scenario s;
  s.name = "alerting";
  s.file = "alerting.yaml";
  s.fixture = "test_alerting";
  s.batch_sizes = {1};
  s.checks = {"stream_order"};
  RecordingWarnings warnings;
  {
    const c10::WarningUtils::WarningHandlerGuard guard(&warnings);
    const ScenarioRecord r = run_scenario(s, options_with({}));
    EXPECT_EQ(r.status, Status::passed) << (r.findings.empty() ? r.reason : r.findings[0].message);
  }
  const auto count = [&](const std::string& text) {
    return std::count_if(warnings.messages.begin(), warnings.messages.end(),
                         [&](const std::string& m) { return m.find(text) != std::string::npos; });
  };
  EXPECT_GT(count("the model's own warning"), 0);
  EXPECT_EQ(count("deterministic"), 0);
}

// Note [Replaced checkpoints go in the background]: the old file keeps its name until the new one
// is renamed over it, with a hidden second name that goes once the Aside ends; nothing is left
// when the reaper is.
TEST(FileReaper, KeepsTheOldFileUnderAHiddenNameUntilItIsReplacedThenRemovesIt) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(GRAPHCHECK_TEST_BINARY_DIR) / "file_reaper_work";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path path = dir / "seed-1.safetensors";
  std::ofstream(path) << "the last run's checkpoint";
  const auto read = [](const fs::path& p) {
    std::ifstream in(p);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  {
    support::FileReaper reaper;
    {
      const support::FileReaper::Aside aside = reaper.set_aside(path);
      ASSERT_FALSE(aside.hidden().empty());
      EXPECT_EQ(read(path), "the last run's checkpoint") << "the path holds the old file until the rename";
      EXPECT_EQ(read(aside.hidden()), "the last run's checkpoint");
      std::ofstream(dir / "new.tmp") << "this run's";
      fs::rename(dir / "new.tmp", path);
    }
    EXPECT_TRUE(reaper.set_aside(dir / "absent").hidden().empty()) << "nothing there";
    EXPECT_TRUE(reaper.set_aside(dir).hidden().empty()) << "a directory is no file to replace";
  }
  EXPECT_EQ(read(path), "this run's");
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir)) left.push_back(e.path().filename().string());
  EXPECT_EQ(left, std::vector<std::string>{"seed-1.safetensors"});
}

// A second run into one work dir replaces the first run's generated checkpoints with the same
// bytes, and leaves nothing else there.
TEST(GeneratedCheckpoints, ASecondRunReplacesTheFirstsAndLeavesNothingElse) {
  namespace fs = std::filesystem;
  Scenario s = tiny_scenario();
  s.name = "twice";
  RunOptions o = options_with({});
  o.work_dir = std::string(GRAPHCHECK_TEST_BINARY_DIR) + "/generated_twice_work";
  fs::remove_all(o.work_dir);
  const auto files = [&] {
    std::map<std::string, std::string> out;
    for (const auto& e : fs::directory_iterator(fs::path(o.work_dir) / "twice")) {
      std::ifstream in(e.path(), std::ios::binary);
      out[e.path().filename().string()] = std::string(std::istreambuf_iterator<char>(in), {});
    }
    return out;
  };
  ASSERT_EQ(run_scenario(s, o).status, Status::passed);
  const auto first = files();
  ASSERT_EQ(first.size(), 2u);  // seeds 1 and 2
  ASSERT_EQ(run_scenario(s, o).status, Status::passed);
  const auto second = files();
  EXPECT_EQ(second, first);
}

}  // namespace
}  // namespace graphcheck
