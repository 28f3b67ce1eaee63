#pragma once
// Writing a file atomically: the bytes go to a temporary file of a unique name in the target's
// directory, which replaces the target by rename() only when all of them are written (and, when
// asked, fsync'ed), so that a reader sees the old file or the whole new one, never a torn one;
// the temporary file is removed on any failure. The one home of this for the reports and for the
// checkpoints graphcheck writes. Torch-free.

#include <cstddef>
#include <string>

namespace graphcheck {

class AtomicFile {
 public:
  // Creates the temporary file beside `target`. Throws std::runtime_error naming it, when it
  // cannot be created.
  explicit AtomicFile(std::string target);
  ~AtomicFile();  // removes the temporary file unless commit() succeeded
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Appends bytes; throws std::runtime_error naming the temporary file (disk full, ...).
  void write(const void* data, std::size_t bytes);
  // fsync (when `durable`: survives a power cut, at a cost), close, and rename over the target.
  // Throws std::runtime_error naming the file and the step that failed.
  void commit(bool durable = false);

  [[nodiscard]] const std::string& temp_path() const { return m_temp; }

 private:
  std::string m_target;
  std::string m_temp;
  int m_fd = -1;
  bool m_committed = false;
};

// write_file_atomically (graphcheck/engine/reporter.h) writes a whole string with it.

}  // namespace graphcheck
