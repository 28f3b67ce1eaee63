#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "graphcheck/reporter.h"

namespace graphcheck {

void write_file_atomically(const std::string& path, const std::string& content) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  std::error_code ec;
  if (target.has_parent_path()) fs::create_directories(target.parent_path(), ec);
  const fs::path tmp = target.string() + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) {
      throw std::runtime_error("cannot write '" + tmp.string() + "': " + std::strerror(errno) +
                               ": check that the directory is writable");
    }
    out << content;
    out.flush();
    if (!out) throw std::runtime_error("writing '" + tmp.string() + "' failed (disk full?)");
  }
  fs::rename(tmp, target, ec);
  if (ec) {
    fs::remove(tmp);
    throw std::runtime_error("cannot rename '" + tmp.string() + "' to '" + path + "': " + ec.message());
  }
}

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
