# shellcheck shell=bash
# cores: the CPU cores this process may use, for --parallel. Not plain nproc: GNU nproc answers
# OMP_NUM_THREADS (and OMP_THREAD_LIMIT) when they are set, and the CI scripts set
# OMP_NUM_THREADS=1 for the tests, which made every ctest run one test at a time.
cores() { env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc; }
