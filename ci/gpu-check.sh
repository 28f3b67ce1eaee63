#!/usr/bin/env bash
# One command for a machine with a CUDA GPU, PyTorch (a CUDA build, e.g. 2.11 + CUDA 13 for
# Python 3.12), nvcc, CMake and ninja, and no network: unpacks the Debian packages that
# ci/gpu-bundle.sh gathered (.cache/gpu-bundle/, carried along) into a private prefix with
# dpkg -x, configures graphcheck against the PyTorch install's CMake prefix, builds it, and runs
#   1. the GPU tests (ctest -L gpu: the CUDA kernels, every scenario on the cuda backend, the
#      audit's read sets, every mutation, the quantized ops against the CPU references),
#   2. the whole scenario suite with --backend cuda,
#   3. the kill matrix: graphcheck mutants scenarios/ --backend cuda,
# writing every report and log into one folder (GRAPHCHECK_GPU_OUT, default reports/gpu-check),
# with summary.txt: versions, device, each step's exit code and time. Sized for under 8 minutes
# on one H200. Exit: the highest step's exit code (2: the machine lacks something, named).
#
# Where one command may run 10 minutes at most (the device tool), run it as two calls on the same
# machine, the second while the first's build tree is still there, each within 10 minutes by its
# steps' limits with a minute to spare (configure 100 s + build 420 s; GPU tests 220 s + suite
# 130 s + kill matrix 170 s; each step killed 10 s after its limit); the second adds its lines to
# the first's summary.txt:
#   GRAPHCHECK_GPU_ONLY_BUILD=1 bash ci/gpu-check.sh     # configure and build
#   GRAPHCHECK_GPU_SKIP_BUILD=1 bash ci/gpu-check.sh     # the three GPU steps on that build
#
#   PYTHON                      the Python whose torch is used (default python3)
#   GRAPHCHECK_GPU_BUNDLE       the bundle (default .cache/gpu-bundle)
#   GRAPHCHECK_GPU_BUILD_DIR    the build tree (default build-gpu)
#   GRAPHCHECK_GPU_JOBS         parallel scenario processes (default 4)
#   GRAPHCHECK_GPU_ONLY_BUILD=1 configure and build only (what a machine without a GPU can check)
#   GRAPHCHECK_GPU_TARGETS      build these ninja targets instead of all (with ONLY_BUILD: a quick
#                               check that the bundle's headers and libraries are the ones used)
#   GRAPHCHECK_GPU_SKIP_BUILD=1 run the GPU steps on the build tree an earlier call built (exit 2
#                               naming it where there is none)
set -uo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=ci/lib/cores.sh
source ci/lib/cores.sh
me=ci/gpu-check.sh
t0=$SECONDS
out="${GRAPHCHECK_GPU_OUT:-reports/gpu-check}"
bundle="${GRAPHCHECK_GPU_BUNDLE:-.cache/gpu-bundle}"
build_dir="${GRAPHCHECK_GPU_BUILD_DIR:-build-gpu}"
py="${PYTHON:-python3}"
jobs="${GRAPHCHECK_GPU_JOBS:-4}"
mkdir -p "$out"
out=$(cd "$out" && pwd)
summary="$out/summary.txt"
if [[ ${GRAPHCHECK_GPU_SKIP_BUILD:-0} == 1 && ${GRAPHCHECK_GPU_ONLY_BUILD:-0} == 1 ]]; then
  echo "$me: GRAPHCHECK_GPU_ONLY_BUILD=1 and GRAPHCHECK_GPU_SKIP_BUILD=1 together would do nothing: set one" | tee "$summary"
  exit 2
fi
[[ ${GRAPHCHECK_GPU_SKIP_BUILD:-0} == 1 ]] || : >"$summary"  # the second call adds to the first's
say() { printf '%s: %s\n' "$me" "$*" | tee -a "$summary"; }
die() { say "$*"; exit 2; }

# --- what the machine has ------------------------------------------------------------------
for tool in cmake ninja dpkg "$py"; do
  command -v "$tool" >/dev/null || die "no $tool on PATH: this script needs $tool"
