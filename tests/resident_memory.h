#pragma once
// The resident set of one mapping of this process, for tests of released pages (Note [Released
// pages]). Torch-free.

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

namespace graphcheck::testing {

// Kilobytes of the process's resident set in the mapping that holds `address` (/proc/self/smaps);
// -1 when no mapping holds it.
inline std::int64_t resident_kb_of_map(const void* address) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<std::uintptr_t>(address);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long begin = 0, end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &begin, &end) == 2 && line.find('-') < line.find(' ')) {
      inside = begin <= at && at < end;
    } else if (inside && line.rfind("Rss:", 0) == 0) {
      return std::stoll(line.substr(4));
    }
  }
  return -1;
}

// Kilobytes of the process's resident set in the mappings of the file at `path` (as /proc names
// it: an absolute path); 0 when none maps it.
inline std::int64_t resident_kb_of_file(const std::string& path) {
  std::ifstream smaps("/proc/self/smaps");
  std::int64_t kb = 0;
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long begin = 0, end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &begin, &end) == 2 && line.find('-') < line.find(' ')) {
      inside = line.size() >= path.size() && line.compare(line.size() - path.size(), path.size(), path) == 0;
    } else if (inside && line.rfind("Rss:", 0) == 0) {
      kb += std::stoll(line.substr(4));
    }
  }
  return kb;
}

}  // namespace graphcheck::testing
