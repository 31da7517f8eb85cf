#!/usr/bin/env bash
# Installs this build's //install:tree into a fresh prefix and uses it the
# way a new user would, with nothing from the source tree but
# examples/hello:
#   - bin/rankd --help lists the daemon's flags, --version matches the
#     pkg-config and CMake package versions;
#   - an out-of-tree CMake project (testdata/consumer) builds hello.c against
#     rankd::rankd and hello.cc against rankd::cpp; both build with
#     pkg-config too;
#   - a C++ libtorch program (testdata/c10d_hello.cc) builds with
#     pkg-config's rankd-c10d and with CMake's rankd::c10d (rankd's
#     c10d::Store);
#   - the Rust crate (rust/, copied) builds its hello example with no
#     RANKD_LIB_DIR, finding the install through pkg-config
#     (PKG_CONFIG_PATH) as C programs do, and a package that depends on the
#     crate by path (testdata/rust_dependent) builds the same way;
#   - each program, and hello.py on the installed Python package, runs as a
#     two-rank job under the installed launcher (bin/rankrun starts
#     bin/rankd) and prints the expected line on both ranks; the Rust ones
#     with no LD_LIBRARY_PATH.
# Prints one "CASE <name> PASS|FAIL" line per check and writes them as JUnit
# XML to $XML_OUTPUT_FILE, so each check counts in the suite's closing line.
set -uo pipefail
runfiles="$PWD"
work="${TEST_TMPDIR:-$(mktemp -d)}/install"
prefix="$work/prefix"
rm -rf "$work" && mkdir -p "$prefix"
tar -C "$prefix" -xf install/rankd-install.tar || exit 1

# A sanitizer build's libraries need the sanitizer runtime in programs
# built here and in Python (which is not instrumented).
san_flags="" preload="" san_rustflags=""
# (grep reads all of nm's output: with -q it could exit first, and under
# pipefail nm's SIGPIPE would read as "not a sanitizer build".)
if nm -D --undefined-only "$prefix/lib/librankd.so" | grep ' __asan_' >/dev/null; then
  # As Bazel links: with lld (GNU ld refuses the library's sanitizer
  # references although the program's static runtime exports them), and
  # with the runtime's C++ part, which a C program would otherwise lack.
  san_flags="-fsanitize=address,undefined -fuse-ld=lld"
  san_flags+=" -fsanitize-link-c++-runtime -lstdc++"
  preload="$(clang-14 -print-file-name=libclang_rt.asan-x86_64.so)"
  # Rust programs are not instrumented: the library's references to the
  # runtime are resolved by the preload at run time (rust/run_cargo_test.sh).
  san_rustflags="-C link-arg=-Wl,--allow-shlib-undefined"
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
fi

cases=() failures=0
record() {  # name status [detail...]
  local name=$1 status=$2; shift 2
  cases+=("$name|$status|$*")
  echo "CASE $name $status${*:+: $*}"
  [[ $status == PASS ]] || failures=$((failures + 1))
}
check() {  # name command...: PASS when the command succeeds
  local name=$1; shift
  local out
  if out=$("$@" 2>&1); then record "$name" PASS
  else record "$name" FAIL "$(tail -c 2000 <<<"$out")"; fi
}

# ---- commands and versions ---------------------------------------------------
version=$("$prefix/bin/rankd" --version | awk '{print $2}')
help_lists_flags() {
  local help
  help=$("$prefix/bin/rankd" --help) || return 1
  grep -q -- "--job_id" <<<"$help" && grep -q -- "--credentials_dir" <<<"$help"
}
check rankd_help_lists_flags help_lists_flags
versions_agree() {
  [[ -n "$version" ]] &&
    [[ $(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --modversion rankd) == "$version" ]] &&
    [[ $(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --modversion rankd-cpp) == "$version" ]] &&
    [[ $(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --modversion rankd-c10d) == "$version" ]] &&
    grep -q "PACKAGE_VERSION \"$version\"" "$prefix/lib/cmake/rankd/rankdConfigVersion.cmake"
}
check versions_agree versions_agree
for command in rankd rankctl rankrun; do
  if [[ -x "$prefix/bin/$command" ]]; then record "installs_$command" PASS
  else record "installs_$command" FAIL "$prefix/bin/$command is missing"; fi
done

# ---- building against the installed copy -------------------------------------
hello="$runfiles/examples/hello"
build="$work/build"
cmake_build() {
  cmake -S "$runfiles/install/testdata/consumer" -B "$build" \
    -DCMAKE_PREFIX_PATH="$prefix" -DHELLO_DIR="$hello" \
    -DC10D_HELLO="$runfiles/install/testdata/c10d_hello.cc" \
    -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
    -DCMAKE_EXE_LINKER_FLAGS="$san_flags" -DCMAKE_BUILD_TYPE=Release &&
    cmake --build "$build" -j 2
}
check cmake_project_builds cmake_build
pkg_config_build() {
  local flags
  flags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs rankd) &&
    clang-14 -std=c11 $san_flags "$hello/hello.c" $flags -o "$work/hello_c_pc"
}
check pkg_config_c_builds pkg_config_build
pkg_config_cpp_build() {
  local flags
  flags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs rankd-cpp) &&
    clang++-14 -std=c++20 $san_flags "$hello/hello.cc" $flags -o "$work/hello_cpp_pc"
}
check pkg_config_cpp_builds pkg_config_cpp_build
# A C++ libtorch program over rankd's c10d store (rankd-c10d: the store,
# rankd-cpp and Debian's libtorch).
pkg_config_c10d_build() {
  local flags
  flags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs rankd-c10d) &&
    clang++-14 -std=c++20 $san_flags "$runfiles/install/testdata/c10d_hello.cc" $flags -o "$work/c10d_hello"
}
check pkg_config_c10d_builds pkg_config_c10d_build

