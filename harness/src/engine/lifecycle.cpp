// PassRun's lifecycle (engine/pass_run.h): construct -> load -> PWAL -> warm-up -> capture ->
// replay + compare, then the cycles (refits, reloads, bucket sweeps; sleeps in engine/sleep.cpp),
// and the loads themselves: the stream each load reads, the ledger it records, the PWAL after it.

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "address_index.h"
#include "counting_allocator.h"
#include "engine/driver.h"
#include "engine/errors.h"
#include "engine/pass_run.h"
#include "engine/streams.h"
#include "graphcheck/checkpoint.h"
#include "graphcheck/model.h"
#include "graphcheck/mutation.h"
#include "graphcheck/probe.h"
#include "graphcheck/safetensors.h"
#include "support/release_memory.h"
#include "synthesis_slabs.h"
#include "tensor_format.h"

namespace graphcheck::engine {

namespace {

// Whether every checkpoint name of the model's layout is the live tensor's own (no mapping).
bool names_as_live(LifecycleModel& model) {
  try {
    const std::vector<CheckpointEntry> layout = checkpoint_layout(model);
    return std::all_of(layout.begin(), layout.end(), [](const CheckpointEntry& e) { return e.checkpoint == e.live; });
  } catch (const std::exception&) {
    return false;  // the layout cannot be read now: no claim about it
  }
}

}  // namespace

// ---- PassRun --------------------------------------------------------------------------------

PassRun::PassRun(Driver& driver, Pass pass, std::vector<Probe*> probes)
    : m_driver(driver), m_pass(pass), m_spec(spec_of(pass)), m_probes(std::move(probes)),
      m_progress(driver.progress()) {}

const Scenario& PassRun::scenario() const { return m_driver.scenario(); }
const GraphBackend& PassRun::backend() const { return m_driver.backend(); }
MemoryMeter& PassRun::memory_meter() { return m_driver.backend().memory_meter(); }
std::uint64_t PassRun::seed() const { return m_driver.seed(); }

double PassRun::noise_floor(std::int64_t batch_size) const {
  auto it = m_driver.noise().find(batch_size);
  return it == m_driver.noise().end() ? -1.0 : it->second;
}
std::size_t PassRun::open_span(std::string phase, int cycle, std::int64_t batch_size) {
  return m_driver.open_span(to_string(m_pass), std::move(phase), cycle, batch_size);
}
void PassRun::close_span(std::size_t index) { m_driver.close_span(index); }
void PassRun::add_finding(Finding finding) { m_driver.add_finding(std::move(finding), m_pass, m_phase); }
void PassRun::add_measurement(Measurement m) { m_driver.add_measurement(std::move(m), m_pass, m_phase); }

void PassRun::hook(const void* module, std::string_view hook) {
  if (m_quiet || !m_model) return;
  HookEvent event;
  event.module_path = module_path(module);
  event.hook = std::string(hook);
  event.phase = m_phase;
  event.cycle = m_cycle;
  // A rollout rank: every hook call of the observe pass, for the cross-rank check that every rank
  // ran the same hooks (session::merge_ranks).
  if (m_pass == Pass::observe && m_driver.rank()) {
    measure(this->event(m_phase), fmt::format("gc/dist/hooks/{}@{}", event.hook, event.module_path), 1, "calls");
  }
  for (Probe* p : m_probes) deliver(p, &Probe::on_hook, event);
}

void PassRun::run() {
  m_started = true;  // on_scenario_end runs even when a probe's begin throws
  fire(&Probe::on_scenario_begin);
  if (m_pass == Pass::growth) {  // no lifecycle: the growth reruns only
    if (scenario().dummy_growth) growth();
    return;
  }
  if (m_pass == Pass::stream_order) {  // no lifecycle: loads in other orders only
    stream_order();
    return;
  }
  lifecycle();
}

// Note [Synthesis before the model]: a generated checkpoint is synthesized on a fresh instance of
// the model and held whole until it is written. Made lazily at a refit, that is model A, its
// graphs and its records plus the fresh model and the checkpoint: the run's peak (bench/
// lifecycle_bench BM_PeakRss). So the first pass synthesizes the scenario's checkpoints before it
// constructs model A; later passes find them made (Driver::checkpoint_for caches by seed). A
// synthesis that fails here is left to its own refit, which fails the same way and is reported
// there, in its cycle and phase. Bucket sweeps (whose seeds depend on the checkpoint's size) and
// the trainer's refits of a distributed scenario stay lazy. Where the model keeps the default
// synthesis, one fresh model synthesizes every seed here, each into the block the last one's
// tensors were drawn in (Note [One slab per synthesis]).
void PassRun::presynthesize() {
  const Scenario& s = scenario();
  std::vector<std::uint64_t> seeds;
  if (s.load != LoadFormat::dummy && s.checkpoint.empty()) seeds.push_back(m_driver.seed());
  if (!m_driver.transport()) {
    for (const RefitSpec& spec : s.cycles) {
      const bool synthesized = (spec.kind == CycleKind::refit && !spec.sweep) ||
                               (spec.kind == CycleKind::sleep && spec.sleep_level == 2 && spec.has_seed);
      if (synthesized) seeds.push_back(spec.seed + (m_driver.seed() - s.seed));
    }
  }
  // One fresh model for them all where the default synthesis runs: on the synthetic
  // 10,000-tensor model of 512 MiB a construction was a quarter of each synthesis (issue 26).
  std::unique_ptr<LifecycleModel> fresh;
  std::optional<SynthesisSlabs> slabs(std::in_place);  // Note [One slab per synthesis]
  for (std::uint64_t seed : seeds) {
    slabs->default_ran = false;
    try {
      (void)m_driver.checkpoint_for(seed, *this, [&] { return construct_synthesis(); }, &fresh);
    } catch (const std::exception&) {
      break;  // reported where the lifecycle meets it
    }
    // The default reads only the layout; a model's own synthesize_checkpoint() is promised a
    // freshly constructed model every time (model.h).
    if (!slabs->default_ran) fresh.reset();
  }
  slabs.reset();
  fresh.reset();
  support::release_free_memory();  // Note [Freed memory stays resident]
}

void PassRun::lifecycle() {
  const Scenario& s = scenario();
  presynthesize();
  // construct
  m_phase = Phase::construct;
  begin(&Probe::on_construct_begin, event(Phase::construct));
  m_model = construct(s.config, "model constructor");
  index_modules();
  end(&Probe::on_construct_end, event(Phase::construct));

  // initial load + PWAL (the loader calls it for every load format)
  if (s.load == LoadFormat::dummy) {
    load_dummy();
    if (mutation::enabled("driver.skip_pwal_on_dummy")) {
      // Mutation: the loader skips PWAL after a dummy load.
    } else {
      pwal();
    }
  } else {
    const LoadSource source =
        s.checkpoint.empty()
            ? LoadSource{m_driver.checkpoint_for(m_driver.seed(), *this,
                                                 [&] { return construct_synthesis(); }),
                         nullptr, /*generated=*/true}
            : LoadSource{s.checkpoint};
    load(/*refit=*/false, source, CycleStep::Bucket{});
    pwal();
  }
  if (m_pass == Pass::observe && m_driver.rank()) record_replicated();

  if (m_spec.forwards) {
    // warm-up and capture, one per batch size
    for (std::int64_t b : s.batch_sizes) {
      m_batch_size = b;
      PhaseEvent e = event(Phase::warmup);
      TensorList inputs = input_for(b, 0);  // before the window: only forward's own memory counts
      begin(&Probe::on_warmup_begin, e);
      (void)eager(inputs);
      end(&Probe::on_warmup_end, e);
      if (m_pass == Pass::validate) {
        NoiseEvent n;
        static_cast<PhaseEvent&>(n) = e;
        const double noise = measure_noise(inputs, &n);
        m_driver.noise()[b] = noise;
        measure(e, "gc/replay_diff/noise_floor", noise, "abs");
        notify(&Probe::on_noise_measured, n);
      }
    }
    if (m_pass == Pass::validate) {
      // The noise floor of the eager-only (prefill) batch sizes, compared with B after each load.
      for (std::int64_t b : s.eager_batch_sizes) {
        m_batch_size = b;
        m_driver.noise()[b] = measure_noise(input_for(b, 0));
      }
    }
    m_views.reserve(s.batch_sizes.size());  // CaptureEvent::graph points into it
    for (std::int64_t b : s.batch_sizes) {
      m_batch_size = b;
      CaptureEvent e;
      static_cast<PhaseEvent&>(e) = event(Phase::capture);
      TensorList inputs = input_for(b, 0);
      // Note [Eager op log]: only where the backend records forwards (the log skips recordings).
      if (m_pass == Pass::validate && backend().records_forwards()) (void)eager(inputs, &m_precapture_logs[b]);
      begin(&Probe::on_capture_begin, e);
      m_graphs.push_back(call_model(Phase::capture, "forward() under capture",
                                    [&] { return m_driver.backend().capture(*m_model, inputs, b); }));
      {
        HarnessTime t(m_harness_seconds);
        GraphView view;
        view.graph = m_graphs.back().get();
        view.batch_size = b;
        view.reads = resolve_reads(m_graphs.back()->reads(), AddressIndex(live_tensors()));
        m_views.push_back(std::move(view));
      }
      e.graph = &m_views.back();
      // A capture frees what its forward allocated: 250 MB of heap per capture on dsv4 32x1024, which
      // stayed resident (Note [Freed memory stays resident]).
      support::release_free_memory();
      end(&Probe::on_capture_end, e);
      if (m_pass == Pass::validate) {
        validate_capture(m_graphs.size() - 1, e);
        support::release_free_memory();  // its fresh recordings'
      }
    }
    m_batch_size = 0;
    if (m_spec.replays) replay_all();
  }
  if (!m_spec.refits) return;

  run_cycles();
}

// ---- cycles ---------------------------------------------------------------------------------
CycleStep& PassRun::new_step(const RefitSpec& spec) {
  CycleStep& step = m_steps.emplace_back();
  step.cycle = static_cast<int>(m_steps.size());
  step.kind = spec.kind;
  step.sleep_level = spec.sleep_level;
  step.where = spec.where;
  // A `--seed` shifts every seed of the scenario alike.
  step.seed = spec.seed + (m_driver.seed() - scenario().seed);
  step.pwal_per_bucket = spec.pwal_per_bucket;
  m_cycle = step.cycle;
  return step;
}

void PassRun::run_cycles() {
  for (const RefitSpec& spec : scenario().cycles) {
    if (spec.kind == CycleKind::refit && spec.sweep) {
      sweep(spec);
      continue;
    }
    CycleStep& step = new_step(spec);
    switch (spec.kind) {
      case CycleKind::refit:
        step.prefixes = spec.prefixes();
        for (const RefitBucket& b : spec.buckets) step.buckets.push_back({b.name, b.only, {}});
        step.label = fmt::format("refit cycle {}", step.cycle);
        if (spec.pwal_per_bucket) step.label += " (chunked: stage, load and PWAL per bucket)";
        break;
      case CycleKind::reload:
        step.held_weights = true;
        step.label = fmt::format("cycle {} (a reload of the weights the model holds)", step.cycle);
        break;
      case CycleKind::sleep:
        step.loads = spec.sleep_level == 2;
        step.held_weights = step.loads && !spec.has_seed;
        step.label = fmt::format("cycle {} (sleep level {}, wake{})", step.cycle, spec.sleep_level,
                                 spec.sleep_level == 1  ? std::string()
                                 : step.held_weights ? std::string(", reload of the held weights")
                                                     : fmt::format(", reload of new weights, seed {}", step.seed));
        break;
    }
    run_step(step);
  }
}

void PassRun::run_step(const CycleStep& step) {
  m_cycle = step.cycle;
  // The last cycle's model B is stale from here on (reference_model() builds this cycle's): freed
  // before this cycle synthesizes its checkpoint, so that the two never share the peak.
  m_reference.reset();
  support::release_free_memory();
  if (step.kind == CycleKind::sleep) {
    sleep_step(step);
  } else {
    refit_step(step);
  }
  if (m_spec.replays) replay_all();
}

// `buckets: sweep`: one refit per split position of the stream (the checkpoint's tensor order),
// two buckets each, each step with weights of its own (seed + step) so that a tensor left stale
// by one split differs from what it should hold.
void PassRun::sweep(const RefitSpec& spec) {
  m_reference.reset();  // stale, and not to share the peak with the synthesis below (run_step)
  const std::uint64_t first_seed = spec.seed + (m_driver.seed() - scenario().seed);
  const std::string path =
      m_driver.checkpoint_for(first_seed, *this, [&] { return construct_synthesis(); });
  std::vector<std::string> names;
  try {
    const safetensors::File file = safetensors::File::open(path);
    for (const auto& info : file.tensors()) names.push_back(info.name);
  } catch (const safetensors::Error& e) {
    throw UserError(e.what());
  }
  const auto n = static_cast<std::int64_t>(names.size());
  if (n < 2) {
    throw UserError(fmt::format("{}: a bucket sweep splits the refit stream in two, but the "
                                "checkpoint holds {} tensor: drop 'buckets: sweep'",
                                spec.where, n));
  }
  // Split positions k (the first bucket streams tensors [0, k)): all of 1 .. n-1, or max_splits
  // of them evenly spaced, the first and the last included.
  std::vector<std::int64_t> positions;
  const std::int64_t count = std::min(n - 1, spec.max_splits);
  for (std::int64_t j = 0; j < count; ++j) {
    const std::int64_t k = count == 1 ? 1 : 1 + j * (n - 2) / (count - 1);
    if (positions.empty() || positions.back() != k) positions.push_back(k);
  }
  for (std::size_t j = 0; j < positions.size(); ++j) {
    const std::int64_t k = positions[j];
    CycleStep& step = new_step(spec);
    step.seed = first_seed + j;
    CycleStep::Bucket head{fmt::format("tensors 1-{}", k), {}, {}};
    CycleStep::Bucket tail{fmt::format("tensors {}-{}", k + 1, n), {}, {}};
    for (std::int64_t i = 0; i < n; ++i) (i < k ? head : tail).names.insert(names[static_cast<std::size_t>(i)]);
    step.buckets = {std::move(head), std::move(tail)};
    step.label = fmt::format("refit cycle {} (bucket sweep, split {} of {}: after '{}', tensor {} of {}, seed {})",
                             step.cycle, j + 1, positions.size(), names[static_cast<std::size_t>(k - 1)], k, n,
                             step.seed);
    run_step(step);
  }
}

PassRun::LoadSource PassRun::source_for(const CycleStep& step) {
  // A rollout rank (Note [Distributed scenarios]): the observe pass receives each refit from the
  // trainer as it streams; the later passes load what it received.
  if (RefitTransport* transport = m_driver.transport()) {
    if (m_pass == Pass::observe) {
      auto incoming = std::make_shared<RefitTransport::Incoming>(
          call_model(Phase::refit, "start_weight_update (the trainer's announcement)",
                     [&] { return transport->receive(step.cycle); }));
      m_driver.keep_received(step.cycle, {});  // asked for: not to be drained
      LoadSource source;
      source.incoming = std::move(incoming);
      return source;
    }
    const std::vector<NamedTensor>* received = m_driver.received(step.cycle);
    if (!received || received->empty()) {
      throw ModelFailure(Phase::refit, fmt::format("{}: this rank never received {} from the trainer (the observe "
                                                   "pass stopped before it): the {} pass cannot repeat it",
                                                   step.where, step.label, to_string(m_pass)));
    }
    // Copies: a loader that keeps what it is streamed must not change what later passes replay.
    m_held.clear();
    for (const NamedTensor& t : *received) m_held.push_back({t.name, t.tensor.clone()});
    LoadSource replayed{"", &m_held};
    replayed.label = fmt::format("refit cycle {} as this rank received it from the trainer", step.cycle);
    replayed.kernel_format = m_driver.received_kernel_format(step.cycle);
    return replayed;
  }
  if (!step.held_weights) {
    return LoadSource{m_driver.checkpoint_for(step.seed, *this, [&] { return construct_synthesis(); }),
                      nullptr, /*generated=*/true};
  }
  // What A holds: every refit so far over the initial checkpoint, in the checkpoint layout.
  HarnessTime t(m_harness_seconds);
  UncountedScope uncounted;  // the harness's copies, not the model's memory
  m_held.clear();
  for (const CheckpointEntry& entry : checkpoint_layout()) {
    torch::Tensor held;
    if (auto it = m_refit_weights.find(entry.checkpoint); it != m_refit_weights.end()) {
      held = it->second;
    } else if (auto initial = m_initial_weights.find(entry.checkpoint); initial != m_initial_weights.end()) {
      held = initial->second;
    }
    if (!held.defined()) {
      throw UserError(fmt::format(
          "{}: {} streams the weights the model holds, but '{}' was never streamed (the initial "
          "load was dummy and no earlier refit sent it): put a full refit before it",
          step.where, step.label, entry.checkpoint));
    }
    // A copy: a loader that keeps the streamed tensor must not share storage with the records
    // model B is built from.
    m_held.push_back({entry.checkpoint, held.clone()});
  }
  return LoadSource{"", &m_held};
}

void PassRun::refit_step(const CycleStep& step) {
  m_phase = Phase::refit;
  // Synthesized before the window opens: the harness's work, not the model's.
  const LoadSource source = source_for(step);
  PhaseEvent e = event(Phase::refit);
  begin(&Probe::on_refit_begin, e);
  if (m_pass == Pass::poison && scenario().poison.before_refit) poison_fill(PoisonFillEvent::Kind::before_refit, step);
  const auto stage = [&] {
    call_model(Phase::refit, "stage_for_refit()", [&] {
      torch::NoGradGuard no_grad;
      m_model->stage_for_refit();
      return 0;
    });
  };
  m_skip_refit_pwal = false;
  const auto finish = [&] {
    if (mutation::enabled("driver.skip_pwal_on_refit")) {
      // Mutation: the loader skips PWAL after a refit.
    } else if (m_skip_refit_pwal) {
      // A kernel-format refit (is_checkpoint_format false): the protocol copies the tensors in
      // and runs no PWAL; what that leaves wrong is the checks' to find.
    } else {
      pwal();
    }
  };
  const std::vector<CycleStep::Bucket> whole = {CycleStep::Bucket{"", step.prefixes, {}}};
  const std::vector<CycleStep::Bucket>& buckets = step.buckets.empty() ? whole : step.buckets;
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    // The loader stages once per refit, before the first bucket (DESIGN §1.4); a chunked reload
    // calls the whole loader per bucket.
    if (i == 0 || step.pwal_per_bucket) stage();
    load(/*refit=*/true, source, buckets[i], /*first_of_refit=*/i == 0);
    if (step.pwal_per_bucket) finish();
  }
  if (!step.pwal_per_bucket) finish();
  if (m_pass == Pass::observe && m_driver.rank()) record_replicated();
  m_held.clear();
  m_phase = Phase::refit;
  end(&Probe::on_refit_end, e);
  if (m_pass == Pass::poison) poison_fill(PoisonFillEvent::Kind::orphans, step);
  release_record_pages();  // the poison probe reads the records as expected values
}

