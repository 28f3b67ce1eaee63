#include "support/file_reaper.h"

#include <unistd.h>

#include <string>
#include <system_error>

namespace graphcheck::support {

namespace fs = std::filesystem;

FileReaper::~FileReaper() {
  for (auto& t : m_threads) {
    if (t.joinable()) t.join();
  }
}

bool FileReaper::retire(const fs::path& path) noexcept {
  try {
    std::error_code ec;
    if (!fs::is_regular_file(fs::symlink_status(path, ec))) return false;
    std::lock_guard lock(m_mutex);
    const fs::path hidden = path.parent_path() / ("." + path.filename().string() + ".replaced-" +
                                                  std::to_string(::getpid()) + "-" + std::to_string(m_count++));
    fs::rename(path, hidden, ec);
    if (ec) return false;
    m_threads.emplace_back([hidden] {
      std::error_code ignored;
      fs::remove(hidden, ignored);
    });
    return true;
  } catch (...) {
    return false;  // no thread (or no memory for the name): the caller's rename replaces the file
  }
}

}  // namespace graphcheck::support