# The Rust crate and a package that depends on it, side by side as a user
# would have them, built with Debian's cargo, offline. No RANKD_LIB_DIR:
# the crate's build script asks pkg-config, as C programs do.
rust="$work/rust"
mkdir -p "$rust"
cp -rL "$runfiles/rust" "$rust/rankd"
cp -rL "$runfiles/install/testdata/rust_dependent" "$rust/rust_dependent"
cargo_env=(env -u RANKD_LIB_DIR -u LD_LIBRARY_PATH -u RUSTFLAGS
  PKG_CONFIG_PATH="$prefix/lib/pkgconfig" CARGO_HOME="$rust/cargo-home"
  RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc CARGO_TERM_COLOR=never
  ${san_rustflags:+"RUSTFLAGS=$san_rustflags"})
rust_example_build() {
  (cd "$rust/rankd" && "${cargo_env[@]}" /usr/bin/cargo build --offline --example hello)
}
check rust_example_builds_through_pkg_config rust_example_build
rust_dependent_build() {
  (cd "$rust/rust_dependent" && "${cargo_env[@]}" /usr/bin/cargo build --offline)
}
check rust_dependent_package_builds rust_dependent_build

# ---- running against a real daemon from the installed copy -------------------
# What each rank prints (printf format, %d = the rank), after the label
# rankrun puts on every line by default, "[rank N] ".
want_format="rank %d of 2: words [0 7 1 7] sum [4 6] gathered [0 1]"
run_job() {  # job_id program...: rankrun, two ranks, both lines checked
  local job=$1; shift
  local dir="$work/$job" status=0 r
  mkdir -p "$dir"
  # As a user runs it: the installed launcher starts the installed rankd
  # (next to it) with fresh credentials, and the two ranks.
  timeout 90 "$prefix/bin/rankrun" --nproc_per_node=2 --job_id="$job" \
    --rankd_log="$dir/rankd.log" -- "$@" >"$dir/out" 2>&1 ||
    status=1
  for r in 0 1; do
    local want
    want="[rank $r] $(printf "$want_format" "$r")"
    grep -qxF "$want" "$dir/out" || status=1
  done
  if ((status != 0)); then
    echo "rankrun printed:"; cat "$dir/out"
    echo "daemon log:"; tail -20 "$dir/rankd.log"
  fi
  return $status
}
check hello_c_runs run_job hello-c "$build/hello_c"
check hello_cpp_runs run_job hello-cpp "$build/hello_cpp"
check hello_c_pkg_config_runs run_job hello-c-pc "$work/hello_c_pc"
check hello_cpp_pkg_config_runs run_job hello-cpp-pc "$work/hello_cpp_pc"
check hello_python_runs run_job hello-py env -u RANKD_LIBRARY \
  PYTHONPATH="$prefix/lib/python3/dist-packages" ${preload:+LD_PRELOAD=$preload} \
  /usr/bin/python3 "$hello/hello.py"
# The Rust programs find librankd.so without LD_LIBRARY_PATH (the crate's
# build script records its full path in them, the dependent's too).
check hello_rust_runs run_job hello-rust env -u LD_LIBRARY_PATH \
  ${preload:+LD_PRELOAD=$preload} "$rust/rankd/target/debug/examples/hello"
want_format="dependent: rank %d of 2: words [40, 41]"
check rust_dependent_runs_without_ld_library_path run_job rust-dependent \
  env -u LD_LIBRARY_PATH ${preload:+LD_PRELOAD=$preload} \
  "$rust/rust_dependent/target/debug/rankd-dependent"

want_format="rank %d of 2: c10d all_reduce [3 30]"
check c10d_hello_runs run_job c10d-hello "$work/c10d_hello"

# ---- results --------------------------------------------------------------------
xml="${XML_OUTPUT_FILE:-$work/test.xml}"
{
  echo '<?xml version="1.0" encoding="UTF-8"?>'
  echo "<testsuites><testsuite name=\"install_test\" tests=\"${#cases[@]}\" failures=\"$failures\">"
  for c in "${cases[@]}"; do
    IFS='|' read -r name status detail <<<"$c"
    if [[ $status == PASS ]]; then
      echo "<testcase classname=\"install\" name=\"$name\"/>"
    else
      detail=$(sed -e 's/&/\&amp;/g' -e 's/</\&lt;/g' -e 's/>/\&gt;/g' -e 's/"/\&quot;/g' <<<"$detail")
      echo "<testcase classname=\"install\" name=\"$name\"><failure message=\"failed\">$detail</failure></testcase>"
    fi
  done
  echo "</testsuite></testsuites>"
} >"$xml"
echo "${#cases[@]} checks, $failures failed"
((failures == 0))
