// Merging records: the ranks of a distributed scenario (session::merge_ranks, with the cross-rank
// checks) and the shards of a sharded run (session::merge_shards, `graphcheck merge`).

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "graphcheck/engine/reporter.h"
#include "graphcheck/engine/session.h"

namespace gc = graphcheck;

namespace {

gc::Scenario scenario() {
  gc::Scenario s;
  s.name = "dist";
  s.file = "scenarios/python/dist.yaml";
  s.fixture = "python:tp.py:make";
  return s;
}

gc::Measurement fact(std::string tag, double value, int cycle) {
  gc::Measurement m;
  m.tag = std::move(tag);
  m.value = value;
  m.cycle = cycle;
  m.pass = "observe";
  return m;
}

gc::ScenarioRecord rank_record(double scale_fp, int hook_calls_cycle1) {
  gc::ScenarioRecord r;
  r.name = "dist";
  r.file = "scenarios/python/dist.yaml";
  r.status = gc::Status::passed;
  r.measurements = {fact("gc/dist/cycle_done", 1, 0), fact("gc/dist/cycle_done", 1, 1),
                    fact("gc/dist/replicated/layers.0.mlp.act_scale", 100, 0),
                    fact("gc/dist/replicated/layers.0.mlp.act_scale", scale_fp, 1),
                    fact("gc/dist/hooks/finalize_scales@layers.0", 1, 0)};
  for (int i = 0; i < hook_calls_cycle1; ++i) r.measurements.push_back(fact("gc/dist/hooks/finalize_scales@layers.0", 1, 1));
  return r;
}

gc::session::RankRun rank(int r, int tp, gc::ScenarioRecord record) {
  gc::session::RankRun run;
  run.rank = r;
  run.tp_rank = tp;
  run.trainer = r == 0;
  run.record = std::move(record);
  return run;
}

TEST(MergeRanks, RanksThatAgreePassAndEveryFindingNamesItsRank) {
  gc::ScenarioRecord one = rank_record(200, 1);
  gc::Finding f;
  f.probe = "address";
  f.pass = "observe";
  f.subject = "layers.0.w";
  f.message = "tensor 'layers.0.w' moved";
  one.findings.push_back(f);
  one.status = gc::Status::failed;
  const gc::ScenarioRecord merged =
      gc::session::merge_ranks(scenario(), {rank(0, 0, rank_record(200, 1)), rank(1, 1, one)});
  EXPECT_EQ(merged.status, gc::Status::failed);
  ASSERT_EQ(merged.findings.size(), 1u);
  EXPECT_EQ(merged.findings[0].message, "rank 1: tensor 'layers.0.w' moved");
  EXPECT_EQ(merged.findings[0].evidence.front(), (std::pair<std::string, std::string>{"rank", "1"}));
  const gc::ScenarioRecord clean = gc::session::merge_ranks(scenario(), {rank(0, 0, rank_record(200, 1)), rank(1, 1, rank_record(200, 1))});
  EXPECT_EQ(clean.status, gc::Status::passed) << clean.reason;
  EXPECT_TRUE(clean.findings.empty());
}

TEST(MergeRanks, AReplicatedTensorThatDiffersAndAHookOneRankSkippedAreCrossRankFindings) {
  const gc::ScenarioRecord merged =
      gc::session::merge_ranks(scenario(), {rank(0, 0, rank_record(200, 1)), rank(1, 1, rank_record(300, 0))});
  ASSERT_EQ(merged.findings.size(), 2u);
  const gc::Finding& scale = merged.findings[0];
  EXPECT_EQ(scale.probe, "ranks");
  EXPECT_EQ(scale.subject, "layers.0.mlp.act_scale");
  EXPECT_EQ(scale.cycle, 1);
  EXPECT_NE(scale.message.find("declared replicated"), std::string::npos) << scale.message;
  EXPECT_NE(scale.message.find("after refit cycle 1"), std::string::npos) << scale.message;
  const gc::Finding& hooks = merged.findings[1];
  EXPECT_EQ(hooks.subject, "finalize_scales");
  EXPECT_NE(hooks.message.find("the ranks ran different hooks in refit cycle 1: rank 1 ran fewer: "
                               "finalize_scales@layers.0 (rank 0 1, rank 1 0)"),
            std::string::npos)
      << hooks.message;
  EXPECT_EQ(merged.status, gc::Status::failed);
}

TEST(MergeRanks, AKilledRankMakesTheRecordCrashedNamingItAndTheOthersFindingsStay) {
  gc::ScenarioRecord survivor = rank_record(200, 1);  // the killed rank left no record to compare
  gc::Finding f;
  f.probe = "driver";
  f.subject = "weight transfer";
  f.message = "this rank stopped: peer gone";
  survivor.findings.push_back(f);
  gc::session::RankRun killed;
  killed.rank = 1;
  killed.tp_rank = 1;
  killed.crash = gc::CrashInfo{};
  killed.crash->cause = "signal";
  killed.crash->signal = "SIGKILL (Killed)";
  const gc::ScenarioRecord merged = gc::session::merge_ranks(scenario(), {rank(0, 0, survivor), killed});
  EXPECT_EQ(merged.status, gc::Status::crashed);
  ASSERT_TRUE(merged.crash);
  EXPECT_NE(merged.reason.find("rank 1 (tensor-parallel rank 1) died of SIGKILL (Killed)"), std::string::npos) << merged.reason;
  ASSERT_EQ(merged.findings.size(), 1u);
  EXPECT_EQ(merged.findings[0].message, "rank 0: this rank stopped: peer gone");
}

TEST(MergeRanks, ARankThatStoppedEarlyIsNotBlamedForHooksItNeverReachedAndAFailureOutsideTheLifecycleIsNamed) {
  gc::ScenarioRecord stopped = rank_record(200, 0);
  std::erase_if(stopped.measurements, [](const gc::Measurement& m) { return m.tag == "gc/dist/cycle_done" && m.cycle == 1; });
  std::erase_if(stopped.measurements, [](const gc::Measurement& m) { return m.cycle == 1; });
  gc::session::RankRun trainer;
  trainer.rank = 2;
  trainer.tp_rank = -1;
  trainer.trainer = true;
  trainer.error = "RuntimeError: Connection closed by peer";
  const gc::ScenarioRecord merged = gc::session::merge_ranks(
      scenario(), {rank(0, 0, rank_record(200, 1)), rank(1, 1, stopped), trainer}, {"py.tp.local_scale"});
  ASSERT_EQ(merged.findings.size(), 1u);  // no hook finding for cycle 1, which rank 1 never reached
  EXPECT_EQ(merged.findings[0].probe, "driver");
  EXPECT_EQ(merged.findings[0].message, "rank 2: the trainer failed outside its lifecycle: RuntimeError: Connection closed by peer");
  EXPECT_EQ(merged.mutations, (std::vector<std::string>{"py.tp.local_scale"}));
  ASSERT_EQ(merged.verdicts.size(), 1u);
}

TEST(MergeRanks, ARankStoppedAfterAnotherDiedIsSaidSo) {
  gc::session::RankRun dead, stopped;
  dead.rank = 1;
  dead.tp_rank = 1;
  dead.crash = gc::CrashInfo{};
  dead.crash->cause = "signal";
  dead.crash->signal = "SIGSEGV (Segmentation fault)";
  stopped.rank = 0;
  stopped.tp_rank = 0;
  stopped.crash = gc::CrashInfo{};
  stopped.crash->cause = "interrupted";
  const gc::ScenarioRecord merged = gc::session::merge_ranks(scenario(), {dead, stopped}, {});
  EXPECT_EQ(merged.status, gc::Status::crashed);
  EXPECT_NE(merged.reason.find("rank 0 (tensor-parallel rank 0) was stopped after another rank died"), std::string::npos)
      << merged.reason;
  EXPECT_NE(merged.reason.find("rank 1 (tensor-parallel rank 1) died of SIGSEGV"), std::string::npos) << merged.reason;
}

gc::RunRecord shard(int index, int total, std::vector<std::string> names, bool complete = true) {
  gc::RunRecord run;
  run.tool_version = "0.1.0";
  run.started_at = "2026-12-03T00:00:0" + std::to_string(index) + "Z";
  run.shard_index = index;
  run.total_shards = total;
  run.complete = complete;
  for (const auto& n : names) {
    gc::ScenarioRecord r;
    r.name = n;
    r.status = n == "b" ? gc::Status::failed : gc::Status::passed;
    run.scenarios.push_back(r);
  }
  return run;
}

TEST(MergeShards, ShardsOfOneRunMergeInNameOrderAndRoundTripThroughJson) {
  std::vector<std::pair<std::string, gc::RunRecord>> shards;
  for (const auto& [path, run] : std::vector<std::pair<std::string, gc::RunRecord>>{
           {"s1.json", shard(1, 3, {"b", "e"})}, {"s0.json", shard(0, 3, {"a", "d"})}, {"s2.json", shard(2, 3, {"c"})}}) {
    shards.emplace_back(path, gc::run_record_from_json(gc::json_report(run)));
  }
  const gc::session::MergedRun merged = gc::session::merge_shards(std::move(shards));
  EXPECT_TRUE(merged.problems.empty());
  EXPECT_TRUE(merged.run.complete);
  std::vector<std::string> names;
  for (const auto& r : merged.run.scenarios) names.push_back(r.name);
  EXPECT_EQ(names, (std::vector<std::string>{"a", "b", "c", "d", "e"}));
  EXPECT_EQ(merged.run.exit_code(), 1);
  EXPECT_EQ(merged.run.started_at, "2026-12-03T00:00:00Z");
}

TEST(MergeShards, AMissingDoubledOrIncompleteShardIsStated) {
  std::vector<std::pair<std::string, gc::RunRecord>> shards = {
      {"s0.json", shard(0, 3, {"a"})}, {"s0-again.json", shard(0, 3, {"a"})}, {"s2.json", shard(2, 3, {"c"}, false)}};
  const gc::session::MergedRun merged = gc::session::merge_shards(std::move(shards));
  EXPECT_FALSE(merged.run.complete);
  ASSERT_EQ(merged.problems.size(), 3u);
  EXPECT_NE(merged.problems[0].find("shard 0 of 3 is given twice (s0.json and s0-again.json)"), std::string::npos);
  EXPECT_NE(merged.problems[1].find("shard 2 of 3 (s2.json) is incomplete"), std::string::npos);
  EXPECT_NE(merged.problems[2].find("shard 1 of 3 missing"), std::string::npos);
  EXPECT_EQ(merged.run.scenarios.size(), 2u);  // the doubled shard counted once
  EXPECT_THROW((void)gc::run_record_from_json("{\"tool\": \"other\"}"), std::runtime_error);
}

}  // namespace
