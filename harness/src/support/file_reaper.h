#pragma once
// Frees the files the run replaces on threads of their own.
//
// Note [Replaced checkpoints go in the background]: every run writes its generated checkpoints
// under the same names (work/<scenario>/seed-N.safetensors), so a second run in one report dir
// (the local repro loop, --repeat, the bench) renames each new file over the last run's. The
// kernel then frees the old file's blocks and page cache inside that rename: 0.38 s for a file of
// 512 MiB on this machine's ext4 (issue 26: 0.65 s per checkpoint of the 10,000-tensor scale
// model against 0.27 s into an empty work dir). So before the rename the old file gets a second,
// hidden name beside it (a hard link): the rename then only drops the old name, the path holds a
// whole file at every moment (another process may be reading it: two runs of one scenario in one
// report dir, or ctest -j), and the hidden name is removed, freeing the file, while the run goes
// on. A run that dies before the removal leaves that name behind (".<name>.replaced-<pid>-<n>"),
// which nothing reads. Where the file system has no hard links, the rename frees the file itself.

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

  // The hidden second name of a file about to be replaced; removed on a thread of the reaper's
  // when the Aside ends (the replacement written, or failed). Empty (nothing to remove) where no
  // regular file was at the path or the link failed.
  class Aside {
   public:
    Aside() = default;
    Aside(FileReaper* reaper, std::filesystem::path hidden) : m_reaper(reaper), m_hidden(std::move(hidden)) {}
    ~Aside();
    Aside(Aside&& other) noexcept : m_reaper(other.m_reaper), m_hidden(std::move(other.m_hidden)) {
      other.m_reaper = nullptr;
    }
    Aside(const Aside&) = delete;
    Aside& operator=(const Aside&) = delete;
    Aside& operator=(Aside&&) = delete;
    [[nodiscard]] const std::filesystem::path& hidden() const { return m_hidden; }

   private:
    FileReaper* m_reaper = nullptr;
    std::filesystem::path m_hidden;
  };

  // Gives the file at `path` its hidden second name. Never throws.
  [[nodiscard]] Aside set_aside(const std::filesystem::path& path) noexcept;

 private:
  void remove_in_background(const std::filesystem::path& hidden) noexcept;
  std::mutex m_mutex;
  std::vector<std::thread> m_threads;
  unsigned m_count = 0;
};

}  // namespace graphcheck::support
