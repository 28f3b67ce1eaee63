#include "graphcheck/record.h"

#include <algorithm>

namespace graphcheck {

const char* to_string(Status status) {
  switch (status) {
    case Status::passed: return "passed";
    case Status::failed: return "failed";
    case Status::error: return "error";
    case Status::crashed: return "crashed";
    case Status::skipped: return "skipped";
  }
  return "unknown";
}

std::set<std::string> ScenarioRecord::failed_probes() const {
  std::set<std::string> probes;
  for (const auto& f : findings) probes.insert(f.probe);
  return probes;
}

int RunRecord::count(Status status) const {
  return static_cast<int>(std::count_if(scenarios.begin(), scenarios.end(),
                                        [&](const auto& s) { return s.status == status; }));
}

int RunRecord::exit_code() const {
  if (count(Status::crashed)) return 3;
  if (count(Status::error)) return 2;
  if (count(Status::failed)) return 1;
  return 0;
}

}  // namespace graphcheck
