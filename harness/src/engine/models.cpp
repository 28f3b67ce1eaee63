// The models of a pass (engine/pass_run.h): model A's construction and its variants (growth),
// model B (the reference: a fresh model loaded with the weights A should hold now), the model
// calls the passes make quietly, and model A's tensor kinds and module paths.

#include <c10/core/Device.h>
#include <fmt/format.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "counting_allocator.h"
#include "engine/driver.h"
#include "engine/errors.h"
#include "engine/pass_run.h"
#include "engine/streams.h"
#include "graphcheck/checkpoint.h"
#include "graphcheck/hooks.h"
#include "graphcheck/model.h"
#include "graphcheck/probe.h"
#include "graphcheck/safetensors.h"
#include "support/release_memory.h"

namespace graphcheck::engine {

namespace {

void freeze(LifecycleModel& model) {
  for (auto& t : model.catalog().registered_tensors()) {
    if (t.kind == TensorKind::parameter) t.tensor.requires_grad_(false);
  }
}

}  // namespace

std::map<std::string, std::string> PassRun::tensor_kinds() {
  std::map<std::string, std::string> kinds;
  if (!m_model) return kinds;
  TensorCatalog& catalog = m_model->catalog();
  const auto extras = call_model(m_phase, "extra_tensors()", [&] { return catalog.extra_tensors(); });
  for (const auto& t : extras) kinds[t.name] = std::string(to_string(t.kind));
  // Registered tensors win over an extra of the same name; parameters over buffers.
  auto registered = catalog.registered_tensors();
  for (const auto& t : registered) {
    if (t.kind != TensorKind::parameter) kinds[t.name] = std::string(to_string(t.kind));
  }
  for (const auto& t : registered) {
    if (t.kind == TensorKind::parameter) kinds[t.name] = std::string(to_string(t.kind));
  }
  return kinds;
}

void PassRun::load_dummy(LifecycleModel& model, std::uint64_t seed) {
  FlagScope quiet(m_quiet);
  call_model(m_phase, "load_dummy_weights()", [&] {
    torch::NoGradGuard no_grad;
    model.load_dummy_weights(seed);
    return 0;
  });
}

void PassRun::run_pwal(LifecycleModel& model) {
  FlagScope quiet(m_quiet);
  call_model(m_phase, "process_weights_after_loading()", [&] {
    torch::NoGradGuard no_grad;
    model.process_weights_after_loading();
    return 0;
  });
}

// Note [Released pages] (graphcheck/safetensors.h): a record that is still a view of a generated
// checkpoint's map holds bytes nobody wrote (RecordingStream::finish replaced any the loader wrote
// or kept with a copy), so its pages can leave the resident set after each read: the ledger then
// costs the page cache, not the RSS (bench/lifecycle_bench BM_PeakRss). Adjacent records (a
// checkpoint's tensors lie back to back) go in one call; other memory is left alone.
void PassRun::release_record_pages() {
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> ranges;
  for (const auto* records : {&m_initial_weights, &m_refit_weights}) {
    for (const auto& [name, t] : *records) {
      if (!t.defined() || !t.has_storage() || !t.device().is_cpu() || !t.is_contiguous() || t.nbytes() == 0) continue;
      const auto begin = reinterpret_cast<std::uintptr_t>(t.data_ptr());
      ranges.emplace_back(begin, begin + t.nbytes());
    }
  }
  std::sort(ranges.begin(), ranges.end());
  for (std::size_t i = 0; i < ranges.size();) {
    auto [begin, end] = ranges[i];
    for (++i; i < ranges.size() && ranges[i].first <= end; ++i) end = std::max(end, ranges[i].second);
    (void)safetensors::release_mapped_pages(reinterpret_cast<const void*>(begin), end - begin);
  }
}

LifecycleModel& PassRun::reference_model() {
  if (!m_reference || m_reference_cycle != m_cycle) {
    HarnessTime t(m_harness_seconds);
    const Driver::SpanScope span(m_driver, open_span("model B", m_cycle, 0));
    m_reference.reset();
    m_reference = build_loaded("reference model");
    m_reference_cycle = m_cycle;
  }
  return *m_reference;
}

TensorList PassRun::reference_forward(const TensorList& inputs) {
  // Note [Model B's outputs across passes] (driver.cpp).
  const bool shared = !m_driver.rank() && !m_driver.transport();
  if (shared && m_pass != Pass::observe) {
    if (const TensorList* kept = m_driver.kept_reference_outputs(m_cycle, m_batch_size, inputs)) {
      UncountedScope uncounted;
      TensorList outputs;
      for (const auto& t : *kept) outputs.push_back(t.defined() ? t.clone() : t);
      return outputs;
    }
  }
  LifecycleModel& reference = reference_model();
  FlagScope quiet(m_quiet);
  UncountedScope uncounted;
  TensorList outputs = call_model(m_phase, "reference model forward()", [&] {
    torch::NoGradGuard no_grad;
    return reference.forward_all(inputs);
  });
  if (shared && m_pass == Pass::observe && m_driver.runs(Pass::poison)) {
    HarnessTime t(m_harness_seconds);
    m_driver.keep_reference_outputs(m_cycle, m_batch_size, inputs, outputs);
  }
  return outputs;
}

// A fresh model loaded in one go with the weights A should hold now: the initial checkpoint
// (or, for a dummy load, the same dummy fill) overlaid with every refit so far, then PWAL.
std::unique_ptr<LifecycleModel> PassRun::build_loaded(const char* what) {
  FlagScope quiet(m_quiet);
  UncountedScope uncounted;  // the harness's model, not model A's memory
  // What B's loader frees (a repack's sources, the blocks its constructor allocated) leaves the
  // resident set at once: Note [Directly mapped blocks] (counting_allocator.h).
  const DirectMapScope direct_map;
  std::unique_ptr<LifecycleModel> model = construct_quiet(what);
  if (m_driver.rank()) {  // a rollout rank: the truth through the tensor-parallel contract
    load_by_contract(*model, what);
    return model;
  }
  std::map<std::string, torch::Tensor> weights = m_refit_weights;
  if (scenario().load == LoadFormat::dummy) {
    call_model(m_phase, fmt::format("{} load_dummy_weights()", what), [&] {
      torch::NoGradGuard no_grad;
      model->load_dummy_weights(m_driver.seed());
      return 0;
    });
  } else {
    weights.insert(m_initial_weights.begin(), m_initial_weights.end());  // refits win
  }
  if (!weights.empty()) {
    // In the order model A was streamed (the stream-order pass varies it on purpose, not B).
    std::vector<NamedTensor> list;
    for (const std::string& name : m_stream_order) {
      auto it = weights.find(name);
      if (it == weights.end()) continue;
      list.push_back({name, it->second});
      weights.erase(it);
    }
    for (const auto& [name, tensor] : weights) list.push_back({name, tensor});
    TensorListWeightStream records(
        std::move(list), fmt::format("the weights model A should hold at cycle {}", m_cycle));
    // One copy at a time: a loader that writes into what it is streamed must not change the
    // records, which later builds read again.
    CloningStream stream(records);
    call_model(m_phase, fmt::format("{} load_weights()", what), [&] { return model->load_weights(stream); });
    release_record_pages();  // read again: out of the resident set until the next read
  }
  support::release_free_memory();  // the clones it copied from, the storage it replaced
  call_model(m_phase, fmt::format("{} process_weights_after_loading()", what), [&] {
    torch::NoGradGuard no_grad;
    model->process_weights_after_loading();
    return 0;
  });
  return model;
}

std::unique_ptr<LifecycleModel> PassRun::construct_model(const ModelConfig& config) {
  return construct_quiet("model variant", &config);
}

// Another instance of the scenario's model whose hooks reach no probe.
std::unique_ptr<LifecycleModel> PassRun::construct_quiet(const char* what, const ModelConfig* config_override) {
  FlagScope quiet(m_quiet);
  return construct(config_override ? *config_override : scenario().config, what);
}

std::unique_ptr<LifecycleModel> PassRun::construct(ModelConfig config, const char* what, bool unsharded) {
  const Scenario& s = scenario();
  // A rollout rank's models hold its tensor-parallel shard (Note [Distributed scenarios]).
  if (const RankContext* rank = m_driver.rank()) {
    config.set("tp_rank", static_cast<std::int64_t>(unsharded ? 0 : rank->tp_rank), "the distributed run");
    config.set("tp_size", static_cast<std::int64_t>(unsharded ? 1 : rank->tp_size), "the distributed run");
  }
  const auto split = ModelRegistry::split_front(s.fixture);
  const std::string& kind = split.first;
  const std::string& spec = split.second;
  std::unique_ptr<LifecycleModel> model;
  if (kind.empty()) {
    const ModelRegistry::Entry* entry = ModelRegistry::get().find(s.fixture);
    if (!entry) throw UserError(fmt::format("{}: unknown fixture '{}'", s.file, s.fixture));
    model = call_model(Phase::construct, what, [&] { return entry->factory(config); });
  } else {
    const ModelFront* front = ModelRegistry::get().front(kind);
    if (!front) {
      throw UserError(fmt::format("{}: the scenario names a {} model ('{}') and no {} front is loaded",
                                  s.file, kind, spec, kind));
    }
    model = call_model(Phase::construct, what, [&] { return front->create(spec, config); });
  }
  if (!model) throw ModelFailure(Phase::construct, fmt::format("{}: the factory returned no model", what));
  auto unused = config.unused_keys();
  if (m_driver.rank() && !unused.empty() && (unused.front() == "tp_rank" || unused.front() == "tp_size")) {
    throw UserError(fmt::format(
        "{}: fixture '{}' runs in a distributed scenario, which gives every model its tensor-parallel place as "
        "config keys tp_rank and tp_size, but the model never read '{}': take tp_rank and tp_size in its "
        "factory and shard its tensors by them (and declare how in tensor_parallel())",
        s.file, s.fixture, unused.front()));
  }
  if (!unused.empty()) {
    throw UserError(fmt::format(
        "{}: unknown config key '{}' for fixture '{}': check its spelling (the fixture never "
        "read it)",
        config.where(unused.front()), unused.front(), s.fixture));
  }
  freeze(*model);
  // The backend's device (CUDA on the cuda backend): parameters and buffers move in place
  // (set_data), so tensor attributes keyed by identity survive.
  const c10::Device device = m_driver.backend().device();
  if (!device.is_cpu()) {
    call_model(Phase::construct, what, [&] {
      model->catalog().to(device);
      return 0;
    });
  }
  return model;
}

void PassRun::index_modules() {
  m_module_paths.clear();
  m_module_paths[detail::object_address(m_model.get())] = "(model)";
  for (const auto& m : m_model->catalog().modules()) {
    m_module_paths[m.identity] = m.path.empty() ? "(root)" : m.path;
  }
}

std::string PassRun::module_path(const void* module) {
  auto it = m_module_paths.find(module);
  if (it != m_module_paths.end()) return it->second;
  index_modules();  // modules may be created after construction
  it = m_module_paths.find(module);
  return it == m_module_paths.end() ? fmt::format("(unregistered module at {})", module) : it->second;
}

}  // namespace graphcheck::engine
