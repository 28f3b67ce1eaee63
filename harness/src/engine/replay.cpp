// PassRun's forwards (engine/pass_run.h): the inputs of each batch size, eager(A), the replay of
// a captured graph, the noise floor, and the replay + compare of every graph (with the eager-only
// batch sizes) after the initial load and each cycle.

#include <c10/core/Device.h>
#include <fmt/format.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "backends/static_copy.h"
#include "output_diff.h"
#include "counting_allocator.h"
#include "engine/driver.h"
#include "engine/errors.h"
#include "engine/pass_run.h"
#include "graphcheck/engine/backend.h"
#include "graphcheck/probe.h"
#include "passes/passes.h"
#include "tensor_format.h"
#include "tolerance.h"

namespace graphcheck::engine {

TensorList PassRun::make_inputs(std::int64_t batch_size, std::uint64_t seed) {
  TensorList inputs =
      call_model(m_phase, "make_inputs()", [&] { return m_model->make_inputs(batch_size, seed); });
  const c10::Device device = backend().device();  // the model's inputs live with the model
  if (!device.is_cpu()) {
    for (auto& t : inputs) t = t.to(device);
  }
  return inputs;
}

TensorList PassRun::input_for(std::int64_t batch_size, int salt) {
  HarnessTime t(m_harness_seconds);
  const std::uint64_t seed = m_driver.seed() * 1000003u + static_cast<std::uint64_t>(salt) * 7919u +
                             static_cast<std::uint64_t>(batch_size);
  return make_inputs(batch_size, seed);
}

TensorList PassRun::eager(const TensorList& inputs, OpLogDigest* log) {
  TensorList out = call_model(m_phase, "forward()", [&] {
    torch::NoGradGuard no_grad;
    std::optional<OpLogScope> logging;
    if (log != nullptr) logging.emplace(*log, inputs);
    return m_model->forward_all(inputs);
  });
  for (auto& t : out) {
    if (t.defined()) t = t.clone();
  }
  return out;
}

TensorList PassRun::replay(std::size_t index, const TensorList& inputs) {
  CapturedGraph& graph = *m_graphs.at(index);
  write_inputs(graph, inputs);
  call_model(m_phase, "graph replay", [&] {
    graph.replay();
    return 0;
  });
  TensorList out;
  for (const auto& t : graph.static_outputs()) out.push_back(t.clone());
  return out;
}

void PassRun::write_inputs(CapturedGraph& graph, const TensorList& inputs) {
  const TensorList& statics = graph.static_inputs();
  if (inputs.size() != statics.size()) {
    throw ModelFailure(m_phase, fmt::format("make_inputs({}) returned {} tensors but the graph was "
                                            "captured with {}: inputs must keep their count",
                                            graph.batch_size(), inputs.size(), statics.size()));
  }
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].sizes() != statics[i].sizes() || inputs[i].scalar_type() != statics[i].scalar_type()) {
      throw ModelFailure(m_phase, fmt::format(
                                      "make_inputs({}) returned input {} as {} {} but the graph was "
                                      "captured with {} {}: inputs of one batch size must keep "
                                      "their shape and dtype",
                                      graph.batch_size(), i, c10::toString(inputs[i].scalar_type()),
                                      shape_string(inputs[i].sizes()),
                                      c10::toString(statics[i].scalar_type()),
                                      shape_string(statics[i].sizes())));
    }
    copy_static(statics[i], inputs[i]);
  }
}

// The noise floor: the largest difference between two more eager(A) runs on the same inputs.
double PassRun::measure_noise(const TensorList& inputs, NoiseEvent* event) {
  UncountedScope uncounted;
  TensorList first = eager(inputs);
  TensorList second = eager(inputs);
  double noise = 0;
  for (std::size_t i = 0; i < first.size() && i < second.size(); ++i) {
    if (!first[i].defined() || !second[i].defined() || first[i].sizes() != second[i].sizes()) continue;
    const torch::Tensor d = (first[i].to(torch::kFloat64) - second[i].to(torch::kFloat64)).abs().nan_to_num(0.0);
    if (d.numel() > 0) noise = std::max(noise, d.max().item<double>());
  }
  if (event) {
    // The dtypes' rounding at the outputs' magnitude; no noise floor: this is what measures it.
    event->allowed = outputs_tolerance(first, backend().exact(), backend().min_tolerance(), -1);
    event->first = std::move(first);
    event->second = std::move(second);
    event->max_abs = noise;
    if (noise > event->allowed && !m_trailed) {
      // Note [Where a forward stops repeating] (engine/op_log.h): two more runs, each op traced,
      // once per pass (the finding is the first batch size's). A run that fails now (a forward
      // that fails only sometimes) leaves the place unnamed: the finding stands without it.
      m_trailed = true;
      OpTrail a, b;
      try {
        {
          OpTrailScope trail(a);
          (void)eager(inputs);
        }
        {
          OpTrailScope trail(b);
          (void)eager(inputs);
        }
      } catch (const std::exception&) {
        a.ops.clear();
        b.ops.clear();
      }
      if (const auto at = first_divergence(a, b); at && !(a.ops.empty() && b.ops.empty())) {
        const OpTrail::Op& op = *at < b.ops.size() ? b.ops[*at] : a.ops[*at];
        const bool other_op = *at < a.ops.size() && *at < b.ops.size() && a.ops[*at].name != b.ops[*at].name;
        event->first_divergence =
            other_op ? fmt::format("{} in one run and {} in the other{}", a.ops[*at].name, b.ops[*at].name,
                                   op.where.empty() ? "" : fmt::format(" ({})", op.where))
                     : fmt::format("{}{}", op.name, op.where.empty() ? "" : fmt::format(" ({})", op.where));
        event->first_divergence_op = *at + 1;
      }
    }
  }
  return noise;
}