done
nvcc_bin=$(command -v nvcc || true)
if [[ -z $nvcc_bin ]]; then
  for d in "${CUDA_HOME:-}" /usr/local/cuda; do [[ -n $d && -x $d/bin/nvcc ]] && nvcc_bin=$d/bin/nvcc && break; done
fi
[[ -n $nvcc_bin ]] || die "no nvcc on PATH, in CUDA_HOME or /usr/local/cuda: install the CUDA toolkit"
toolkit="${CUDA_TOOLKIT_ROOT_DIR:-}"
if [[ -z $toolkit ]]; then
  toolkit=$(cd "$(dirname "$(readlink -f "$nvcc_bin")")/.." && pwd)
  # A wrapper script (as /usr/local/bin/nvcc on some machines) does not lead to the toolkit.
  [[ -f $toolkit/include/cuda_runtime.h ]] || toolkit=/usr/local/cuda
fi
[[ -f $toolkit/include/cuda_runtime.h ]] || die "no CUDA toolkit headers at $toolkit: set CUDA_TOOLKIT_ROOT_DIR"
info=$("$py" -c 'import torch, torch.utils, sysconfig
print(torch.__version__); print(torch.version.cuda); print(torch.utils.cmake_prefix_path)
print(sysconfig.get_paths()["purelib"]); print(torch.cuda.is_available())
print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")' 2>"$out/python.log") ||
  die "$py cannot import torch (see $out/python.log): set PYTHON to the Python that has PyTorch"
{ read -r torch_version; read -r torch_cuda; read -r torch_prefix; read -r site; read -r has_gpu; read -r gpu_name; } <<<"$info"
[[ $torch_cuda != None ]] || die "torch $torch_version is a CPU build: a CUDA build of PyTorch is needed"
nvrtc=$(ls "$site"/nvidia/cu*/lib/libnvrtc.so.* "$toolkit"/lib64/libnvrtc.so.* 2>/dev/null | grep -v -e builtins -e alt | head -n1 || true)
say "torch $torch_version (CUDA $torch_cuda) at $torch_prefix; nvcc $("$nvcc_bin" --version | grep -o 'release [0-9.]*'); toolkit $toolkit; GPU: $gpu_name"
nvidia-smi >"$out/nvidia-smi.txt" 2>&1 || true

# --- the bundle, unpacked into a private prefix ---------------------------------------------
ls "$bundle"/*.deb >/dev/null 2>&1 || die "no .deb files in $bundle: run bash ci/gpu-bundle.sh on a build machine with network and bring $bundle along"
prefix="$(cd "$bundle" && pwd)/prefix"
if [[ ! -f $prefix/.unpacked ]]; then
  rm -rf "$prefix"
  for deb in "$bundle"/*.deb; do dpkg -x "$deb" "$prefix" || die "dpkg -x $deb failed"; done
  touch "$prefix/.unpacked"
fi
multiarch=$(ls -d "$prefix"/usr/lib/*-linux-gnu 2>/dev/null | head -n1)
export PATH="$prefix/usr/bin:$PATH"
export LD_LIBRARY_PATH="$multiarch${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PKG_CONFIG_PATH="$multiarch/pkgconfig:$prefix/usr/share/pkgconfig"
export PKG_CONFIG_LIBDIR="$PKG_CONFIG_PATH"
export PKG_CONFIG_SYSROOT_DIR="$prefix"  # the .pc files say prefix=/usr
# -I/usr/include is a "system" flag pkgconf would drop; under the sysroot it is the bundle's.
export PKG_CONFIG_ALLOW_SYSTEM_CFLAGS=1 PKG_CONFIG_ALLOW_SYSTEM_LIBS=1
pkgconf=$(command -v pkgconf || command -v pkg-config || true)

# --- configure and build ------------------------------------------------------------------
step_names=() step_codes=() step_times=()
step() {
  local name=$1 limit=$2 t=$SECONDS rc=0
  shift 2
  say "--- $name: $*"
  timeout --kill-after=10 "$limit" "$@" >"$out/$name.log" 2>&1 || rc=$?
  step_names+=("$name") step_codes+=("$rc") step_times+=("$((SECONDS - t))")
  say "$name: exit $rc in $((SECONDS - t)) s (log: $out/$name.log)"
  tail -n 5 "$out/$name.log" | sed 's/^/    /' | tee -a "$summary"
  return $rc
}
configure=(cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release
  "-DCMAKE_PREFIX_PATH=$torch_prefix;$prefix/usr"
  -DGRAPHCHECK_CUDA=ON -DGRAPHCHECK_BUILD_BENCHMARKS=OFF "-DGRAPHCHECK_PYTHON=$(command -v "$py")"
  "-DCUDA_TOOLKIT_ROOT_DIR=$toolkit" "-DCMAKE_CUDA_COMPILER=$toolkit/bin/nvcc")
[[ -n $nvrtc ]] && configure+=("-DCUDA_nvrtc_LIBRARY=$nvrtc")
[[ -n $pkgconf ]] && configure+=("-DPKG_CONFIG_EXECUTABLE=$pkgconf")
# Only the bundle's packages, never a half-installed system copy.
configure+=("-DCMAKE_IGNORE_PREFIX_PATH=/usr;/usr/local")
if [[ ${GRAPHCHECK_GPU_SKIP_BUILD:-0} == 1 ]]; then
  [[ -x $build_dir/bin/graphcheck && -f $build_dir/CTestTestfile.cmake ]] ||
    die "GRAPHCHECK_GPU_SKIP_BUILD=1, but $build_dir holds no built tree (no bin/graphcheck or CTestTestfile.cmake): run GRAPHCHECK_GPU_ONLY_BUILD=1 bash ci/gpu-check.sh first, on this machine"
  say "the build tree of an earlier call: $build_dir"
else
  step configure 100 "${configure[@]}" || die "configure failed: see $out/configure.log"
  read -ra targets <<<"${GRAPHCHECK_GPU_TARGETS:-}"
  step build 420 cmake --build "$build_dir" --parallel "$(cores)" ${targets[@]:+--target "${targets[@]}"} ||
    die "build failed: see $out/build.log"
fi
if [[ ${GRAPHCHECK_GPU_ONLY_BUILD:-0} == 1 ]]; then
  say "built only (GRAPHCHECK_GPU_ONLY_BUILD=1) in $((SECONDS - t0)) s"
  exit 0
fi
[[ $has_gpu == True ]] || die "torch sees no CUDA device (torch.cuda.is_available() is False): run this on a GPU machine"

# --- on the GPU -----------------------------------------------------------------------------
gc="$build_dir/bin/graphcheck"
export OMP_NUM_THREADS=1
# The kill matrix (step 3) runs every mutation on cuda: its GPU tests (EveryMutationIsCaught)
# would run them a second time, so they are left to GRAPHCHECK_GPU_ALL_TESTS=1.
exclude=(-E 'EveryMutationIsCaught')
[[ ${GRAPHCHECK_GPU_ALL_TESTS:-0} == 1 ]] && exclude=()
step gpu-tests 220 ctest --test-dir "$build_dir" -L gpu "${exclude[@]}" --output-on-failure \
  --parallel "$jobs" --output-junit "$out/gpu-tests.junit.xml"
step run 130 "$gc" run scenarios/ --backend cuda -j "$jobs" --report-dir "$out/run"
step mutants 170 "$gc" mutants scenarios/ --backend cuda -j "$jobs" --report-dir "$out/mutants"

status=0
for i in "${!step_names[@]}"; do
  printf '%-10s exit %-3s %4s s\n' "${step_names[$i]}" "${step_codes[$i]}" "${step_times[$i]}" | tee -a "$summary"
  ((step_codes[i] > status)) && status=${step_codes[i]}
done
say "done in $((SECONDS - t0)) s, exit $status; every report and log in $out"
exit "$status"
