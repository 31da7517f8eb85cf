#!/usr/bin/env bash
# Installs rankd into a prefix: builds (bazel -c opt) and unpacks
# //install:tree there:
#   PREFIX/bin/      rankd, rankctl, rankrun
#   PREFIX/lib/      librankd.so (C ABI), librankd_cpp.so (C++ client and
#                    data plane), pkgconfig/rankd.pc + rankd-cpp.pc,
#                    cmake/rankd/ (find_package(rankd): rankd::rankd,
#                    rankd::cpp), python3/dist-packages/rankd
#   PREFIX/include/  rankd/rankd.h (C), rankd/cpp/ (C++)
# Everything installed is relocatable (pkg-config and CMake files find the
# prefix from their own location). See docs/operations.md, "Installing".
#
# Usage: tools/install.sh [--prefix=DIR]   (default /usr/local)
#        tools/install.sh --tree=FILE.tar   (only write the tarball)
# Installs the Debian packages the build needs first (tools/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

prefix=/usr/local tree=""
while (($#)); do
  case "$1" in
    --prefix=*) prefix="${1#*=}" ;;
    --prefix) shift; prefix="${1:?--prefix needs a folder}" ;;
    --tree=*) tree="${1#*=}" ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "install.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[[ -n "$prefix" ]] || { echo "install.sh: --prefix is empty" >&2; exit 2; }

tools/setup.sh
echo "== building (bazel -c opt; the first build takes a few minutes)" >&2
log=$(mktemp /tmp/rankd-install-build.XXXXXX)
if ! bazel build -c opt //install:tree >"$log" 2>&1; then
  grep -E "ERROR|error:" "$log" | head -20 >&2
  rm -f "$log"
  echo "install.sh: build failed" >&2
  exit 1
fi
rm -f "$log"
tarball="$(bazel info -c opt bazel-bin 2>/dev/null)/install/rankd-install.tar"

if [[ -n "$tree" ]]; then
  cp "$tarball" "$tree"
  echo "== wrote $tree"
  exit 0
fi
mkdir -p "$prefix"
tar -C "$prefix" --no-same-owner -xf "$tarball"
prefix=$(cd "$prefix" && pwd)
echo "== installed rankd $("$prefix/bin/rankd" --version | cut -d' ' -f2) into $prefix"
echo "   commands   $prefix/bin/{rankd,rankctl,rankrun}"
echo "   C          #include <rankd/rankd.h>, pkg-config rankd, or CMake rankd::rankd"
echo "   C++        pkg-config rankd-cpp, or CMake find_package(rankd) + rankd::cpp"
echo "   Python     import rankd (with $prefix/lib/python3/dist-packages on sys.path)"
case ":$PATH:" in
  *":$prefix/bin:"*) ;;
  *) echo "   add $prefix/bin to PATH to run the commands by name" ;;
esac
