#pragma once
// Hands the memory the process has freed back to the system, so that what one phase freed does
// not stay in the process's resident set for the rest of the run.
//
// Note [Freed memory stays resident]: glibc serves allocations under its mmap threshold (128 KiB,
// raised up to 32 MiB as large blocks are freed) from its heap arenas, and gives that memory back
// only from the top of the heap. A model of many small tensors (10,000 of 50 KiB) frees a
// checkpoint's worth of them after each synthesis and each model B, and without a trim the RSS
// kept all of it: the scale run's RSS stayed at its peak from the first refit to the end (bench/
// lifecycle_bench BM_PeakRss). malloc_trim(0) returns every free page of every arena.

#include <cstddef>

namespace graphcheck::support {

void release_free_memory();

// Asks the kernel to back the whole 2 MiB pages within [data, data + bytes) with transparent huge
// pages (madvise MADV_HUGEPAGE), for a large block about to be written whole: one fault per 2 MiB
// instead of one per 4 KiB. A hint only: nothing happens where the kernel has THP off, or off
// Linux.
void advise_huge_pages(void* data, std::size_t bytes) noexcept;

}  // namespace graphcheck::support
