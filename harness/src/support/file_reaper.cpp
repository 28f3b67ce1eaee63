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

FileReaper::Aside::~Aside() {
  if (m_reaper != nullptr && !m_hidden.empty()) m_reaper->remove_in_background(m_hidden);
}

FileReaper::Aside FileReaper::set_aside(const fs::path& path) noexcept {
  try {
    std::error_code ec;
    if (!fs::is_regular_file(fs::symlink_status(path, ec))) return {};
    std::lock_guard lock(m_mutex);
    fs::path hidden = path.parent_path() / ("." + path.filename().string() + ".replaced-" +
                                            std::to_string(::getpid()) + "-" + std::to_string(m_count++));
    fs::create_hard_link(path, hidden, ec);
    if (ec) return {};  // no hard links here: the rename frees the file itself
    return {this, std::move(hidden)};
  } catch (...) {
    return {};
  }
}

void FileReaper::remove_in_background(const fs::path& hidden) noexcept {
  try {
    std::lock_guard lock(m_mutex);
    m_threads.emplace_back([hidden] {
      std::error_code ignored;
      fs::remove(hidden, ignored);
    });
  } catch (...) {
    std::error_code ignored;  // no thread: removed here
    fs::remove(hidden, ignored);
  }
}

}  // namespace graphcheck::support
