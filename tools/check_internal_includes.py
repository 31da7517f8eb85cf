#!/usr/bin/python3
"""Enforces "internal/ means private" (docs/architecture.md, "Layout").

A package's private parts live under its internal/ folder, as in abseil.
Three rules, checked over the source tree (stdlib only, no Bazel needed):

  1. Includes: a file may include X/internal/Y.h only when it belongs to the
     package that owns X (the nearest folder at or above X with a
     BUILD.bazel; files in folders without their own BUILD belong to the
     package above, and the owner's internal/ and testing/ subpackages count
     as inside).
  2. Namespaces: every header under an internal/ folder declares an
     `internal` namespace (e.g. rankd::dataplane::gloo::internal), so a
     private name never reads like a public one at its point of use.
  3. Bazel: an internal/ file listed in a target's `hdrs` (which other
     targets may include) is only allowed when that target is visible to its
     own package (and its subpackages) alone; private headers otherwise go in
     `srcs`.
  4. Public headers (the `hdrs` of a target visible outside its package)
     include no internal/ header: that would hand the private header to
     every includer. Forward-declare, use a pimpl, or move what callers
     genuinely need into a small public header.

Usage: check_internal_includes.py [ROOT]   (default: the current directory)
Prints every violation as "path:line: what" and exits 1; exits 0 with a
one-line summary otherwise. Skipped: third_party/, bazel-* folders, build
outputs (rust/target, node_modules, ...), hidden folders, symlinks.
"""

import ast
import os
import re
import sys

SOURCE_EXTENSIONS = (".h", ".hh", ".hpp", ".c", ".cc", ".cpp", ".cu", ".inc")
HEADER_EXTENSIONS = (".h", ".hh", ".hpp", ".inc")
BUILD_FILES = ("BUILD.bazel", "BUILD")
# Folders never scanned, by name anywhere in the tree.
SKIP_NAMES = {"third_party", "node_modules", "__pycache__", "target", "build",
              "dist"}
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
# `namespace internal {`, `namespace a::b::internal {`, or an inline one.
INTERNAL_NAMESPACE_RE = re.compile(
    r"\bnamespace\s+(?:inline\s+)?(?:[A-Za-z_]\w*\s*::\s*)*internal\s*\{")


def skipped_dir(name):
    return (name in SKIP_NAMES or name.startswith("bazel-") or
            name.startswith("."))


def walk(root):
    """Yields (relative folder, file names) of every scanned folder."""
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not skipped_dir(d) and
                         not os.path.islink(os.path.join(folder, d)))
        rel = os.path.relpath(folder, root)
        yield ("" if rel == "." else rel), sorted(files)


def package_of(path, packages):
    """The nearest package folder at or above `path`'s folder, or None."""
    folder = os.path.dirname(path)
    while True:
        if folder in packages:
            return folder
        if not folder:
            return None
        folder = os.path.dirname(folder)


def internal_owner(header, packages):
    """For a path with an internal/ folder: (the folder above `internal`,
    the package that owns it); None when the path has no internal/ part."""
    parts = header.split("/")
    if "internal" not in parts[:-1]:
        return None
    # The innermost internal/ decides (a/internal/b/internal/c.h is b's).
    i = len(parts) - 2 - parts[:-1][::-1].index("internal")
    owner_dir = "/".join(parts[:i])
    return owner_dir, package_of(os.path.join(owner_dir, "x"), packages)


def inside(including, owner_package, packages):
    """Whether file `including` belongs to package `owner_package`."""
    mine = package_of(including, packages)
    if mine == owner_package:
        return True
    # The owner's own internal/ and testing/ subpackages count as inside.
    prefix = owner_package + "/" if owner_package else ""
    if mine is None or not mine.startswith(prefix):
        return False
    first = mine[len(prefix):].split("/")[0]
    return first in ("internal", "testing")


def resolve(include, including, files):
    """The repository path an #include "..." names, or None (not ours)."""
    if include in files:
        return include
    local = os.path.normpath(os.path.join(os.path.dirname(including), include))
    return local if local in files else None


def package_label(package):
    return "//" + package


def check_includes(root, files, packages):
    violations = []
    count = 0
    for path in sorted(files):
        if not path.endswith(SOURCE_EXTENSIONS):
            continue
        with open(os.path.join(root, path), encoding="utf-8",
                  errors="replace") as f:
            for number, line in enumerate(f, 1):
                m = INCLUDE_RE.match(line)
                if not m:
                    continue
                header = resolve(m.group(1), path, files)
                if header is None:
                    continue
                owner = internal_owner(header, packages)
                if owner is None:
                    continue
                count += 1
                owner_dir, owner_package = owner
                if owner_package is None or not inside(path, owner_package,
                                                       packages):
                    violations.append(
                        f"{path}:{number}: includes {header}, which is "
                        f"private to {package_label(owner_package or owner_dir)}"
                        f" (internal/ means private): use the package's public "
                        f"headers, or give it a public header for what you "
                        f"need")
    return violations, count


def check_namespaces(root, files):
    violations = []
    count = 0
    for path in sorted(files):
        if not path.endswith(HEADER_EXTENSIONS):
            continue
        if "internal" not in path.split("/")[:-1]:
            continue
        count += 1
        with open(os.path.join(root, path), encoding="utf-8",
                  errors="replace") as f:
            text = f.read()
        # Comments could mention "namespace internal {"; drop them first.
        text = re.sub(r"//[^\n]*|/\*.*?\*/", "", text, flags=re.S)
        if not INTERNAL_NAMESPACE_RE.search(text):
            violations.append(
                f"{path}:1: declares no `internal` namespace: an internal/ "
                f"header declares its contents in the package's namespace "
                f"::internal (e.g. rankd::dataplane::gloo::internal)")
    return violations, count


