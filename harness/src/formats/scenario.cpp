// Scenario files as a whole: reading one (read_scenario_text, with the limits of Note [Scenario
// file limits] in scenario_parser.h), parse_scenario_text/parse_scenario_file over the Parser,
// collect_scenario_files, and the small Scenario helpers. Torch-free.

#include "graphcheck/engine/scenario.h"

#include <fmt/format.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "formats/scenario_parser.h"
#include "regular_file.h"

namespace graphcheck {

const char* to_string(LoadFormat format) {
  return format == LoadFormat::checkpoint ? "checkpoint" : "dummy";
}

const char* to_string(DistributedSpec::Transfer transfer) {
  return transfer == DistributedSpec::Transfer::packed ? "packed" : "per_tensor";
}

bool DistributedSpec::colocated() const {
  return std::find(rollout.begin(), rollout.end(), trainer) != rollout.end();
}

int DistributedSpec::tp_rank(int rank) const {
  const auto it = std::find(rollout.begin(), rollout.end(), rank);
  return it == rollout.end() ? -1 : static_cast<int>(it - rollout.begin());
}

namespace {

namespace fs = std::filesystem;

using scenario_parser::k_max_scenario_bytes;

// Reads a scenario file, refusing FIFOs, directories and devices before opening them (see Note
// [Special files are refused before open] in regular_file.h) and files over the size limit
// before reading them.
std::string read_scenario_text(const std::string& path) {
  std::string problem;
  bool not_regular = false;
  RegularFile file = open_regular_file(path, problem, &not_regular);
  if (not_regular) {
    throw ScenarioError(fmt::format(
        "{}: cannot read the scenario file: it {}; give a regular *.yaml file (a directory given "
        "to `graphcheck run` is searched for them)",
        path, problem));
  }
  if (file.fd() < 0) {
    throw ScenarioError(
        fmt::format("{}: cannot read the scenario file ({}): check the path", path, problem));
  }
  if (file.size() > k_max_scenario_bytes) {
    throw ScenarioError(fmt::format(
        "{}: the scenario file is {} bytes, over the {}-byte limit on scenario files (a scenario "
        "takes a few hundred bytes): is this the right file?",
        path, file.size(), k_max_scenario_bytes));
  }
  std::string text(static_cast<std::size_t>(file.size()), '\0');
  std::size_t filled = 0;
  // Read until EOF, one byte past the limit at most (the file may have grown since fstat).
  for (;;) {
    if (filled == text.size()) {
      if (text.size() > k_max_scenario_bytes) break;
      text.resize(std::min(text.size() + 4096, k_max_scenario_bytes + 1));
    }
    const ::ssize_t got = ::read(file.fd(), text.data() + filled, text.size() - filled);
    if (got < 0) {
      if (errno == EINTR) continue;
      throw ScenarioError(fmt::format("{}: cannot read the scenario file ({}): check the path",
                                      path, std::strerror(errno)));
    }
    if (got == 0) break;
    filled += static_cast<std::size_t>(got);
  }
  text.resize(filled);
  return text;
}

}  // namespace

const char* to_string(CycleKind kind) {
  switch (kind) {
    case CycleKind::refit: return "refit";
    case CycleKind::reload: return "reload";
    case CycleKind::sleep: return "sleep";
  }
  return "unknown";
}

std::vector<std::string> RefitSpec::prefixes() const {
  if (buckets.empty()) return only;
  std::vector<std::string> all;
  for (const auto& b : buckets) all.insert(all.end(), b.only.begin(), b.only.end());
  return all;
}

Scenario parse_scenario_text(const std::string& text, const std::string& path,
                             const ScenarioCatalog& catalog) {
  return scenario_parser::Parser(path, text, catalog).parse();
}

Scenario parse_scenario_file(const std::string& path, const ScenarioCatalog& catalog) {
  const std::string text = read_scenario_text(path);
  return parse_scenario_text(text, path, catalog);
}

std::vector<std::string> collect_scenario_files(const std::vector<std::string>& paths) {
  // ::stat, not open: a FIFO must not be opened (see regular_file.h).
  const auto not_a_scenario = [](const std::string& path, mode_t mode) {
    return ScenarioError(fmt::format(
        "{}: is {}, not a scenario file: scenario files must be regular *.yaml files", path,
        file_kind(mode)));
  };
  std::vector<std::string> files;
  for (const auto& path : paths) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      if (errno == ENOENT || errno == ENOTDIR) {
        throw ScenarioError(fmt::format("{}: no such scenario file or directory", path));
      }
      throw ScenarioError(fmt::format("{}: cannot read: {}", path, std::strerror(errno)));
    }
    if (S_ISDIR(st.st_mode)) {
      std::error_code ec;
      std::vector<std::string> found;
      fs::recursive_directory_iterator it(path, ec), end;
      if (ec) throw ScenarioError(fmt::format("{}: cannot read the directory: {}", path, ec.message()));
      for (; it != end; it.increment(ec)) {
        if (ec) throw ScenarioError(fmt::format("{}: cannot read the directory: {}", path, ec.message()));
        const auto& entry = *it;
        const auto ext = entry.path().extension();
        if (ext != ".yaml" && ext != ".yml") continue;
        struct stat entry_st {};
        if (::stat(entry.path().c_str(), &entry_st) != 0) continue;  // e.g. a dangling symlink
        if (S_ISREG(entry_st.st_mode)) {
          found.push_back(entry.path().string());
        } else if (!S_ISDIR(entry_st.st_mode)) {
          throw not_a_scenario(entry.path().string(), entry_st.st_mode);
        }
      }
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else if (S_ISREG(st.st_mode)) {
      files.push_back(path);
    } else {
      throw not_a_scenario(path, st.st_mode);
    }
  }
  return files;
}

}  // namespace graphcheck
