#!/usr/bin/env bash
# Builds the rankd crate (rust/) with Debian's /usr/bin/cargo, offline,
# against the librankd.so of this build, and runs its tests against this
# build's rankd and rankctl (Bazel runfiles). Each libtest case becomes one
# JUnit testcase in $XML_OUTPUT_FILE, so it counts in the suite's closing
# line; exits non-zero when any failed.
#
# A sanitizer build's librankd.so needs its runtime loaded first: the Rust
# binaries are not instrumented. It is preloaded into the test binaries
# only (they pass it on to the ranks they start; the tests' daemons carry
# their own), never into cargo or rustc.
set -euo pipefail
RUNFILES_ROOT="$PWD"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
CRATE="$TMP/crate"
rm -rf "$CRATE"
cp -rL "$RUNFILES_ROOT/rust" "$CRATE"
export RANKD_LIB_DIR="$RUNFILES_ROOT/capi"
export RANKD_BIN="$RUNFILES_ROOT/daemon/rankd"
export RANKCTL_BIN="$RUNFILES_ROOT/client/rankctl"
export CARGO_HOME="$TMP/cargo-home"
export CARGO_TARGET_DIR="$TMP/cargo-target"
export RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc
export CARGO_TERM_COLOR=never
unset RUSTFLAGS RUSTDOCFLAGS RUSTC_WRAPPER LD_PRELOAD || true
cd "$CRATE"

PRELOAD=""
# (grep reads to the end: with -q, nm's SIGPIPE would fail the pipeline.)
if nm -D --undefined-only "$RANKD_LIB_DIR/librankd.so" | grep ' __asan_' >/dev/null; then
  PRELOAD="$(clang-14 -print-file-name=libclang_rt.asan-x86_64.so)"
  # Rust's own allocations are not leaks of ours.
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
  # The library's references to the runtime are resolved by the preload at
  # run time; GNU ld would refuse them when linking the binaries.
  export RUSTFLAGS="-C link-arg=-Wl,--allow-shlib-undefined"
  export RUSTDOCFLAGS="$RUSTFLAGS"
fi

LOGS="$TMP/logs"
mkdir -p "$LOGS"
# Build every test binary (and the examples the tests run), then list them.
if ! /usr/bin/cargo test --offline --no-run --message-format=json >"$LOGS/build.json"; then
  # Again, for the compiler's messages as people read them.
  /usr/bin/cargo test --offline --no-run >&2 || true
  echo "run_cargo_test: cargo build failed" >&2
  exit 1
fi
mapfile -t binaries < <(/usr/bin/python3 -c '
import json, sys
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") \
            and m["profile"]["test"]:
        print(m["executable"])
' "$LOGS/build.json")
[[ ${#binaries[@]} -gt 0 ]] || { echo "run_cargo_test: no test binaries" >&2; exit 1; }

status=0
for bin in "${binaries[@]}"; do
  name=$(basename "$bin")
  name=${name%-*}  # ranks-0123abcd -> ranks
  echo "== $name" >&2
  # One test at a time: the tests start daemons and change the environment.
  if LD_PRELOAD="$PRELOAD" "$bin" --test-threads=1 >"$LOGS/$name.out" 2>&1; then :; else status=1; fi
  cat "$LOGS/$name.out" >&2
done
echo "== doc" >&2
/usr/bin/cargo test --offline --doc -- --test-threads=1 >"$LOGS/doc.out" 2>&1 || status=1
cat "$LOGS/doc.out" >&2

# libtest's lines "test NAME ... ok|FAILED|ignored" -> JUnit. rank_program
# is the entry the tests run as each rank, not a case of its own.
/usr/bin/python3 - "$LOGS" "${XML_OUTPUT_FILE:-$TMP/cargo_test.xml}" <<'PY'
import os, re, sys
from xml.sax.saxutils import quoteattr, escape
logs, xml_path = sys.argv[1], sys.argv[2]
line = re.compile(r"^test (.+?) \.\.\. (ok|FAILED|ignored)\s*$")
cases, failed, skipped = [], 0, 0
for f in sorted(os.listdir(logs)):
    if not f.endswith(".out"):
        continue
    suite = f[:-4]
    text = open(os.path.join(logs, f), errors="replace").read()
    sections = dict(re.findall(r"^---- (.+?) stdout ----\n(.*?)(?=^---- |^failures:$)",
                               text, re.M | re.S))
    for l in text.splitlines():
        m = line.match(l)
        if not m or m.group(1) == "rank_program":
            continue
        name, result = m.group(1), m.group(2)
        body = ""
        if result == "FAILED":
            failed += 1
            detail = sections.get(name, "see the test log")
            body = "<failure message=%s>%s</failure>" % (
                quoteattr(name + " failed"), escape(detail))
        elif result == "ignored":
            skipped += 1
            body = "<skipped/>"
        cases.append('    <testcase classname=%s name=%s>%s</testcase>' % (
            quoteattr("rust." + suite), quoteattr(name), body))
with open(xml_path, "w") as out:
    out.write('<?xml version="1.0" encoding="UTF-8"?>\n<testsuites>\n')
    out.write('  <testsuite name="cargo_test" tests="%d" failures="%d" skipped="%d">\n'
              % (len(cases), failed, skipped))
    out.write("\n".join(cases) + "\n  </testsuite>\n</testsuites>\n")
print("run_cargo_test: %d cases, %d failed, %d skipped" % (len(cases), failed, skipped),
      file=sys.stderr)
if not cases:
    sys.exit(1)
PY
exit $status