// ---- loads ----------------------------------------------------------------------------------

void PassRun::load(bool refit, const LoadSource& source, const CycleStep::Bucket& bucket, bool first_of_refit) {
  m_phase = Phase::load;
  const auto wanted = [&](const std::string& name) {
    if (!bucket.names.empty()) return bucket.names.count(name) > 0;
    return bucket.only.empty() || matches_any_prefix(name, bucket.only);
  };
  LoadEvent e;
  static_cast<PhaseEvent&>(e) = event(Phase::load);
  e.format = refit ? LoadFormat::checkpoint : scenario().load;
  e.refit = refit;
  e.bucket = bucket.name;
  std::unique_ptr<WeightStream> stream_source;
  RecordingStream::Reread reread;  // a written record read again from the file (one open per load)
  if (source.incoming) {
    for (const auto& name : source.incoming->names) {
      if (wanted(name)) e.expected.push_back(name);
    }
    e.source = source.incoming->source;
    stream_source = std::move(source.incoming->stream);
    if (!stream_source) throw UserError(fmt::format("{}: the transport gave no stream", e.source));
  } else if (source.tensors) {
    std::vector<NamedTensor> list;
    for (const auto& t : *source.tensors) {
      if (wanted(t.name)) list.push_back(t);
    }
    for (const auto& t : list) e.expected.push_back(t.name);
    e.source = source.label.empty() ? fmt::format("the weights the model holds (cycle {})", m_cycle) : source.label;
    stream_source = std::make_unique<TensorListWeightStream>(std::move(list), e.source);
  } else {
    std::unique_ptr<SafetensorsWeightStream> file;
    try {
      file = std::make_unique<SafetensorsWeightStream>(source.path, bucket.only, bucket.names,
                                                       source.generated ? StreamReads::mapped : StreamReads::copies);
      reread = reread_from_file(source.path);
    } catch (const safetensors::Error& e) {
      throw UserError(e.what());
    }
    e.source = file->source();
    for (const auto& info : file->file().tensors()) {
      if (wanted(info.name)) e.expected.push_back(info.name);
    }
    stream_source = std::move(file);
  }
  if (!bucket.only.empty() && e.expected.empty()) {
    const CycleStep* step = cycle_step(m_cycle);
    throw UserError(fmt::format("{}: {}{} streams only {} but no tensor of {} has "
                                "such a prefix: fix the prefixes",
                                step ? step->where : scenario().file,
                                step ? step->label : fmt::format("refit cycle {}", m_cycle),
                                bucket.name.empty() ? "" : fmt::format(" (bucket '{}')", bucket.name),
                                fmt::join(bucket.only, ", "), e.source));
  }
  begin(&Probe::on_load_begin, e);
  if (m_pass == Pass::census) census_fill(e);
  if (m_pass == Pass::poison && refit && first_of_refit && !scenario().poison.staged.empty()) {
    // A chunked reload stages per bucket and runs PWAL between them: the staged check is made
    // for refits staged once (the model's staging of later chunks is not known here).
    const CycleStep* step = cycle_step(m_cycle);
    if (step && !step->pwal_per_bucket) poison_fill(PoisonFillEvent::Kind::staged, *step);
  }
  RecordingStream stream(*stream_source, refit ? m_refit_weights : m_initial_weights, m_harness_seconds,
                         /*copy=*/source.tensors != nullptr || source.incoming != nullptr, std::move(reread),
                         refit ? &m_initial_weights : nullptr);
  const bool kernel_format = source.kernel_format || (source.incoming && !source.incoming->checkpoint_format);
  KernelLoad kernel_load;
  try {
    if (kernel_format) {
      kernel_load = load_kernel_format(stream, e);
    } else {
      e.loaded = call_model(Phase::load, "load_weights()", [&] { return m_model->load_weights(stream); });
    }
  } catch (const ModelFailure& failure) {
    (void)stream.finish();  // what was streamed before the failure stays on record
    if (!source.generated || !names_as_live(*m_model)) throw;
    // Note [Generated names]: a loader written for a checkpoint's own names (per-expert or q/k/v
    // shards, with the mapping kept inside load_weights()) meets the live names of a generated
    // checkpoint and fails in its own code; the failure says what the checkpoint holds.
    throw ModelFailure(failure.phase(),
                       fmt::format("{}\n(the checkpoint was generated by graphcheck under the live model's own names "
                                   "('{}'), since the model declares no checkpoint_mapping(); a loader written for "
                                   "the checkpoint's names, such as vLLM's stacked_params_mapping or "
                                   "expert_params_mapping inside load_weights(), needs checkpoint_mapping() to say "
                                   "how they map, or a checkpoint of its own: `checkpoint:` in the scenario)",
                                   failure.what(), e.expected.empty() ? std::string() : e.expected.front()));
  } catch (...) {
    (void)stream.finish();  // what was streamed before the failure stays on record
    throw;
  }
  // A loader that returned before its stream ended leaves the rest unread: named, and taken off
  // the transport here, so that the manifest is not blamed for it.
  std::vector<std::string> unread;
  if (source.incoming) {
    HarnessTime t(m_harness_seconds);
    while (auto item = stream_source->next()) unread.push_back(item->name);
  }
  e.streamed = stream.finish();
  if (!source.tensors && !source.incoming) release_record_pages();
  support::release_free_memory();  // the storage the loader replaced (Note [Freed memory stays resident])
  if (source.incoming) {
    m_driver.keep_received(m_cycle, e.streamed, kernel_format);
    check_transfer(e, kernel_load, unread, source.incoming->checkpoint_format);
  }
  m_skip_refit_pwal = m_skip_refit_pwal || kernel_format;
  for (const NamedTensor& t : e.streamed) {
    if (m_stream_order_seen.insert(t.name).second) m_stream_order.push_back(t.name);
  }
  // A kernel-format refit is copied by the protocol, not reported by load_weights(): what it
  // could not place is the transfer probe's to name.
  if (!kernel_format) check_loaded(stream.seen(), e.loaded, refit, e.source);
  end(&Probe::on_load_end, e);
  release_record_pages();  // the census reads the records as expected values
}