// Prefill: an eager-only batch size (capture.eager_batch_sizes) runs through A and B as the
// graphs' inputs do, so that a difference only the captured (decode) graphs show is told apart.
void PassRun::eager_compare(std::int64_t batch_size) {
  m_batch_size = batch_size;
  TensorList inputs = input_for(batch_size, m_cycle + 1);
  (void)reference_model();  // model B, outside every window
  m_phase = Phase::compare;
  CompareEvent c;
  static_cast<PhaseEvent&>(c) = event(Phase::compare);
  c.inputs = inputs;
  c.reference_outputs = reference_forward(inputs);
  begin(&Probe::on_compare_begin, c);
  c.eager_outputs = eager(inputs);
  {
    HarnessTime t(m_harness_seconds);
    UncountedScope uncounted;
    c.noise_floor = noise_floor(batch_size);
    const GraphBackend& backend = m_driver.backend();
    c.tolerance = outputs_tolerance(c.eager_outputs, backend.exact(), backend.min_tolerance(), c.noise_floor);
  }
  end(&Probe::on_compare_end, c);
}

void PassRun::replay_all() {
  if (m_pass == Pass::observe) {
    for (std::int64_t b : scenario().eager_batch_sizes) eager_compare(b);
  }
  // The coverage pass's compares, measured together (Note [One perturbation for a cycle's
  // graphs]) while what they hold (inputs and both outputs) stays under a bound: 35 batch sizes of
  // a 128k-vocabulary model's logits would be gigabytes held at once on the device.
  constexpr std::int64_t kCoverageHeldBytes = std::int64_t{256} << 20;
  std::vector<std::pair<std::size_t, CompareEvent>> coverage_compares;
  std::int64_t coverage_held = 0;
  const auto held_bytes = [](const CompareEvent& c) {
    std::int64_t bytes = 0;
    for (const TensorList* list : {&c.inputs, &c.replay_outputs, &c.eager_outputs}) {
      for (const auto& t : *list) bytes += t.defined() ? static_cast<std::int64_t>(t.nbytes()) : 0;
    }
    return bytes;
  };
  for (std::size_t i = 0; i < m_graphs.size(); ++i) {
    CapturedGraph& graph = *m_graphs[i];
    const std::int64_t b = graph.batch_size();
    m_batch_size = b;
    TensorList inputs = input_for(b, m_cycle + 1);
    if (m_pass == Pass::observe) (void)reference_model();  // model B, outside every window

    m_phase = Phase::replay;
    ReplayEvent r;
    static_cast<PhaseEvent&>(r) = event(Phase::replay);
    r.graph = &m_views[i];
    begin(&Probe::on_replay_begin, r);
    write_inputs(graph, inputs);
    call_model(Phase::replay, "graph replay", [&] {
      graph.replay();
      m_driver.backend().synchronize();
      return 0;
    });
    r.replay_outputs = graph.static_outputs();
    end(&Probe::on_replay_end, r);
    if (m_pass == Pass::poison && passes::holds_nan(r.replay_outputs)) {
      ReplayNanEvent n;
      static_cast<PhaseEvent&>(n) = r;
      n.graph = r.graph;
      n.replay_outputs = r.replay_outputs;
      n.reference_outputs = reference_forward(graph.static_inputs());
      notify(&Probe::on_replay_nan, n);
    }

    m_phase = Phase::compare;
    CompareEvent c;
    static_cast<PhaseEvent&>(c) = event(Phase::compare);
    c.graph = &m_views[i];
    c.inputs = inputs;
    for (const auto& t : r.replay_outputs) c.replay_outputs.push_back(t.clone());
    if (m_pass == Pass::observe) c.reference_outputs = reference_forward(inputs);  // outside windows
    begin(&Probe::on_compare_begin, c);
    c.eager_outputs = eager(inputs);
    {
      HarnessTime t(m_harness_seconds);
      UncountedScope uncounted;
      c.noise_floor = noise_floor(b);
      // Per output (its dtype and magnitude); the largest applies.
      const GraphBackend& backend = m_driver.backend();
      c.tolerance = outputs_tolerance(c.eager_outputs, backend.exact(), backend.min_tolerance(), c.noise_floor);
    }
    // After a cycle, a replay that differs from eager(A) may hold a host value of the weights
    // baked at capture rather than a stale tensor: a fresh recording tells them apart.
    if (m_pass == Pass::observe && m_cycle > 0 && !outputs_agree(c.replay_outputs, c.eager_outputs, c.tolerance)) {
      c.recapture = recapture(i, inputs);
    }
    end(&Probe::on_compare_end, c);
    if (m_pass == Pass::coverage) {
      const std::int64_t bytes = held_bytes(c);
      if (!coverage_compares.empty() && coverage_held + bytes > kCoverageHeldBytes) {
        coverage(coverage_compares);
        coverage_compares.clear();
        coverage_held = 0;
      }
      coverage_compares.emplace_back(i, std::move(c));
      coverage_held += bytes;
    }
  }
  m_batch_size = 0;
  if (!coverage_compares.empty()) coverage(coverage_compares);
}

}  // namespace graphcheck::engine
