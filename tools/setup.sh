#!/usr/bin/env bash
# Installs every Debian package rankd's build, tests, demo and benchmarks
# need. Idempotent: does nothing when everything is already installed.
# Usage: tools/setup.sh [--bench]   (--bench also installs python3-torch)
set -euo pipefail

packages=(
  bazel-bootstrap bazel-rules-java
  g++ libgrpc++-dev protobuf-compiler-grpc protobuf-compiler libprotobuf-dev
  libabsl-dev libgtest-dev libgloo-dev
  python3 iproute2 procps
  openssl
  # The GPU run kit (tests/gpu/assemble_kit.sh): strip, and patchelf to
  # point the kit's binaries at its own libraries.
  binutils patchelf
  # Metrics endpoint (prometheus-cpp with its civetweb HTTP server).
  prometheus-cpp-dev
  # Kubernetes manifest tests (tests/k8s): kubectl's built-in kustomize
  # renders deploy/kubernetes; PyYAML reads the result.
  kubectl python3-yaml
)
# The manifest validator (tools/k8s-validate) runs on Node.js; any install of
# node and npm will do, Debian's when there is none.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  packages+=(nodejs npm)
fi
if [[ "${1:-}" == "--bench" ]]; then
  packages+=(python3-torch)
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

# npm packages of the manifest validator, pinned by its package-lock.json,
# into tools/k8s-validate/node_modules (ignored by git and Bazel).
validator="$(cd "$(dirname "$0")" && pwd)/k8s-validate"
if [[ ! -f "$validator/node_modules/.package-lock.json" ||
      "$validator/package-lock.json" -nt "$validator/node_modules/.package-lock.json" ]]; then
  echo "setup: installing the manifest validator's npm packages" >&2
  if ! (cd "$validator" && npm ci --no-audit --no-fund --loglevel=error >/dev/null); then
    echo "setup: npm ci in $validator failed; the manifest tests will fail" >&2
  fi
fi