void PassRun::load_dummy() {
  m_phase = Phase::load;
  LoadEvent e;
  static_cast<PhaseEvent&>(e) = event(Phase::load);
  e.format = LoadFormat::dummy;
  e.source = fmt::format("dummy weights (seed {})", m_driver.seed());
  begin(&Probe::on_load_begin, e);
  if (m_pass == Pass::census) census_fill(e);
  call_model(Phase::load, "load_dummy_weights()", [&] {
    torch::NoGradGuard no_grad;
    m_model->load_dummy_weights(m_driver.seed());
    return 0;
  });
  for (const auto& t : graphcheck::checkpoint_tensors(*m_model)) e.loaded.insert(t.name);
  end(&Probe::on_load_end, e);
}

// Every checkpoint tensor must be streamed on the initial load, and every streamed tensor must be
// reported loaded, by its checkpoint name or by the live name it is stored in.
void PassRun::check_loaded(const std::set<std::string>& streamed, const std::set<std::string>& loaded,
                           bool refit, const std::string& source) {
  const std::vector<CheckpointEntry> layout = checkpoint_layout();
  if (!refit) {
    std::vector<std::string> missing;
    for (const auto& entry : layout) {
      if (!streamed.count(entry.checkpoint)) {
        missing.push_back(fmt::format("{} of shape {}", entry.describe(), shape_string(entry.region.sizes())));
      }
    }
    if (!missing.empty()) {
      const bool mapped = std::any_of(layout.begin(), layout.end(), [](const auto& e) { return e.sharded || e.live != e.checkpoint; });
      throw UserError(fmt::format(
          "{} lacks {} tensor{} of the model's checkpoint layout: {}{}; regenerate the checkpoint "
          "for this model config{}",
          source, missing.size(), missing.size() == 1 ? "" : "s",
          fmt::join(missing.begin(), missing.begin() + std::min<std::size_t>(missing.size(), 4), "; "),
          missing.size() > 4 ? fmt::format(" and {} more", missing.size() - 4) : "",
          mapped ? "" : ", or declare checkpoint_mapping() if the model fuses checkpoint tensors"));
    }
  }
  std::unordered_map<std::string_view, const std::string*> live_of;  // into `layout`
  live_of.reserve(layout.size());
  for (const auto& entry : layout) live_of.emplace(entry.checkpoint, &entry.live);
  for (const auto& name : streamed) {
    if (loaded.count(name)) continue;
    auto live = live_of.find(name);
    if (live != live_of.end() && loaded.count(*live->second)) continue;
    Finding f;
    f.probe = "driver";
    f.cycle = m_cycle;
    f.subject = name;
    f.message = fmt::format(
        "load_weights() consumed '{}' from {} but did not report it loaded: return every "
        "loaded name (live or checkpoint), or the weight is silently dropped",
        name, source);
    f.evidence = {{"tensor", live != live_of.end() ? *live->second : name}, {"checkpoint_name", name}};
    add_finding(std::move(f));
  }
}

void PassRun::pwal() {
  m_phase = Phase::pwal;
  PhaseEvent e = event(Phase::pwal);
  begin(&Probe::on_pwal_begin, e);
  call_model(Phase::pwal, "process_weights_after_loading()", [&] {
    torch::NoGradGuard no_grad;
    m_model->process_weights_after_loading();
    return 0;
  });
  end(&Probe::on_pwal_end, e);
  if (m_pass == Pass::idempotence) idempotence_check();
}

}  // namespace graphcheck::engine
