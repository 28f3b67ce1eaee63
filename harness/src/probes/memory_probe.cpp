// memory: live bytes at every phase boundary and the peak inside each phase, from the backend's
// memory meter (CPU: a counting wrapper around libtorch's CPU allocator). Fails when
//  - an eager warm-up forward leaves allocations that outlive it (a lazy finalize in forward:
//    memory is not at steady state when profiling or capture happens),
//  - live bytes grow from one refit cycle to the next,
//  - a replay leaves allocations that outlive it.
// Tolerance: kToleranceBytes, reported with every verdict.

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "address_index.h"
#include "graphcheck/probe.h"

namespace graphcheck {
namespace {

constexpr std::int64_t kToleranceBytes = 0;

class MemoryProbe final : public EmptyProbe {
 public:
  [[nodiscard]] std::string name() const override { return "memory"; }

  void on_scenario_begin(RunContext& ctx) override {
    m_meter = &ctx.memory_meter();
    m_meter->start();
  }
  void on_scenario_end(RunContext& ctx) override {
    if (m_meter) m_meter->stop();
    m_meter = nullptr;
    Measurement m;
    m.tag = "gc/memory/tolerance_bytes";
    m.value = kToleranceBytes;
    m.unit = "bytes";
    m.phase = "scenario";
    ctx.add_measurement(std::move(m));
  }

  void on_construct_begin(RunContext&, const PhaseEvent&) override { push(); }
  void on_construct_end(RunContext& ctx, const PhaseEvent& e) override { pop(ctx, e); }
  void on_load_begin(RunContext&, const LoadEvent&) override { push(); }
  void on_load_end(RunContext& ctx, const LoadEvent& e) override { pop(ctx, e); }
  void on_pwal_begin(RunContext&, const PhaseEvent&) override { push(); }
  void on_pwal_end(RunContext& ctx, const PhaseEvent& e) override { pop(ctx, e); }
  void on_capture_begin(RunContext&, const CaptureEvent&) override { push(); }
  void on_capture_end(RunContext& ctx, const CaptureEvent& e) override { pop(ctx, e); }
  void on_compare_begin(RunContext&, const CompareEvent&) override { push(); }
  void on_compare_end(RunContext& ctx, const CompareEvent& e) override { pop(ctx, e); }
  void on_refit_begin(RunContext&, const PhaseEvent&) override { push(); }

  void on_warmup_begin(RunContext&, const PhaseEvent&) override { push(); }
  void on_warmup_end(RunContext& ctx, const PhaseEvent& e) override {
    const Frame f = pop(ctx, e);
    if (f.persistent > kToleranceBytes) {
      report(ctx, e, "eager forward",
             fmt::format("the eager forward at batch size {} left {} bytes allocated that outlive "
                         "it (tolerance {} bytes): a finalize ran lazily inside forward, so memory "
                         "is not at steady state when profiling or capture happens; run it in "
                         "process_weights_after_loading()",
                         e.batch_size, f.persistent, kToleranceBytes),
             f);
    }
  }

  void on_replay_begin(RunContext&, const ReplayEvent&) override { push(); }
  void on_replay_end(RunContext& ctx, const ReplayEvent& e) override {
    const Frame f = pop(ctx, e);
    if (f.persistent > kToleranceBytes) {
      report(ctx, e, "graph replay",
             fmt::format("replay of the graph for batch size {} left {} bytes allocated that "
                         "outlive it (tolerance {} bytes): a captured graph must not allocate",
                         e.batch_size, f.persistent, kToleranceBytes),
             f);
    }
  }

  void on_refit_end(RunContext& ctx, const PhaseEvent& e) override {
    const Frame f = pop(ctx, e);
    const std::int64_t live = f.live_end;
    // The first cycle is compared with the live bytes just before it.
    if (!m_last_refit_live) m_last_refit_live = f.live_begin;
    if (live - *m_last_refit_live > kToleranceBytes) {
      const std::int64_t growth = live - *m_last_refit_live;
      const Holders held = holders(ctx, f.moment);  // Note [What holds the bytes]
      std::vector<std::pair<std::string, std::string>> evidence = {
          {"growth_bytes", std::to_string(growth)},
          {"previous_cycle_live_bytes", std::to_string(*m_last_refit_live)},
          {"live_bytes", std::to_string(live)},
          {"tolerance_bytes", std::to_string(kToleranceBytes)}};
      if (!held.names.empty()) evidence.emplace_back("held_by", held.names);
      ctx.fail(name(), e, "live bytes across refit cycles",
               fmt::format("live CPU bytes grew by {} over refit cycle {} ({} -> {} bytes, "
                           "tolerance {}): something is allocated anew on every refit and the old "
                           "one is kept alive (often by a captured graph that still reads it){}",
                           growth, e.cycle, *m_last_refit_live, live, kToleranceBytes, held.text),
               std::move(evidence));
    }
    m_last_refit_live = live;
  }

