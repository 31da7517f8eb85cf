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
)
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
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends \
    "${missing[@]}" >/dev/null
fi
