#pragma once
// The driver of one scenario (Driver): sets up the backend and the passes the checks need, runs
// each pass (engine/pass_run.h) and keeps the scenario's record, its timeline and what the
// passes share (generated checkpoints, noise floors). Its code lives in engine/driver.cpp.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/errors.h"
#include "graphcheck/engine/backend.h"
#include "graphcheck/engine/driver.h"
#include "graphcheck/hooks.h"
#include "graphcheck/model.h"
#include "graphcheck/probe.h"
#include "graphcheck/engine/record.h"
#include "graphcheck/engine/scenario.h"
#include "graphcheck/engine/transport.h"
#include "support/file_reaper.h"

namespace graphcheck::engine {

namespace fs = std::filesystem;

class PassRun;

// The distributed runner set_distributed_runner() installed; empty when none.
[[nodiscard]] DistributedRunner distributed_runner();

class Driver final : public HookSink {
 public:
  Driver(const Scenario& scenario, const RunOptions& options, ProgressListener* progress);

  ScenarioRecord run();

  // ---- shared by the passes -----------------------------------------------------------------
  [[nodiscard]] const Scenario& scenario() const { return m_scenario; }
  [[nodiscard]] GraphBackend& backend() { return *m_backend; }
  [[nodiscard]] std::uint64_t seed() const { return m_seed; }
  [[nodiscard]] ProgressListener* progress() { return m_progress; }
  [[nodiscard]] std::map<std::int64_t, double>& noise() { return m_noise; }
  // A rollout rank of a distributed scenario (Note [Distributed scenarios]): its place, its
  // transport, and the refits it received (in the observe pass; the later passes replay them).
  [[nodiscard]] const RankContext* rank() const { return m_options.rank.get(); }
  [[nodiscard]] RefitTransport* transport() { return m_options.transport.get(); }
  [[nodiscard]] const std::vector<NamedTensor>* received(int cycle) const {
    auto it = m_received.find(cycle);
    return it == m_received.end() ? nullptr : &it->second;
  }
  void keep_received(int cycle, std::vector<NamedTensor> tensors, bool kernel_format = false) {
    m_received[cycle] = std::move(tensors);
    m_received_kernel_format[cycle] = kernel_format;
    m_received_upto = std::max(m_received_upto, cycle);
  }
  [[nodiscard]] bool received_kernel_format(int cycle) const {
    auto it = m_received_kernel_format.find(cycle);
    return it != m_received_kernel_format.end() && it->second;
  }

  // Note [Model B's outputs across passes]: model B's outputs of the observe pass, kept for a
  // later pass of this run that asks B for the same cycle, batch size and inputs.
  [[nodiscard]] bool runs(Pass pass) const { return std::find(m_passes.begin(), m_passes.end(), pass) != m_passes.end(); }
  void keep_reference_outputs(int cycle, std::int64_t batch_size, const TensorList& inputs, const TensorList& outputs);
  // The outputs kept for this cycle and batch size, if their inputs equal `inputs`; else null.
  [[nodiscard]] const TensorList* kept_reference_outputs(int cycle, std::int64_t batch_size,
                                                         const TensorList& inputs) const;

  void add_finding(Finding finding, Pass pass, Phase phase);
  void add_measurement(Measurement m, Pass pass, Phase phase) {
    if (m.phase.empty()) m.phase = to_string(phase);
    if (m.pass.empty()) m.pass = to_string(pass);
    m_record.measurements.push_back(std::move(m));
  }

  // Synthesized by a freshly constructed model, so that the checkpoint layout does not depend on
  // what PWAL did to model A (repacked or freed raw weights). Written once per seed per scenario
  // run and shared by the passes. With `keep`: the model that synthesizes is `*keep`, constructed
  // if it is empty and left there for the caller's next seed (a fresh model's synthesis does not
  // change it, and a construction of a large model costs what its synthesis does).
  std::string checkpoint_for(std::uint64_t seed, PassRun& pass,
                             const std::function<std::unique_ptr<LifecycleModel>()>& construct,
                             std::unique_ptr<LifecycleModel>* keep = nullptr);

  // ---- HookSink -----------------------------------------------------------------------------
  void on_hook(const void* module, std::string_view hook) override;

  // The record's timeline (DESIGN §6: the Chrome trace and the HTML timing bars).
  std::size_t open_span(std::string pass, std::string phase, int cycle, std::int64_t batch_size);
  void close_span(std::size_t index) {
    Span& span = m_record.spans.at(index);
    span.seconds = std::chrono::duration<double>(Clock::now() - m_start).count() - span.start;
  }
  // Closes a span on every way out.
  class SpanScope {
   public:
    SpanScope(Driver& driver, std::size_t index) : m_driver(driver), m_index(index) {}
    SpanScope(const SpanScope&) = delete;
    SpanScope& operator=(const SpanScope&) = delete;
    ~SpanScope() { m_driver.close_span(m_index); }

   private:
    Driver& m_driver;
    std::size_t m_index;
  };

 private:
  void setup();

  // Runs one pass with fresh instances of the probes registered for it. Returns whether the
  // scenario goes on with the next pass.
  bool run_pass(Pass pass);

  // expect_error: the run stopped with the expected error; the scenario passes (other findings
  // made before it still count). Passes other than observe stop there quietly.
  bool stopped_as_expected(Pass pass, const PassRun& run, const std::string& message);

  void expected_error_missing(const PassRun& run);
  void drain_transport(Pass pass);

  const Scenario& m_scenario;
  RunOptions m_options;
  ProgressListener* m_progress;
  ScenarioRecord m_record;
  const Clock::time_point m_start = Clock::now();  // the scenario's, for its spans
  std::uint64_t m_seed = 1;
  fs::path m_work_dir;
  support::FileReaper m_reaper;  // Note [Replaced checkpoints go in the background]
  std::unique_ptr<GraphBackend> m_backend;
  std::vector<Pass> m_passes;
  std::map<std::uint64_t, std::string> m_checkpoints;
  std::map<std::int64_t, double> m_noise;
  struct KeptReference {
    TensorList inputs;
    TensorList outputs;
  };
  std::map<std::pair<int, std::int64_t>, KeptReference> m_reference_outputs;  // (cycle, batch size)
  std::map<int, std::vector<NamedTensor>> m_received;  // refit step -> what this rank received
  std::map<int, bool> m_received_kernel_format;        // refit step -> it came in the kernel format
  int m_received_upto = 0;
  bool m_drained = false;
  PassRun* m_current = nullptr;
};

}  // namespace graphcheck::engine