 private:
  struct Frame {
    std::uint64_t moment = 0;
    std::int64_t live_begin = 0;
    std::int64_t peak = 0;
    std::int64_t live_end = 0;
    std::int64_t persistent = 0;  // allocated inside the phase, alive at its end
  };

  void push() {
    if (!m_meter) return;
    MemoryMeter& counter = *m_meter;
    if (!m_stack.empty()) m_stack.back().peak = std::max(m_stack.back().peak, counter.peak_bytes());
    counter.reset_peak();
    m_stack.push_back({counter.now(), counter.live_bytes(), counter.live_bytes(), 0, 0});
  }

  Frame pop(RunContext& ctx, const PhaseEvent& e) {
    if (!m_meter || m_stack.empty()) return {};
    MemoryMeter& counter = *m_meter;
    Frame f = m_stack.back();
    m_stack.pop_back();
    f.peak = std::max(f.peak, counter.peak_bytes());
    f.live_end = counter.live_bytes();
    f.persistent = counter.alive_since(f.moment);
    if (!m_stack.empty()) m_stack.back().peak = std::max(m_stack.back().peak, f.peak);
    counter.reset_peak();
    const std::string phase = to_string(e.phase);
    ctx.measure(e, fmt::format("gc/memory/{}/live_bytes", phase), f.live_end, "bytes");
    ctx.measure(e, fmt::format("gc/memory/{}/peak_bytes", phase), f.peak, "bytes");
    ctx.measure(e, fmt::format("gc/memory/{}/persistent_bytes", phase), f.persistent, "bytes");
    return f;
  }

  // Note [What holds the bytes]: the allocations a phase made that are still alive, each resolved
  // to the tensor of model A it lies in (parameters, buffers, and the tensors modules hold in
  // attributes, lists, dicts and closures), by name, largest first: the list a refit appends to,
  // the cache forward rebuilt. "" where the meter keeps no blocks (device statistics).
  struct Holders {
    std::string text;     // "; allocated in it and still alive: x (8192 bytes), ..."
    std::string names;    // "x, y"
  };
  Holders holders(RunContext& ctx, std::uint64_t moment) const {
    const std::vector<MemoryMeter::Block> blocks = m_meter->blocks_alive_since(moment);
    if (blocks.empty()) return {};
    const AddressIndex index(ctx.live_tensors());
    std::map<std::string, std::size_t> by_name;
    std::size_t elsewhere = 0;
    for (const MemoryMeter::Block& b : blocks) {
      const std::optional<AddressHit> hit = index.resolve(b.address, 0);
      if (hit) {
        by_name[hit->name] += b.bytes;
      } else {
        elsewhere += b.bytes;
      }
    }
    std::vector<std::pair<std::string, std::size_t>> held(by_name.begin(), by_name.end());
    std::stable_sort(held.begin(), held.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    constexpr std::size_t kShown = 4;
    std::vector<std::string> parts, names;
    for (std::size_t i = 0; i < held.size() && i < kShown; ++i) {
      parts.push_back(fmt::format("{} ({} bytes)", held[i].first, held[i].second));
      names.push_back(held[i].first);
    }
    if (held.size() > kShown) parts.push_back(fmt::format("{} more tensors", held.size() - kShown));
    if (elsewhere > 0) parts.push_back(fmt::format("{} bytes in no tensor model A holds", elsewhere));
    return {fmt::format("; allocated in it and still alive: {}", fmt::join(parts, ", ")),
            fmt::format("{}", fmt::join(names, ", "))};
  }

  void report(RunContext& ctx, const PhaseEvent& e, std::string subject, std::string message,
              const Frame& f) {
    const Holders held = holders(ctx, f.moment);
    std::vector<std::pair<std::string, std::string>> evidence = {
        {"persistent_bytes", std::to_string(f.persistent)},
        {"live_bytes_before", std::to_string(f.live_begin)},
        {"live_bytes_after", std::to_string(f.live_end)},
        {"peak_bytes", std::to_string(f.peak)},
        {"tolerance_bytes", std::to_string(kToleranceBytes)}};
    if (!held.names.empty()) evidence.emplace_back("held_by", held.names);
    ctx.fail(name(), e, std::move(subject), message + held.text, std::move(evidence));
  }

  MemoryMeter* m_meter = nullptr;
  std::vector<Frame> m_stack;
  std::optional<std::int64_t> m_last_refit_live;
};

}  // namespace

GRAPHCHECK_REGISTER_PROBE("memory",
                          "memory reaches steady state: no lazy allocation in forward, no growth "
                          "across refits, no allocation in replay",
                          MemoryProbe);

}  // namespace graphcheck
