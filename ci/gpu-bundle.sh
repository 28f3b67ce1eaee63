#!/usr/bin/env bash
# Run on a build machine with network (Debian 12, apt): gathers the Debian -dev packages the CUDA
# tree needs into .cache/gpu-bundle/ (ignored by git), for ci/gpu-check.sh on a GPU machine that
# has PyTorch, nvcc, CMake and ninja but none of these packages and no network. The bundle is
# the .deb files only (a few MB): gpu-check.sh unpacks them with dpkg -x into a private prefix.
# Not bundled: fmt (libtorch's own headers are used), Google Benchmark (gpu-check.sh builds
# without the benchmarks) and Boost.Test (its adapter is optional).
set -euo pipefail
cd "$(dirname "$0")/.."
me=ci/gpu-bundle.sh
bundle="${GRAPHCHECK_GPU_BUNDLE:-.cache/gpu-bundle}"
packages=(libgtest-dev googletest libgmock-dev libyaml-cpp-dev libyaml-cpp0.7 nlohmann-json3-dev
          libcli11-dev libxxhash-dev libxxhash0 pkgconf pkgconf-bin libpkgconf3 pkg-config)
if ! command -v apt-get >/dev/null; then
  echo "$me: needs apt-get (a Debian 12 build machine) to download the packages" >&2
  exit 2
fi
mkdir -p "$bundle"
rm -f "$bundle"/*.deb
# apt-get download writes into the current directory and needs no root.
if ! (cd "$bundle" && apt-get download "${packages[@]}" >/dev/null); then
  echo "$me: apt-get download failed: run 'apt-get update' (as root) and check the network" >&2
  exit 2
fi
{
  echo "# ci/gpu-bundle.sh, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(. /etc/os-release && echo "$PRETTY_NAME")"
  for f in "$bundle"/*.deb; do dpkg-deb -f "$f" Package Version | paste -sd' '; done
} >"$bundle/MANIFEST"
echo "$me: $(ls "$bundle"/*.deb | wc -l) packages, $(du -sh "$bundle" | cut -f1) in $bundle (see MANIFEST)"
