#!/usr/bin/env bash
# Builds graphcheck's libFuzzer targets (fuzz/: the safetensors reader and the scenario parser,
# without libtorch) with clang and ASan + UBSan, then runs each for GRAPHCHECK_FUZZ_SECONDS.
# Exits non-zero on any crash, sanitizer report, timeout (an input slower than 10 s), leak or
# out-of-memory (over 2 GiB); the reproducer is left in the build directory's artifacts/.
#
#   GRAPHCHECK_FUZZ_SECONDS    seconds per target (default 60)
#   GRAPHCHECK_FUZZ_BUILD_DIR  build directory (default build-fuzz, relative to the repository)
#   GRAPHCHECK_FUZZ_JOBS       compile jobs (default 1)
#
# Installs what is missing with apt-get (Debian 12: clang, libclang-rt-14-dev for the libFuzzer
# runtime, cmake, libyaml-cpp-dev, libfmt-dev, nlohmann-json3-dev), with sudo when not root.
# The seed corpora in fuzz/corpus/ are copied into the build directory, so the tree stays clean.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
seconds=${GRAPHCHECK_FUZZ_SECONDS:-60}
jobs=${GRAPHCHECK_FUZZ_JOBS:-1}
build=${GRAPHCHECK_FUZZ_BUILD_DIR:-build-fuzz}
[[ $build = /* ]] || build=$root/$build

say() { printf 'fuzz: %s\n' "$*"; }

sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
apt_install() {
  say "installing $*"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get install -y --no-install-recommends "$@" ||
    { "${sudo_cmd[@]}" apt-get update && "${sudo_cmd[@]}" apt-get install -y --no-install-recommends "$@"; }
}

# ---- toolchain and libraries -------------------------------------------------------------------
missing=()
command -v clang++ >/dev/null || missing+=(clang)
command -v cmake >/dev/null || missing+=(cmake)
[[ -f /usr/include/yaml-cpp/yaml.h ]] || missing+=(libyaml-cpp-dev)
[[ -f /usr/include/fmt/format.h ]] || missing+=(libfmt-dev)
[[ -f /usr/include/nlohmann/json.hpp ]] || missing+=(nlohmann-json3-dev)
if ((${#missing[@]})); then apt_install "${missing[@]}"; fi

# libFuzzer's runtime is not in Debian's clang package: it comes with libclang-rt-<major>-dev.
probe_dir=$(mktemp -d)
trap 'rm -rf "$probe_dir"' EXIT
printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' \
  >"$probe_dir/probe.cpp"
if ! clang++ -fsanitize=fuzzer,address,undefined "$probe_dir/probe.cpp" -o "$probe_dir/probe" 2>/dev/null; then
  major=$(clang++ -dumpversion | cut -d. -f1)
  apt_install "libclang-rt-${major}-dev"
  clang++ -fsanitize=fuzzer,address,undefined "$probe_dir/probe.cpp" -o "$probe_dir/probe" ||
    { say "clang++ cannot link a libFuzzer target even with libclang-rt-${major}-dev"; exit 2; }
fi

# ---- build ----------------------------------------------------------------------------------
say "configuring $root/fuzz into $build"
cmake -S "$root/fuzz" -B "$build" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" --parallel "$jobs"

# ---- run ------------------------------------------------------------------------------------
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_stack_use_after_return=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
summary=()
for target in safetensors scenario; do
  corpus=$build/corpus/$target
  artifacts=$build/artifacts/$target
  rm -rf "$corpus" "$artifacts"
  mkdir -p "$corpus" "$artifacts"
  cp "$root/fuzz/corpus/$target/." "$corpus/" -R
  log=$build/$target.log
  say "running ${target}_fuzz for ${seconds} s (log: $log)"
  rc=0
  "$build/${target}_fuzz" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -detect_leaks=1 \
    -max_len=16384 -dict="$root/fuzz/$target.dict" -artifact_prefix="$artifacts/" -print_final_stats=1 \
    "$corpus" >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)
  units=$(find "$corpus" -type f | wc -l)
  findings=$(find "$artifacts" -type f | wc -l)
  summary+=("${target}_fuzz: exit ${rc}, ${execs:-?} executions in ${seconds} s, corpus ${units} inputs, ${findings} findings")
  if ((rc != 0 || findings != 0)); then
    status=1
    say "${target}_fuzz FAILED (exit $rc); the end of its log:"
    tail -n 60 "$log"
    ls -l "$artifacts"
  fi
done
for line in "${summary[@]}"; do say "$line"; done
exit "$status"
