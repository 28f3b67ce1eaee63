// The triage (session::triage, Note [Triage]): findings grouped into causes, each with its
// primary finding, on records shaped like the probes' own.

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "graphcheck/engine/session.h"

namespace gc = graphcheck;

namespace {

gc::Finding finding(std::string probe, std::string pass, int cycle, std::string subject,
                    std::vector<std::pair<std::string, std::string>> evidence, std::int64_t batch = 0) {
  gc::Finding f;
  f.probe = std::move(probe);
  f.pass = std::move(pass);
  f.phase = "refit";
  f.cycle = cycle;
  f.batch_size = batch;
  f.subject = std::move(subject);
  f.message = f.subject + ": what went wrong";
  f.evidence = std::move(evidence);
  return f;
}

// A PWAL that rebinds a derived buffer of every layer on every refit (dsv4's mhc.rebind_broadcast):
// address and coverage per layer, stale replays and NaN outputs per batch size, memory growth, and
// the idempotence pass's second PWAL moving it.
gc::ScenarioRecord rebind_record() {
  gc::ScenarioRecord r;
  r.file = "scenarios/dsv4_mhc_refit.yaml";
  r.mutations = {"mhc.rebind_broadcast"};
  r.findings.push_back(finding("memory", "observe", 1, "live bytes across refit cycles", {{"growth_bytes", "512"}}));
  for (int cycle = 1; cycle <= 3; ++cycle) {
    for (int layer = 0; layer < 2; ++layer) {
      const std::string t = "layers." + std::to_string(layer) + ".hc_attn_fn_broadcast";
      r.findings.push_back(finding("address", "observe", cycle, t, {{"tensor", t}, {"old_address", "0x1"}}));
      r.findings.push_back(finding("coverage", "coverage", cycle, t, {{"tensor", t}}, 1));
      r.findings.push_back(finding("hooks", "idempotence", cycle, t, {{"tensor", t}, {"new_address", "0x2"}}));
    }
    for (int batch : {1, 4}) {
      r.findings.push_back(finding("replay_diff", "observe", cycle, "replay vs eager(A)", {{"max_abs", "1"}}, batch));
      r.findings.push_back(finding("poison", "poison", cycle, "replay output", {{"nan_elements", "4"}}, batch));
    }
  }
  return r;
}

TEST(Triage, OneRebindIsOneCauseLedByTheAddressFindingWithEveryProbeAgreeing) {
  const gc::ScenarioRecord r = rebind_record();
  const auto causes = gc::session::triage(r, "graphcheck run scenarios/dsv4_mhc_refit.yaml --mutation mhc.rebind_broadcast");
  ASSERT_EQ(causes.size(), 1u);
  const gc::Cause& c = causes.front();
  EXPECT_EQ(c.findings.size(), r.findings.size());  // nothing is lost
  EXPECT_EQ(r.findings[c.findings.front()].probe, "address");
  EXPECT_EQ(c.subject, "layers.{0,1}.hc_attn_fn_broadcast");
  EXPECT_EQ(c.summary,
            "`layers.{0,1}.hc_attn_fn_broadcast` is replaced by PWAL instead of updated in place (cycles 1, 2, 3) — "
            "address, hooks, coverage, replay_diff, poison, memory agree");
  EXPECT_EQ(c.first_cycle, 1);
  EXPECT_EQ(c.repro, "graphcheck run scenarios/dsv4_mhc_refit.yaml --mutation mhc.rebind_broadcast");
}

// Two shards written to the same rows of a fused tensor, a third shard's rows left unwritten: the
// census finds the unwritten rows, and the stream-order pass sees the tensor depend on which
// shard arrives last. The unwritten shard is the cause the engineer fixes, named as the checkpoint
// tensor whose rows they are.
TEST(Triage, RowsNoLoadWroteLeadAnOrderDependenceOfTheSameTensor) {
  gc::ScenarioRecord r;
  const std::string t = "layers.0.qkv_proj.weight";
  r.findings.push_back(finding("stream_order", "stream_order", 0, t, {{"tensor", t}, {"cause", "stream order"}}));
  r.findings.push_back(finding("census", "census", 0, t,
                               {{"tensor", t}, {"checkpoint_name", "layers.0.v_proj.weight"},
                                {"load", "the initial checkpoint load"}}));
  const auto causes = gc::session::triage(r, "");
  ASSERT_EQ(causes.size(), 1u);
  EXPECT_EQ(r.findings[causes.front().findings.front()].probe, "census");
  EXPECT_EQ(causes.front().summary,
            "`layers.0.v_proj.weight` is never written by the load (first: the initial checkpoint load) (the initial "
            "load) — census, stream_order agree");
}

// A branch decided on the host from a loaded value and frozen at capture: after the refit the
// replay ignores the value eager now reads, which coverage sees. That is the frozen branch's
// symptom, not a stale copy: one cause, led by the frozen branch.
TEST(Triage, WhatTheReplayIgnoresUnderAFrozenBranchIsThatBranchsSymptom) {
  gc::ScenarioRecord r;
  r.findings.push_back(finding("replay_diff", "observe", 1, "replay vs eager(A)",
                               {{"cause", "frozen at capture"}, {"divergence", "the first added: aten::div"}}, 1));
  r.findings.push_back(finding("coverage", "coverage", 1, "cap", {{"tensor", "cap"}, {"replay_changed", "no"}}, 1));
  r.findings.push_back(finding("coverage", "coverage", 2, "scale", {{"tensor", "scale"}, {"replay_changed", "no"}}, 1));
  r.findings.push_back(finding("coverage", "coverage", 1, "bias", {{"tensor", "bias"}, {"replay_changed", "no"}}, 4));
  const auto causes = gc::session::triage(r, "");
  ASSERT_EQ(causes.size(), 3u);
  EXPECT_EQ(r.findings[causes[0].findings.front()].probe, "replay_diff");
  EXPECT_EQ(causes[0].findings.size(), 2u);  // the frozen branch and the coverage gap of its graph
  // Cycle 2's replay is not frozen, nor is cycle 1's graph of batch size 4: causes of their own.
  std::set<std::string> others = {causes[1].subject, causes[2].subject};
  EXPECT_EQ(others, (std::set<std::string>{"scale", "bias"}));
}

TEST(Triage, TwoBugsAreTwoCausesAndSymptomsJoinTheCauseOfTheirCycle) {
  gc::ScenarioRecord r;
  // A census survivor on the initial load, a rebind after refit 2, and a stale replay after it.
  r.findings.push_back(finding("census", "census", 0, "layers.0.qkv",
                               {{"tensor", "layers.0.qkv"}, {"checkpoint_name", "layers.0.v_proj"}, {"load", "the initial checkpoint load"}}));
  r.findings.push_back(finding("address", "observe", 2, "layers.1.scale", {{"tensor", "layers.1.scale"}}));
  r.findings.push_back(finding("replay_diff", "observe", 2, "replay vs eager(A)", {{"max_abs", "1"}}, 1));
  // eager(A) != eager(B) naming the census's tensor among those that differ from B.
  r.findings.push_back(finding("replay_diff", "observe", 0, "eager(A) vs eager(B)",
                               {{"tensors_differing_from_b", "layers.0.qkv (parameter: 4 of 16 elements); layers.9.other (buffer)"}}, 1));
  const auto causes = gc::session::triage(r, "x");
  ASSERT_EQ(causes.size(), 2u);
  EXPECT_EQ(causes[0].subject, "layers.0.v_proj");  // the checkpoint's name, census first
  EXPECT_EQ(causes[0].findings, (std::vector<std::size_t>{0, 3}));
  EXPECT_NE(causes[0].summary.find("is never written by the load (first: the initial checkpoint load)"), std::string::npos)
      << causes[0].summary;
  EXPECT_EQ(causes[1].subject, "layers.1.scale");
  EXPECT_EQ(causes[1].findings, (std::vector<std::size_t>{1, 2}));
}

TEST(Triage, ANondeterministicForwardLeadsAndTakesTheDifferentialsFindings) {
  gc::ScenarioRecord r;
  r.findings.push_back(finding("replay_diff", "validate", 0, "eager(A) twice", {{"cause", "nondeterministic"}}, 1));
  r.findings.push_back(finding("replay_diff", "observe", 1, "replay vs eager(A)", {{"under", "forward is nondeterministic"}}, 1));
  r.findings.push_back(finding("replay_diff", "observe", 1, "eager(A) vs eager(B)",
                               {{"tensors_differing_from_b", "w"}, {"under", "forward is nondeterministic"}}, 1));
  r.findings.push_back(finding("address", "observe", 1, "w2", {{"tensor", "w2"}, {"under", "forward is nondeterministic"}}));
  const auto causes = gc::session::triage(r, "x");
  ASSERT_EQ(causes.size(), 2u);
  EXPECT_EQ(causes[0].findings, (std::vector<std::size_t>{0, 2, 1}));  // the primary, then by specificity
  EXPECT_EQ(causes[0].summary, "the forward is nondeterministic: two eager runs on one input differ (the initial load) — replay_diff");
  EXPECT_EQ(causes[1].subject, "w2");  // another probe's evidence stands on its own
}

TEST(Triage, ModelCodeThatThrowsReadsAsSuchAndHooksMissedInOneLoadAreOneCause) {
  gc::ScenarioRecord r;
  gc::Finding threw = finding("driver", "observe", 0, "model code", {});
  threw.phase = "warmup";
  threw.message = "forward() threw: hc_attn_fn_broadcast is missing\nTraceback ...";
  r.findings.push_back(threw);
  for (const char* hook : {"finalize_a", "finalize_b"}) {
    r.findings.push_back(finding("hooks", "observe", 0, std::string(hook) + " on layers.0",
                                 {{"hook", hook}, {"module", "layers.0"}, {"load", "dummy load"}, {"calls_in_this_load", "0"}}));
  }
  const auto causes = gc::session::triage(r, "x");
  ASSERT_EQ(causes.size(), 2u);
  EXPECT_EQ(causes[0].summary,
            "model code failed in phase warmup: forward() threw: hc_attn_fn_broadcast is missing (the initial load) — driver");
  EXPECT_EQ(causes[1].subject, "hooks 'finalize_a', 'finalize_b'");
  EXPECT_NE(causes[1].summary.find("do not run on the dummy load"), std::string::npos) << causes[1].summary;
}

TEST(Triage, APluginProbesFindingGroupsByItsTensorAndAnEmptyRecordHasNoCause) {
  gc::ScenarioRecord r;
  EXPECT_TRUE(gc::session::triage(r, "x").empty());
  r.findings.push_back(finding("my_probe", "observe", 1, "layers.3.w", {{"tensor", "layers.3.w"}}));
  r.findings.push_back(finding("address", "observe", 1, "layers.4.w", {{"tensor", "layers.4.w"}}));
  const auto causes = gc::session::triage(r, "x");
  ASSERT_EQ(causes.size(), 1u);
  EXPECT_EQ(causes[0].subject, "layers.4.w");  // what the primary's probe names
  EXPECT_EQ(causes[0].probes, (std::vector<std::string>{"address", "my_probe"}));
}

// Rank 1 skips PWAL on refit (dist_tp2's py.tp.last_rank_skips_pwal_on_refit): its hooks did not
// run, so the scale they derive is stale there and the ranks hold the "replicated" scale
// differently. The replicated difference is the symptom; the cause is the missed hook, and an
// address finding in the same module (another mechanism) stays a cause of its own.
TEST(Triage, AHookMissedOnARankLeadsTheStateItsModuleHoldsDifferently) {
  gc::ScenarioRecord r;
  for (int cycle = 1; cycle <= 2; ++cycle) {
    for (int layer = 0; layer < 2; ++layer) {
      const std::string module = "layers." + std::to_string(layer);
      r.findings.push_back(finding("hooks", "observe", cycle, "finalize_scales on " + module,
                                   {{"rank", "1"}, {"hook", "finalize_scales"}, {"module", module},
                                    {"load", "refit cycle " + std::to_string(cycle)}, {"calls_in_this_load", "0"}}));
    }
  }
  for (int layer = 0; layer < 2; ++layer) {
    const std::string t = "layers." + std::to_string(layer) + ".mlp.act_scale";
    r.findings.push_back(finding("ranks", "observe", 1, t, {{"tensor", t}, {"fingerprints", "rank 0 1a; rank 1 2b"}}));
  }
  r.findings.push_back(finding("ranks", "observe", 1, "finalize_scales",
                               {{"hook", "finalize_scales"}, {"module", "layers.0"}, {"ranks", "1"},
                                {"differences", "finalize_scales@layers.0 (rank 0 1, rank 1 0); finalize_scales@layers.1 (rank 0 1, rank 1 0)"}}));
  r.findings.push_back(finding("address", "observe", 2, "layers.1.mlp.w", {{"rank", "1"}, {"tensor", "layers.1.mlp.w"}}));
  const auto causes = gc::session::triage(r, "x");
  ASSERT_EQ(causes.size(), 2u);
  EXPECT_EQ(causes[0].subject, "layers.1.mlp.w");  // the address finding: another mechanism
  const gc::Cause& c = causes[1];
  EXPECT_EQ(c.findings.size(), 7u);
  EXPECT_EQ(r.findings[c.findings.front()].probe, "hooks");
  EXPECT_EQ(c.subject, "hook 'finalize_scales'");
  EXPECT_NE(c.summary.find("does not run on the refit cycle 1, refit cycle 2"), std::string::npos) << c.summary;
  EXPECT_NE(c.summary.find("on rank 1 (cycles 1, 2)"), std::string::npos) << c.summary;

  // A replicated difference in a module whose hooks all ran, or from a cycle before the miss,
  // is not the hook's.
  gc::ScenarioRecord early = r;
  early.findings.push_back(finding("ranks", "observe", 0, "layers.0.mlp.bias", {{"tensor", "layers.0.mlp.bias"}, {"fingerprints", "x"}}));
  early.findings.push_back(finding("ranks", "observe", 1, "embed.scale", {{"tensor", "embed.scale"}, {"fingerprints", "x"}}));
  EXPECT_EQ(gc::session::triage(early, "x").size(), 4u);

  // Nor is a finding of another rank (the cross-rank finding lists its ranks), or of a cycle whose
  // load ran the hook again.
  gc::ScenarioRecord other = r;
  other.findings.push_back(finding("poison", "poison", 1, "layers.0.mlp.kv_scale",
                                   {{"rank", "0"}, {"tensor", "layers.0.mlp.kv_scale"}}));
  other.findings.push_back(finding("poison", "poison", 3, "layers.1.mlp.q_scale",
                                   {{"rank", "1"}, {"tensor", "layers.1.mlp.q_scale"}}));
  EXPECT_EQ(gc::session::triage(other, "x").size(), 4u);
}

}  // namespace
