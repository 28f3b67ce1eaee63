// The reporters' plumbing: the mux, and the cumulative reporters' atomic write (one home:
// support/atomic_file.cpp).

#include "graphcheck/engine/reporter.h"

namespace graphcheck {

void ReporterMux::on_scenario_start(const Scenario& s, int index, int total) {
  for (auto& r : m_reporters) r->on_scenario_start(s, index, total);
}
void ReporterMux::on_phase(const std::string& phase, int cycle, std::int64_t batch_size) {
  for (auto& r : m_reporters) r->on_phase(phase, cycle, batch_size);
}
void ReporterMux::on_scenario_done(const ScenarioRecord& record) {
  for (auto& r : m_reporters) r->on_scenario_done(record);
}
void ReporterMux::on_run_done(const RunRecord& run) {
  for (auto& r : m_reporters) r->on_run_done(run);
}

void FileReporter::on_run_done(const RunRecord& run) { write_file_atomically(m_path, m_render(run)); }

}  // namespace graphcheck
