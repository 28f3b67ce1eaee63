#pragma once
// Opening a user-named input file (a checkpoint, a scenario file) for reading. Torch-free,
// header-only: the safetensors reader and the scenario parser share it.
//
// Note [Special files are refused before open]
// open() on a FIFO blocks until a writer appears, and reading a character device such as
// /dev/zero never ends, so a parser that opens first and checks the file type afterwards hangs on
// such a path. open_regular_file() therefore stat()s first and refuses anything that is not a
// regular file (following symlinks), then opens with O_NONBLOCK (a FIFO swapped in after the stat
// cannot block the open) and O_CLOEXEC, and fstat()s the descriptor it got to check again.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

namespace graphcheck {

// What a file that is not a regular file is, for a message: "a directory", "a FIFO (named pipe)".
[[nodiscard]] inline std::string file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISREG(mode)) return "a regular file";
  return "a special file";
}

// A descriptor opened by open_regular_file, closed in the destructor. move-only.
class RegularFile {
 public:
  RegularFile() = default;
  // Takes ownership of fd.
  RegularFile(int fd, std::uint64_t size) : m_fd(fd), m_size(size) {}
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;
  RegularFile(RegularFile&& other) noexcept : m_fd(other.m_fd), m_size(other.m_size) {
    other.m_fd = -1;
  }
  RegularFile& operator=(RegularFile&& other) noexcept {
    if (this != &other) {
      close();
      m_fd = other.m_fd;
      m_size = other.m_size;
      other.m_fd = -1;
    }
    return *this;
  }
  ~RegularFile() { close(); }

  [[nodiscard]] int fd() const { return m_fd; }
  [[nodiscard]] std::uint64_t size() const { return m_size; }
  void close() {
    if (m_fd >= 0) ::close(m_fd);
    m_fd = -1;
  }
  // Gives up ownership of the descriptor and returns it.
  [[nodiscard]] int release() {
    const int fd = m_fd;
    m_fd = -1;
    return fd;
  }

 private:
  int m_fd = -1;
  std::uint64_t m_size = 0;
};

// Opens path read-only when it is a regular file (see the Note above). On failure returns a
// RegularFile whose fd() is -1 and sets `problem` to what went wrong, without the path:
// "cannot open for reading: No such file or directory", "is a FIFO (named pipe), not a regular
// file"; `not_regular`, when given, says which of the two it was. The file offset is 0; reads
// block normally on a regular file despite O_NONBLOCK.
[[nodiscard]] inline RegularFile open_regular_file(const std::string& path, std::string& problem,
                                                   bool* not_regular = nullptr) {
  if (not_regular != nullptr) *not_regular = false;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    problem = "cannot open for reading: " + std::string(std::strerror(errno));
    return {};
  }
  if (!S_ISREG(st.st_mode)) {
    problem = "is " + file_kind(st.st_mode) + ", not a regular file";
    if (not_regular != nullptr) *not_regular = true;
    return {};
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    problem = "cannot open for reading: " + std::string(std::strerror(errno));
    return {};
  }
  RegularFile file(fd, 0);
  if (::fstat(fd, &st) != 0) {
    problem = "cannot stat: " + std::string(std::strerror(errno));
    return {};
  }
  if (!S_ISREG(st.st_mode)) {  // replaced between stat() and open()
    problem = "is " + file_kind(st.st_mode) + ", not a regular file";
    if (not_regular != nullptr) *not_regular = true;
    return {};
  }
  return RegularFile(file.release(), static_cast<std::uint64_t>(st.st_size));
}

}  // namespace graphcheck
