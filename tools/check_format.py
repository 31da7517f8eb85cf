"""Checks that every C and C++ source of rankd is formatted as
.clang-format says (Google style), with Debian's clang-format-14.

    /usr/bin/python3 tools/check_format.py          # list unformatted files
    /usr/bin/python3 tools/check_format.py --fix    # format them in place

Walks the source tree itself (third_party/, build outputs, node_modules and
Cargo's target/ excluded), so it sees every package. Exit status 0 when
every file is formatted, 1 otherwise (each unformatted file named), 2 when
clang-format-14 is missing. Stdlib only.
"""

import os
import subprocess
import sys

EXTENSIONS = (".h", ".cc", ".c", ".cpp")
SKIP_DIRS = {"third_party", "node_modules", "target", "build", ".git"}
CLANG_FORMAT = "clang-format-14"


def sources(root):
    """Every C/C++ source under `root`, relative paths, sorted."""
    found = []
    for here, dirs, files in os.walk(root):
        dirs[:] = [
            d for d in dirs if d not in SKIP_DIRS and not d.startswith("bazel-")
        ]
        for name in files:
            if name.endswith(EXTENSIONS):
                found.append(os.path.relpath(os.path.join(here, name), root))
    return sorted(found)


def unformatted(root, paths):
    """The paths clang-format would change (it reads root/.clang-format)."""
    # One clang-format per 100 files (starting one per file is slow on a
    # loaded machine); it names each file it would change on stderr, as
    # "<path>:<line>:<column>: error: code should be clang-formatted".
    bad = set()
    for i in range(0, len(paths), 100):
        batch = paths[i:i + 100]
        run = subprocess.run(
            [CLANG_FORMAT, "--style=file", "--dry-run", "-Werror"] + batch,
            cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True)
        for line in run.stderr.splitlines():
            path = line.split(":", 1)[0]
            if "should be clang-formatted" in line and path in batch:
                bad.add(path)
        if run.returncode != 0 and not bad.intersection(batch):
            raise RuntimeError(f"{CLANG_FORMAT} failed: {run.stderr[-2000:]}")
    return sorted(bad)


def main(argv, root=None):
    if root is None:
        root = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    try:
        subprocess.run([CLANG_FORMAT, "--version"], check=True,
                       stdout=subprocess.DEVNULL)
    except (OSError, subprocess.CalledProcessError):
        print(f"{CLANG_FORMAT} is not installed (tools/setup.sh installs it)")
        return 2
    paths = sources(root)
    bad = unformatted(root, paths)
    if "--fix" in argv[1:] and bad:
        subprocess.run([CLANG_FORMAT, "--style=file", "-i"] + bad, cwd=root,
                       check=True)
        print(f"formatted {len(bad)} of {len(paths)} files")
        return 0
    for path in bad:
        print(f"not formatted: {path}")
    print(f"{len(paths) - len(bad)} of {len(paths)} files formatted"
          + ("" if not bad else
             "; fix with /usr/bin/python3 tools/check_format.py --fix"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
