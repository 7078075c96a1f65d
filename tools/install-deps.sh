#!/usr/bin/env bash
# Installs the Debian 12 packages tensorfetch needs (only those missing), with apt-get.
# Usage: tools/install-deps.sh [--fuzz] [--bench]
#   --fuzz   adds clang and libFuzzer for fuzz targets
#   --bench  adds the peers and tools of tools/bench/partial_load.sh, real_network.sh and mount.sh
#            (nginx, its stream module, aria2c, rclone, curl, openssl, GNU time, jq)
set -euo pipefail

packages=(
  meson ninja-build pkg-config g++            # build
  libsimdjson-dev nlohmann-json3-dev          # JSON: parse headers (simdjson), emit JSON (nlohmann)
  libcli11-dev                                # CLI parsing
  libexpected-dev                             # tl::expected, the Result<T> of the public API
  libssl-dev libcurl4-openssl-dev             # hashes/TLS/SigV4 (OpenSSL), HTTP (libcurl)
  libexpat1-dev                               # XML: S3 listings and error answers (lib/store)
  python3-botocore                            # tests: the S3 proxy checks SigV4 with AWS's own signer
  catch2 libcpp-httplib-dev                   # tests: Catch2 v2, cpp-httplib test server
  nginx-light                                 # tests: a real HTTP/2 + TLS server
  python3-dev pybind11-dev libdlpack-dev      # the Python extension: headers, pybind11, DLPack (torch views)
  python3-mesonpy python3-pip python3-venv    # the wheel: meson-python backend, pip install --no-build-isolation
  python3-numpy python3-pytest                # Python package: NumPy arrays; its tests
  python3-torch                               # Python package: torch tensors (1.13, CPU); tests and bench
  libopenmpi-dev openmpi-bin                  # --mpi (meson feature mpi): fetch once per cluster; mpirun for its tests
  libfuse3-dev fuse3                          # `tensorfetch mount` (meson feature fuse): libfuse3; fusermount3 to unmount
)
for arg in "$@"; do
  case $arg in
    --fuzz) packages+=(clang-14 libclang-rt-14-dev) ;;     # libFuzzer + sanitizer runtimes
    --bench) packages+=(nginx-light libnginx-mod-stream aria2 rclone awscli curl openssl time jq bc) ;;  # servers, peers, time -v
    *) echo "usage: tools/install-deps.sh [--fuzz] [--bench]" >&2; exit 1 ;;
  esac
done

# s3rver and azurite (npm) for the S3 and Azure tests (tests/cli/test_cli_s3.cc,
# test_cli_azure.cc), into tools/node, pinned by its package-lock.json; only when missing, and
# only where npm is on PATH (it is not a Debian package here: Debian's npm conflicts with the
# nodejs some machines have).
install_s3rver() {
  local root
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/node"
  if [[ -f "$root/node_modules/s3rver/bin/s3rver.js" && -f "$root/node_modules/azurite/dist/src/blob/main.js" ]]; then
    return 0
  fi
  if ! command -v npm >/dev/null; then
    echo "install-deps: npm not found: the S3 and Azure tests (cli_s3, cli_azure) will be skipped" >&2
    return 0
  fi
  echo "install-deps: installing s3rver and azurite into $root"
  npm ci --prefix "$root" --no-audit --no-fund
}

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if (( ${#missing[@]} == 0 )); then
  echo "install-deps: all ${#packages[@]} packages present"
  install_s3rver
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
install_s3rver
