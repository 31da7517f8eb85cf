#!/usr/bin/env bash
# Installs every Debian package rankd's build, tests, demo and benchmarks
# need. Idempotent: does nothing when everything is already installed.
# Usage: tools/setup.sh [--bench]   (--bench also installs python3-matplotlib)
set -euo pipefail

packages=(
  bazel-bootstrap bazel-rules-java
  g++ libgrpc++-dev protobuf-compiler-grpc protobuf-compiler libprotobuf-dev
  libabsl-dev libgtest-dev libgloo-dev
  python3 iproute2 procps
  openssl
  # The compiler and linker (.bazelrc), the sanitizer and libFuzzer
  # runtimes, and llvm-symbolizer for readable sanitizer reports.
  clang-14 libclang-rt-14-dev llvm-14 lld-14
  # The format check (tools/check_format.py; .clang-format).
  clang-format-14
  # The GPU run kit (tests/gpu/assemble_kit.sh): strip, and patchelf to
  # point the kit's binaries at its own libraries.
  binutils patchelf
  # Metrics (prometheus-cpp; rankd serves /metrics itself: daemon/http_endpoint.h).
  prometheus-cpp-dev
  # Kubernetes manifest tests (tests/k8s): kubectl's built-in kustomize
  # renders deploy/kubernetes; PyYAML reads the result.
  kubectl python3-yaml
  # The Python package (python/rankd) and its pytest suite.
  python3-numpy python3-pytest
  # torch.distributed on rankd (python/rankd/torch.py) and its tests, with
  # Debian's torch (Gloo on CPUs).
  python3-torch
  # The C++ c10d::Store over rankd (c10d_store/): libtorch's headers and libs.
  libtorch-dev
  # The Rust crate (rust/) and its cargo tests, with Debian's toolchain
  # (/usr/bin/cargo, rustc 1.63), offline.
  cargo
  # The install test (tools/install_test.sh) builds an out-of-tree CMake
  # project and a pkg-config one against the installed copy.
  cmake pkg-config
)
# The manifest validator (tools/k8s-validate) runs on Node.js; any install of
# node and npm will do, Debian's when there is none.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  packages+=(nodejs npm)
fi
if [[ "${1:-}" == "--bench" ]]; then
  packages+=(python3-matplotlib)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  $SUDO apt-get update -q >/dev/null
  # kubectl is not in every Debian mirror's package set (it comes from the
  # Kubernetes or Google Cloud repository); without it only the manifest
  # tests fail, so do not let it stop the rest.
  available=()
  for p in "${missing[@]}"; do
    if [[ "$p" == kubectl ]] && ! apt-cache show kubectl >/dev/null 2>&1; then
      echo "setup: kubectl is not available from the configured apt sources;" \
        "install kubectl (v1.27 or later, with kustomize v5) for the" \
        "Kubernetes manifest tests" >&2
      continue
    fi
    available+=("$p")
  done
  missing=("${available[@]}")
fi

if ((${#missing[@]})); then
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

# npm packages, pinned by each folder's package-lock.json, into its
# node_modules (ignored by git and Bazel): the manifest validator
# (tools/k8s-validate) and the third-party reflection client
# (tools/grpc-reflection-check).
tools_dir="$(cd "$(dirname "$0")" && pwd)"
for npm_dir in "$tools_dir/k8s-validate" "$tools_dir/grpc-reflection-check"; do
  if [[ ! -f "$npm_dir/node_modules/.package-lock.json" ||
        "$npm_dir/package-lock.json" -nt "$npm_dir/node_modules/.package-lock.json" ]]; then
    echo "setup: installing the npm packages of ${npm_dir#$tools_dir/}" >&2
    if ! (cd "$npm_dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null); then
      echo "setup: npm ci in $npm_dir failed; the tests that use it will fail" >&2
    fi
  fi
done
