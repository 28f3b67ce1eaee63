// The disturbing passes' work on the driver's side (passes/passes.h does the work itself): each
// is called at the point of the lifecycle its pass disturbs and hands its evidence to the pass's
// probes as an event (census, poison, idempotence, validate, coverage, growth).

#include <c10/core/ScalarType.h>
#include <fmt/format.h>
#include <torch/types.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>
#include <utility>

#include "address_index.h"
#include "output_diff.h"
#include "counting_allocator.h"
#include "engine/driver.h"
#include "engine/errors.h"
#include "engine/op_log.h"
#include "engine/pass_run.h"
#include "graphcheck/model.h"
#include "graphcheck/probe.h"
#include "passes/passes.h"
#include "tolerance.h"

namespace graphcheck::engine {

// ---- the disturbing passes' work (passes/passes.h) -------------------------------------------

void PassRun::census_fill(const LoadEvent& load) {
  CensusFillEvent f;
  static_cast<PhaseEvent&>(f) = load;
  f.load = &load;
  passes::fill_census(load, checkpoint_layout(), f);
  notify(&Probe::on_census_filled, f);
}

void PassRun::poison_fill(PoisonFillEvent::Kind kind, const CycleStep& step) {
  PoisonFillEvent f;
  static_cast<PhaseEvent&>(f) = event(kind == PoisonFillEvent::Kind::staged ? Phase::load : Phase::refit);
  {
    UncountedScope uncounted;
    switch (kind) {
      case PoisonFillEvent::Kind::before_refit:
        passes::poison_before_refit(checkpoint_layout(), step.prefixes, f);
        break;
      case PoisonFillEvent::Kind::staged:
        passes::poison_staged(checkpoint_layout(), scenario().poison.staged, step.prefixes, f);
        break;
      case PoisonFillEvent::Kind::orphans: passes::poison_orphans(m_views, live_tensors(), f); break;
    }
  }
  notify(&Probe::on_poison_filled, f);
}

// A second PWAL right after the loader's must change nothing.
void PassRun::idempotence_check() {
  IdempotenceEvent f;
  static_cast<PhaseEvent&>(f) = event(Phase::pwal);
  f.before = passes::snapshot(graphcheck::live_tensors(*m_model));
  run_pwal(*m_model);
  f.after = passes::snapshot(graphcheck::live_tensors(*m_model));
  notify(&Probe::on_idempotence_checked, f);
}

// Fresh inputs the graph never saw (other seeds, signs and scales), replayed and run eagerly.
void PassRun::validate_capture(std::size_t index, const CaptureEvent& capture) {
  ValidationEvent v;
  static_cast<PhaseEvent&>(v) = capture;
  v.graph = capture.graph;
  const std::int64_t b = capture.batch_size;
  const auto inputs_list = passes::validation_inputs(scenario().seed, b);
  double recapture_seconds = 0;
  int recordings_skipped = 0;
  // Note [Eager op log]: the capture's own input, run eagerly after the capture (before the
  // first wide-range input).
  std::optional<OpLogDigest> capture_log;
  for (std::size_t k = 0; k < inputs_list.size(); ++k) {
    const auto [seed, scale] = inputs_list[k];
    ValidationReplay r;
    r.seed = seed;
    r.scale = scale;
    TensorList inputs = make_inputs(b, seed);
    for (auto& t : inputs) {
      if (t.defined() && c10::isFloatingType(t.scalar_type())) t = t * scale;
    }
    r.replay_outputs = replay(index, inputs);
    const bool wide = k >= kValidationRecaptureFrom;
    // A backend that records nothing (cuda) has no recording to skip: no log either.
    const bool logged = wide && backend().records_forwards();
    OpLogDigest log;
    if (logged && !capture_log) {
      capture_log.emplace();
      (void)eager(input_for(b, 0), &*capture_log);
    }
    r.eager_outputs = eager(inputs, logged ? &log : nullptr);
    // The differential's own tolerance, per output (dtype and magnitude of each).
    r.tolerance = outputs_tolerance(r.eager_outputs, backend().exact(), backend().min_tolerance(), noise_floor(b));
    const bool agrees = outputs_agree(r.replay_outputs, r.eager_outputs, r.tolerance);
    // Note [Frozen branches] (replay_diff_probe.cpp): the wide-range inputs, and any input whose
    // replay differs, are also recorded afresh and compared with the capture's op sequence;
    // a wide-range input whose replay agrees and whose op log is the capture's needs no
    // recording (Note [Eager op log]).
    // An empty log proves nothing (op callbacks off in this thread): record. The logs just before
    // and after the capture agree unless the capture itself changed what the forward does.
    const auto before = m_precapture_logs.find(b);
    if (agrees && logged && capture_log->ops > 0 && before != m_precapture_logs.end() &&
        before->second == *capture_log && log == *capture_log) {
      r.recapture.supported = true;
      ++recordings_skipped;
    } else if (!agrees || wide) {
      const auto t0 = Clock::now();
      r.recapture = recapture(index, inputs);
      recapture_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    }
    const bool differs = r.recapture.differs();
    v.replays.push_back(std::move(r));
    if (!agrees || differs) break;  // one input that shows it is enough
  }
  measure(capture, "gc/validate/recapture/seconds", recapture_seconds, "s");
  measure(capture, "gc/validate/recapture/skipped", recordings_skipped, "recordings");
  notify(&Probe::on_validation_replays, v);
}

// A diagnostic, not a check: a recording that fails (a rebound parameter that now requires grad
// cannot be a traced constant) says so in the diff and leaves the verdict to the other evidence.
RecaptureDiff PassRun::recapture(std::size_t index, const TensorList& inputs) {
  HarnessTime t(m_harness_seconds);
  UncountedScope uncounted;
  FlagScope quiet(m_quiet);
  RecaptureDiff d;
  try {
    d = call_model(m_phase, "forward() under a fresh recording",
                   [&] { return m_driver.backend().recapture_diff(*m_graphs.at(index), *m_model, inputs); });
  } catch (const ModelFailure& e) {
    d.unsupported_reason = e.what();
    return d;
  }
  if (!d.differs() && !d.moved_reads.empty()) chosen_read(m_views.at(index), d);
  return d;
}

// Note [A read chosen at capture]: the fresh recording runs the capture's ops with the same host
// values, but an op reads a tensor made outside the forward at another address. Which tensor was
// there at capture is the graph's read, resolved then; which is there now, the live tensors say.
// Where the capture's tensor is no longer at its capture address, it was rebound since (a refit
// that replaced it, a tie broken): the address probe's cause, not this one. Where it still is, and
// the op now reads another tensor, or another part of the same one, the forward picked what to
// read on the host (a weight picked by a Python flag PWAL derived from the weights, a plain
// attribute pointed at another buffer) and the graph froze the pick: the first such read is the
// divergence. A read either side cannot name says nothing.
void PassRun::chosen_read(const GraphView& view, RecaptureDiff& d) {
  std::unordered_map<const void*, std::vector<const ResolvedRead*>> at_capture;
  for (const ResolvedRead& r : view.reads) at_capture[r.read.address].push_back(&r);
  const AddressIndex now(live_tensors());
  const auto text = [](const ResolvedRead& r) {
    return r.whole ? fmt::format("'{}'", r.name)
                   : fmt::format("'{}' bytes {}-{}", r.name, r.offset, r.offset + static_cast<std::int64_t>(r.read.bytes) - 1);
  };
  for (const RecaptureDiff::MovedRead& m : d.moved_reads) {
    const auto reads = at_capture.find(m.at_capture.address);
    if (reads == at_capture.end()) continue;
    const auto then_it = std::find_if(reads->second.begin(), reads->second.end(),
                                      [&](const ResolvedRead* r) { return r->read.bytes == m.at_capture.bytes; });
    if (then_it == reads->second.end() || (*then_it)->name.empty()) continue;
    const ResolvedRead& then_read = **then_it;
    ResolvedRead still;
    if (!now.resolve_into(m.at_capture.address, m.at_capture.bytes, still) || still.name != then_read.name ||
        still.offset != then_read.offset) {
      continue;  // rebound since the capture: the address probe's
    }
    ResolvedRead now_read;
    now_read.read = m.now;
    if (!now.resolve_into(m.now.address, m.now.bytes, now_read) || now_read.name.empty()) continue;
    if (now_read.name == then_read.name && now_read.offset == then_read.offset && now_read.read.bytes == then_read.read.bytes) {
      continue;
    }
    d.control_flow_differs = true;
    d.divergence = fmt::format("op {} of the forward: {} argument {} reads {} now, {} at capture", m.op + 1, m.op_name,
                               m.argument, text(now_read), text(then_read));
    d.divergence_source = m.source;
    d.chosen_tensors = {now_read.name};
    if (then_read.name != now_read.name) d.chosen_tensors.push_back(then_read.name);
    return;
  }
}

// Note [One perturbation for a cycle's graphs] (passes/coverage.cpp): every graph of the cycle
// at once, each event as it would be alone, in the graphs' order.
void PassRun::coverage(const std::vector<std::pair<std::size_t, CompareEvent>>& compares) {
  std::vector<CoverageEvent> events(compares.size());
  std::vector<passes::CoverageGraph> graphs;
  graphs.reserve(compares.size());
  for (std::size_t k = 0; k < compares.size(); ++k) {
    const auto& [index, compare] = compares[k];
    static_cast<PhaseEvent&>(events[k]) = compare;
    graphs.push_back({&m_views[index], &compare,
                      [this, index = index, &compare = compare] {
                        m_batch_size = compare.batch_size;
                        TensorList replayed = replay(index, compare.inputs);
                        TensorList eager_outputs = eager(compare.inputs);
                        return std::make_pair(std::move(replayed), std::move(eager_outputs));
                      },
                      &events[k]});
  }
  passes::measure_coverage(graphs, live_tensors());
  for (const CoverageEvent& e : events) {
    m_batch_size = e.batch_size;
    notify(&Probe::on_coverage_measured, e);
  }
  m_batch_size = 0;
}

// Dummy loads of models grown through a config key (scenario dummy_growth).
void PassRun::growth() {
  GrowthEvent g;
  g.phase = Phase::load;
  passes::measure_growth(
      scenario(), [&](const ModelConfig& config) { return construct_model(config); },
      [&](LifecycleModel& model) { load_dummy(model, m_driver.seed()); }, g);
  notify(&Probe::on_growth_measured, g);
}

}  // namespace graphcheck::engine
