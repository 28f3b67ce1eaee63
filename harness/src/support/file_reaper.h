#pragma once
// Removes files the run replaces, on threads of their own.
//
// Note [Replaced checkpoints go in the background]: every run writes its generated checkpoints
// under the same names (work/<scenario>/seed-N.safetensors), so a second run in one report dir
// (the local repro loop, --repeat, the bench) renames each new file over the last run's. The
// kernel then frees the old file's blocks and page cache inside that rename: 0.38 s for a file of
// 512 MiB on this machine's ext4 (issue 26: 0.65 s per checkpoint of the 10,000-tensor scale
// model against 0.27 s into an empty work dir). So the old file is first moved to a hidden name
// beside it, and removed while the run goes on. A run that dies before the removal leaves that
// file behind (".<name>.replaced-<pid>-<n>"), which nothing reads.

#include <filesystem>
#include <mutex>
#include <thread>
#include <vector>

namespace graphcheck::support {

class FileReaper {
 public:
  FileReaper() = default;
  ~FileReaper();  // waits for every removal it started
  FileReaper(const FileReaper&) = delete;
  FileReaper& operator=(const FileReaper&) = delete;

  // Moves `path` to a hidden name in its directory at once and removes it on a thread of its own.
  // Returns whether it did: false where nothing is at `path`, or the move failed (the caller's
  // write then replaces the file as it would have). Never throws.
  bool retire(const std::filesystem::path& path) noexcept;

 private:
  std::mutex m_mutex;
  std::vector<std::thread> m_threads;
  unsigned m_count = 0;
};

}  // namespace graphcheck::support
