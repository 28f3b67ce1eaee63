#include "support/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "graphcheck/engine/reporter.h"

namespace graphcheck {

namespace fs = std::filesystem;

AtomicFile::AtomicFile(std::string target) : m_target(std::move(target)) {
  const fs::path t(m_target);
  const fs::path dir = t.has_parent_path() ? t.parent_path() : fs::path(".");
  // Unique among the processes (pid) and the writers of one process (counter) that write beside
  // the same target; O_EXCL makes a clash with a stray file a retry, not a shared file.
  static std::atomic<unsigned> counter{0};
  int err = 0;
  for (int attempt = 0; attempt < 100 && m_fd < 0; ++attempt) {
    m_temp = (dir / ("." + t.filename().string() + ".tmp." + std::to_string(::getpid()) + "." +
                     std::to_string(counter.fetch_add(1))))
                 .string();
    m_fd = ::open(m_temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    err = errno;
    if (m_fd < 0 && err != EEXIST) break;
  }
  if (m_fd < 0) {
    throw std::runtime_error("cannot create temporary file '" + m_temp + "': " + std::strerror(err) +
                             " (does the directory exist and is it writable?)");
  }
}

AtomicFile::~AtomicFile() {
  if (m_fd >= 0) ::close(m_fd);
  if (!m_committed) ::unlink(m_temp.c_str());
}

void AtomicFile::write(const void* data, std::size_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ::ssize_t written = ::write(m_fd, p, std::min<std::size_t>(n, std::size_t{1} << 30));
    if (written < 0) {
      const int err = errno;  // before anything below can change it
      if (err == EINTR) continue;
      throw std::runtime_error("cannot write temporary file '" + m_temp + "': " + std::strerror(err) +
                               (err == ENOSPC ? " (the disk is full)" : ""));
    }
    p += written;
    n -= static_cast<std::size_t>(written);
  }
}

void AtomicFile::commit(bool durable) {
  if (durable && ::fsync(m_fd) != 0) {
    const int err = errno;
    throw std::runtime_error("cannot fsync '" + m_temp + "': " + std::strerror(err));
  }
  const int fd = m_fd;
  m_fd = -1;
  if (::close(fd) != 0) {
    const int err = errno;
    throw std::runtime_error("cannot close '" + m_temp + "': " + std::strerror(err));
  }
  if (::rename(m_temp.c_str(), m_target.c_str()) != 0) {
    const int err = errno;
    throw std::runtime_error("cannot rename temporary file '" + m_temp + "' into place as '" + m_target +
                             "': " + std::strerror(err));
  }
  m_committed = true;
}

void write_file_atomically(const std::string& path, const std::string& content) {
  const fs::path target(path);
  std::error_code ec;
  if (target.has_parent_path()) fs::create_directories(target.parent_path(), ec);
  AtomicFile file(path);
  file.write(content.data(), content.size());
  file.commit();
}

}  // namespace graphcheck
