#!/usr/bin/env bash
# Installs what graphcheck needs when it is missing; idempotent and quiet when all is present.
#
#   GRAPHCHECK_VENV   Python virtual environment holding libtorch (from the PyTorch wheel) and the
#                     test-only Python packages. Default: ~/.cache/graphcheck/venv (outside the
#                     clone, reused across clones).
#   Torch_DIR / CMAKE_PREFIX_PATH
#                     an existing libtorch the user points to wins: no torch is installed then.
#   GRAPHCHECK_TORCH_VERSION   default 2.13.0 (a CPU build).
set -euo pipefail

venv="${GRAPHCHECK_VENV:-$HOME/.cache/graphcheck/venv}"
torch_version="${GRAPHCHECK_TORCH_VERSION:-2.13.0}"

log() { printf 'ci/setup.sh: %s\n' "$*" >&2; }

# --- Debian packages -------------------------------------------------------------------------
packages=(g++ cmake ninja-build python3-venv googletest libgtest-dev libgmock-dev libbenchmark-dev
          libboost-test-dev libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libfmt-dev
          libxxhash-dev
          # Test environment only: the HTML report is opened in headless Chromium.
          chromium)
missing=()
for p in "${packages[@]}"; do
  # cmake may come from elsewhere (pip, pyenv); only install Debian's when none is on PATH.
  if [[ $p == cmake ]] && command -v cmake >/dev/null; then continue; fi
  if [[ $p == python3-venv ]] && python3 -c 'import venv, ensurepip' 2>/dev/null; then continue; fi
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  sudo=""; [[ $(id -u) == 0 ]] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

# --- libtorch ---------------------------------------------------------------------------------
user_torch=""
if [[ -n ${Torch_DIR:-} && -f ${Torch_DIR}/TorchConfig.cmake ]]; then user_torch="$Torch_DIR"; fi
if [[ -z $user_torch && -n ${CMAKE_PREFIX_PATH:-} ]]; then
  IFS=':;' read -ra prefixes <<<"$CMAKE_PREFIX_PATH"
  for p in "${prefixes[@]}"; do
    [[ -f $p/share/cmake/Torch/TorchConfig.cmake ]] && user_torch="$p" && break
  done
fi

if [[ ! -x $venv/bin/python ]]; then
  log "creating the Python virtual environment $venv"
  mkdir -p "$(dirname "$venv")"
  python3 -m venv "$venv"
fi
py="$venv/bin/python"
need=()
if [[ -z $user_torch ]]; then
  "$py" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$torch_version')" \
    2>/dev/null || need+=("torch==$torch_version")
fi
"$py" -c 'import safetensors' 2>/dev/null || need+=(safetensors)
"$py" -c 'import numpy' 2>/dev/null || need+=(numpy)
# Test environment only: the JSON reports are validated against reports/schema/.
"$py" -c 'import jsonschema' 2>/dev/null || need+=(jsonschema)
# The Python front's tests and its pytest plugin.
"$py" -c 'import pytest' 2>/dev/null || need+=(pytest)
if ((${#need[@]})); then
  log "installing into $venv: ${need[*]}"
  "$py" -m pip install -q --disable-pip-version-check "${need[@]}"
fi
# Test environment only: the Python front's transformers adapter (an optional dependency of the
# package) is tested on tiny models built offline. --no-deps and exact pins, so that pip never
# touches the pinned torch; these are transformers' runtime dependencies that torch does not bring.
hf_packages=(transformers==5.25.0 huggingface_hub==2.4.0 tokenizers==0.23.3 pyyaml==6.0.4
             regex==2026.11.19 tqdm==4.70.1 httpx2==2.16.2 httpcore2==2.16.2 h11==0.16.0 idna==3.20
             anyio==4.16.0 truststore==0.10.5 click==8.5.1 hf-xet==1.8.0 packaging safetensors)
if [[ -z $user_torch ]] && ! HF_HUB_OFFLINE=1 "$py" -c 'import transformers, transformers.models.llama' 2>/dev/null; then
  log "installing into $venv (--no-deps): ${hf_packages[*]}"
  "$py" -m pip install -q --disable-pip-version-check --no-deps "${hf_packages[@]}"
fi
if [[ -n $user_torch ]]; then
  log "using the libtorch you pointed to: $user_torch"
fi
