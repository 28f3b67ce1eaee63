#!/usr/bin/env bash
# The CUDA tree (issue 14): a second build against a CUDA build of libtorch that compiles and
# links every target (the cuda backend, the pointer audit, the CUPTI collector, the CUDA kernels
# and the GPU tests), then runs the whole CPU test suite with those binaries. No GPU is needed:
# the binaries link no libcuda (driver functions come from cudaGetDriverEntryPointByVersion), so
# they start without a driver, and the GPU tests skip with the reason.
#
#   GRAPHCHECK_CUDA_VENV        the virtual environment holding the CUDA torch; created and reused
#                               (default ~/.cache/graphcheck/venv-cuda)
#   GRAPHCHECK_CUDA_TORCH       the torch to install there (default 2.14.1, a CUDA 13.0 build)
#   GRAPHCHECK_CUDA_BUILD_DIR   the build tree (default build-cuda)
#   CUDA_TOOLKIT_ROOT_DIR       the CUDA toolkit (default /usr/local/cuda)
#   GRAPHCHECK_CUDA_TESTS=0     build only (the CPU suite takes as long as in the first CI stage)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=ci/lib/cores.sh
source ci/lib/cores.sh
t0=$SECONDS
me=ci/cuda-build.sh
say() { printf '%s: %s\n' "$me" "$*"; }

bash ci/setup.sh  # the Debian packages; the CPU venv is left as it is

venv="${GRAPHCHECK_CUDA_VENV:-$HOME/.cache/graphcheck/venv-cuda}"
torch_version="${GRAPHCHECK_CUDA_TORCH:-2.14.1}"
build_dir="${GRAPHCHECK_CUDA_BUILD_DIR:-build-cuda}"
toolkit="${CUDA_TOOLKIT_ROOT_DIR:-/usr/local/cuda}"

if [[ ! -x $toolkit/bin/nvcc ]]; then
  say "no CUDA toolkit at $toolkit (no $toolkit/bin/nvcc): install CUDA 13 there or set CUDA_TOOLKIT_ROOT_DIR"
  exit 2
fi

# --- the CUDA torch, in its own venv (reused when it holds the right version) ---------------
t_venv=$SECONDS
if [[ ! -x $venv/bin/python ]]; then
  say "creating $venv"
  mkdir -p "$(dirname "$venv")"
  python3 -m venv "$venv"
fi
py="$venv/bin/python"
need=()
"$py" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$torch_version' or torch.version.cuda is None)" \
  2>/dev/null || need+=("torch==$torch_version")
"$py" -c 'import safetensors' 2>/dev/null || need+=(safetensors)
"$py" -c 'import numpy' 2>/dev/null || need+=(numpy)
"$py" -c 'import jsonschema' 2>/dev/null || need+=(jsonschema)
if ((${#need[@]})); then
  say "installing into $venv: ${need[*]} (the CUDA torch is about 5.5 GB)"
  "$py" -m pip install -q --disable-pip-version-check "${need[@]}"
fi
say "venv ready in $((SECONDS - t_venv)) s: $("$py" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)')"

prefix=$("$py" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
nvrtc=$(ls "$site"/nvidia/cu*/lib/libnvrtc.so.* 2>/dev/null | grep -v builtins | grep -v alt | head -n1 || true)
if [[ -z $nvrtc ]]; then
  say "no libnvrtc in $site/nvidia/cu*/lib: is $venv's torch a CUDA build?"
  exit 2
fi

# --- configure and build every target -----------------------------------------------------
t_build=$SECONDS
generator=()
if [[ ! -f $build_dir/CMakeCache.txt ]] && command -v ninja >/dev/null; then generator=(-G Ninja); fi
cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE="${GRAPHCHECK_BUILD_TYPE:-Release}" \
  -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" \
  -DCMAKE_PREFIX_PATH="$prefix" -DGRAPHCHECK_PYTHON="$py" \
  -DGRAPHCHECK_CUDA=ON -DCUDA_TOOLKIT_ROOT_DIR="$toolkit" -DCUDA_nvrtc_LIBRARY="$nvrtc" >/dev/null
cmake --build "$build_dir" --parallel "$(cores)"
build_seconds=$((SECONDS - t_build))

# What was built, from ninja's dependency log: the objects nvcc compiled from .cu sources, and the
# C++ translation units that include libtorch's CUDA API (c10/cuda, ATen/cuda headers).
if [[ -f $build_dir/build.ninja ]]; then
  deps=$(ninja -C "$build_dir" -t deps 2>/dev/null)
  cu_objects=$(grep -cE '\.cu\.o: #deps' <<<"$deps" || true)
  objects=$(grep -cE ': #deps' <<<"$deps" || true)
  torch_cuda_tus=$(awk '/: #deps/ {obj = $1; next} obj != "" && /\/(c10|ATen)\/cuda\// {print obj; obj = ""}' <<<"$deps" |
    { grep -v '\.cu\.o:' || true; } | sort -u | wc -l)
  say "built: $objects objects; $cu_objects from .cu sources (nvcc; $(git ls-files '*.cu' | wc -l) in git), $torch_cuda_tus C++ translation units on libtorch's CUDA API (c10/cuda, ATen/cuda); build $build_seconds s"
else
  say "built in $build_seconds s (not Ninja: no object counts)"
fi

# No link-time libcuda anywhere: the binaries must start on a machine without a driver.
bad=0
while IFS= read -r f; do
  [[ -f $f && -x $f ]] || continue
  needed=$(readelf -d "$f" 2>/dev/null || true)
  if grep -q 'NEEDED.*libcuda\.so' <<<"$needed"; then
    say "$f links libcuda.so at link time: it would not start without a driver"
    bad=1
  fi
done < <(find "$build_dir" -type f \( -name '*.so' -o -name '*.so.*' -o -perm -u+x \) -not -path '*/CMakeFiles/*')
((bad == 0)) || exit 1

# --- the CPU test suite with the CUDA binaries ----------------------------------------------
# Every process that links the CUDA libtorch loads its ~2 GB of libraries at start, so the unit
# tests run one process per test binary (not ctest's one per test case: measured 1875 s that way
# against 433 s for the same tests in the CPU tree), and ctest runs the end-to-end tests of the
# CLI. Left to the CPU stage: the ones that only rerun the whole suite (sharding, the parallel
# rerun, the whole kill matrix) and the headless-Chromium checks of the HTML.
if [[ ${GRAPHCHECK_CUDA_TESTS:-1} != 0 ]]; then
  t_test=$SECONDS
  export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
  for bin in graphcheck_tests safetensors_tests report_tests cuda_kernels_tests cuda_backend_tests; do
    [[ -x $build_dir/tests/$bin ]] || continue
    say "$bin (one process)"
    (cd "$build_dir/tests" && "./$bin" --gtest_brief=1)
  done
  ctest --test-dir "$build_dir" --output-on-failure --parallel "$(cores)" \
    -R '^(e2e|adapter|hostile|reports)\.' \
    -E 'e2e\.mutants_all_caught|every_scenario_in_exactly_one_shard|merged_shards_give|suite_again_in_parallel|headless_chromium'
  say "CPU tests with the CUDA binaries passed in $((SECONDS - t_test)) s"
fi
say "done in $((SECONDS - t0)) s"
