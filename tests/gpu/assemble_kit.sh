#!/usr/bin/env bash
# Assembles the GPU run kit from built binaries: copies every binary of
# kit_contents.sh from BIN_ROOT (a bazel-bin, or a test's runfiles root) to
# OUTDIR/bin/<same path>, strips it, copies every shared library the
# binaries need except the host's (glibc, libstdc++, libgcc, CUDA driver,
# CUDA runtime, NCCL) to OUTDIR/lib, and points every binary's and
# library's run path at OUTDIR/lib ($ORIGIN-relative, so the kit works from
# any folder). Adds the runners (run.sh, tools/run.sh), the Python package
# and its tests (python/) and KIT_INFO.
# Prints the kit's size; fails above the limit or when a library cannot be
# resolved here.
#
# Usage: tests/gpu/assemble_kit.sh BIN_ROOT OUTDIR [SOURCE_ROOT]
#   SOURCE_ROOT (default: this checkout) provides the runner scripts.
# Needs ldd, strip and patchelf. make_kit.sh is the normal way in.
set -euo pipefail
shopt -s nullglob
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/kit_contents.sh"

(($# >= 2)) || { echo "usage: $0 BIN_ROOT OUTDIR [SOURCE_ROOT]" >&2; exit 2; }
bin_root=$1 out=$2 src=${3:-"$here/../.."}
for tool in ldd strip patchelf; do
  command -v "$tool" >/dev/null ||
    { echo "assemble_kit: $tool is missing (Debian: tools/setup.sh installs it)" >&2; exit 1; }
done

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/tools"
declare -A shipped=()
for b in "${KIT_BINARIES[@]}"; do
  [[ -x "$bin_root/$b" ]] || { echo "assemble_kit: $bin_root/$b is missing" >&2; exit 1; }
  mkdir -p "$out/bin/$(dirname "$b")"
  cp -L "$bin_root/$b" "$out/bin/$b"
  chmod u+w "$out/bin/$b"
  # ldd on the original: its own run path finds Bazel's _solib folders.
  while read -r name arrow path _; do
    [[ "$name" =~ $KIT_HOST_LIBRARIES_RE ]] && continue
    if [[ "$arrow" != "=>" || "$path" == "not" || ! -f "$path" ]]; then
      echo "assemble_kit: $b needs $name, which does not resolve here" >&2
      exit 1
    fi
    if [[ -z "${shipped[$name]:-}" ]]; then
      cp -L "$path" "$out/lib/$name"
      chmod u+w "$out/lib/$name"
      shipped[$name]=1
    fi
  done < <(ldd "$bin_root/$b" | awk 'NF >= 3 || /not found/ { print $1, $2, $3 }')
done

for f in "$out"/lib/*; do
  strip --strip-unneeded "$f"
  patchelf --set-rpath '$ORIGIN' "$f"
done
for b in "${KIT_BINARIES[@]}"; do
  strip --strip-unneeded "$out/bin/$b"
  # bin/<dir>/<name>: as many ".." as the path has folders, then lib.
  up=$(dirname "$b" | awk -F/ '{ s = ""; for (i = 0; i <= NF; i++) s = s "../"; print s }')
  patchelf --set-rpath "\$ORIGIN/${up}lib" "$out/bin/$b"
done

# The runners: the GPU test runner at the kit's top, and the cluster
# launcher it uses for the serving example (RANKD_BIN_DIR=bin).
cp "$src/tests/gpu/run.sh" "$out/run.sh"
cp "$src/tests/gpu/kit_contents.sh" "$out/kit_contents.sh"
cp "$src/tools/run.sh" "$out/tools/run.sh"
chmod +x "$out/run.sh" "$out/tools/run.sh"
for d in "${KIT_PYTHON_DIRS[@]}"; do
  files=("$src/$d"/*.py)
  ((${#files[@]})) || { echo "assemble_kit: no Python files in $src/$d" >&2; exit 1; }
  mkdir -p "$out/$d"
  cp -L "${files[@]}" "$out/$d/"
done

commit=$(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git -C "$src" status --porcelain 2>/dev/null | grep -q . && echo "+changes" || true)
{
  echo "rankd GPU run kit"
  echo "commit: $commit$dirty"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")"
  echo "glibc: $(ldd --version | head -1 | awk '{ print $NF }') or newer needed on the host"
  echo "binaries: ${KIT_BINARIES[*]}"
  echo "libraries: $(cd "$out/lib" && ls | tr '\n' ' ')"
} > "$out/KIT_INFO"

bytes=$(du -sb "$out" | awk '{ print $1 }')
printf 'kit: %s, %d binaries, %d libraries, %.1f MiB (limit %d MiB)\n' \
  "$out" "${#KIT_BINARIES[@]}" "${#shipped[@]}" \
  "$(awk -v b="$bytes" 'BEGIN { print b / 1048576 }')" $((KIT_MAX_BYTES / 1048576))
if ((bytes > KIT_MAX_BYTES)); then
  echo "assemble_kit: the kit is $bytes bytes, over the $KIT_MAX_BYTES-byte limit" >&2
  exit 1
fi