def _strings(node):
    """The string constants of a list expression, and of glob()'s patterns
    (its first argument or include=), with their lines."""
    out = []
    if isinstance(node, (ast.List, ast.Tuple)):
        for e in node.elts:
            if isinstance(e, ast.Constant) and isinstance(e.value, str):
                out.append((e.value, e.lineno))
    elif isinstance(node, ast.BinOp):
        out += _strings(node.left) + _strings(node.right)
    elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "glob":
        patterns = node.args[:1] + [kw.value for kw in node.keywords
                                    if kw.arg == "include"]
        for p in patterns:
            out += _strings(p)
    return out


def _is_literal(node):
    """Whether a label list is written out: a list or tuple of string
    constants, or a sum of such. A variable, select() or a call is not: the
    checker cannot know what it holds."""
    if isinstance(node, (ast.List, ast.Tuple)):
        return all(isinstance(e, ast.Constant) and isinstance(e.value, str)
                   for e in node.elts)
    if isinstance(node, ast.BinOp):
        return _is_literal(node.left) and _is_literal(node.right)
    return False


def private_visibility(labels, package):
    """Whether visibility `labels` keeps a target within `package`."""
    own = ("//" + package + ":__pkg__", "//" + package + ":__subpackages__",
           "//visibility:private")
    for label in labels:
        if label in own:
            continue
        # A subpackage of this package (e.g. tests in a subfolder).
        if label.startswith("//" + package + "/"):
            continue
        return False
    return True


def check_build_files(root, packages):
    """Rule 3; also returns the public headers (repository paths) for 4."""
    violations = []
    public_headers = set()
    count = 0
    for package in sorted(packages):
        name = next(n for n in BUILD_FILES
                    if os.path.isfile(os.path.join(root, package, n)))
        path = os.path.join(package, name)
        with open(os.path.join(root, path), encoding="utf-8") as f:
            source = f.read()
        if "internal/" not in source:
            continue
        try:
            tree = ast.parse(source, filename=path)
        except SyntaxError as e:
            violations.append(f"{path}:{e.lineno}: cannot parse it to check "
                              f"its internal/ headers: {e.msg}")
            continue
        default = ["//visibility:private"]
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
        for call in calls:
            if getattr(call.func, "id", None) == "package":
                for kw in call.keywords:
                    if kw.arg == "default_visibility":
                        default = [s for s, _ in _strings(kw.value)]
        for call in calls:
            keywords = {kw.arg: kw.value for kw in call.keywords}
            if "hdrs" not in keywords and "textual_hdrs" not in keywords:
                continue
            if "visibility" in keywords:
                if _is_literal(keywords["visibility"]):
                    visibility = [s for s, _ in _strings(keywords["visibility"])]
                else:
                    # Unknown labels: count the target as visible outside.
                    visibility = ["<not a written-out list>"]
            else:
                visibility = default
            hdrs = []
            for attribute in ("hdrs", "textual_hdrs"):
                if attribute in keywords:
                    hdrs += _strings(keywords[attribute])
            internal = [(s, line) for s, line in hdrs
                        if "internal" in s.split("/")[:-1]]
            if not private_visibility(visibility, package):
                public_headers.update(
                    os.path.join(package, s) for s, _ in hdrs
                    if (s, _) not in internal and not s.startswith(":"))
            if not internal:
                continue
            count += len(internal)
            if not private_visibility(visibility, package):
                for header, line in internal:
                    violations.append(
                        f"{path}:{line}: {header} is in the hdrs of a target "
                        f"visible outside {package_label(package)} "
                        f"({', '.join(visibility)}): list private headers in "
                        f"srcs, or keep the target's visibility to its own "
                        f"package")
    return violations, count, public_headers


def check_public_headers(root, files, packages, public_headers):
    """Rule 4: no public header includes an internal/ header."""
    violations = []
    for path in sorted(public_headers & files):
        with open(os.path.join(root, path), encoding="utf-8",
                  errors="replace") as f:
            for number, line in enumerate(f, 1):
                m = INCLUDE_RE.match(line)
                header = m and resolve(m.group(1), path, files)
                if header and internal_owner(header, packages):
                    violations.append(
                        f"{path}:{number}: public header includes {header}: "
                        f"every includer would see the private header; "
                        f"forward-declare what it names, use a pimpl, or move "
                        f"what callers need into a public header")
    return violations


def run(root):
    """Returns (violations, summary counts)."""
    files = set()
    packages = set()
    for folder, names in walk(root):
        if any(n in BUILD_FILES for n in names):
            packages.add(folder)
        for n in names:
            files.add(os.path.join(folder, n) if folder else n)
    v1, includes = check_includes(root, files, packages)
    v2, headers = check_namespaces(root, files)
    v3, listed, public_headers = check_build_files(root, packages)
    v4 = check_public_headers(root, files, packages, public_headers)
    scanned = sum(1 for p in files if p.endswith(SOURCE_EXTENSIONS))
    return v1 + v2 + v3 + v4, {
        "source files": scanned,
        "packages": len(packages),
        "internal/ includes": includes,
        "internal/ headers": headers,
        "internal/ hdrs entries": listed,
        "public headers": len(public_headers & files),
    }


def main(argv):
    root = os.path.abspath(argv[1] if len(argv) > 1 else ".")
    violations, counts = run(root)
    summary = ", ".join(f"{v} {k}" for k, v in counts.items())
    if violations:
        print(f"check_internal_includes: {len(violations)} violation(s) of "
              f"\"internal/ means private\" (docs/architecture.md) in {root}:")
        for v in violations:
            print("  " + v)
        print(f"(checked {summary})")
        return 1
    print(f"check_internal_includes: OK ({summary})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
