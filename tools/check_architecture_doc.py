"""Checks docs/architecture.md against the tree, so the map cannot drift.

Fails (exit 1, one line per problem) when the page
  - names a path (`daemon/config.h`, `bench/run_*.sh`, a link such as
    [x](operations.md)) or a Bazel label (`//dataplane:client_control_plane`)
    that does not exist;
  - leaves a top-level folder out of the "Parts" table, or does not name a
    `daemon/` subfolder that has a BUILD file;
  - has a "may depend on" or "its tests also use" cell that disagrees with
    the BUILD files: the cell's backticked top-level folders (`client/`)
    must be exactly the other top-level packages that the part's BUILD
    files reference, outside test rules (*_test or testonly) and inside
    them respectively. third_party/, visibility labels and load()s do not
    count.

Run it alone with /usr/bin/python3 tools/check_architecture_doc.py [ROOT].
Stdlib only.
"""

import glob
import os
import re
import sys

PAGE = "docs/architecture.md"
FILE_SUFFIXES = (".h", ".cc", ".c", ".md", ".py", ".sh", ".rs", ".bzl",
                 ".bazel", ".toml", ".lds", ".proto", ".in")
RULE = re.compile(r"^(\w+)\(\n(.*?)^\)\n?", re.S | re.M)
LOAD = re.compile(r"^load\(.*?\)\n", re.S | re.M)
LABEL = re.compile(r'"(//[^"]*)"')
CODE = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def top_folders(root):
    """Every top-level folder of the tree but hidden ones and Bazel's."""
    return sorted(
        name for name in os.listdir(root)
        if os.path.isdir(os.path.join(root, name)) and
        not name.startswith(".") and not name.startswith("bazel-"))


def prose(text):
    """The page without its fenced blocks (diagrams, code)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def label_exists(root, label):
    package, _, name = label[2:].partition(":")
    build = os.path.join(root, package, "BUILD.bazel")
    if not os.path.isfile(build):
        return False
    if not name:
        return True
    with open(build) as f:
        text = f.read()
    return (f'name = "{name}"' in text or
            os.path.exists(os.path.join(root, package, name)))


def path_problems(root, text, tops):
    problems = []
    for token in sorted(set(CODE.findall(prose(text)))):
        if token.startswith("//"):
            if not label_exists(root, token):
                problems.append(f"names label {token}, which does not exist")
            continue
        if (" " in token or ":" in token or "/" not in token or
                token[0] in "/.-$~<"):
            continue
        first = token.split("/")[0]
        if first not in tops and not token.endswith(FILE_SUFFIXES):
            continue  # a relative path such as internal/ or lib/
        if not glob.glob(os.path.join(root, token)):
            problems.append(f"names {token}, which does not exist")
    docs = os.path.dirname(os.path.join(root, PAGE))
    for target in sorted(set(LINK.findall(text))):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        path = target.split("#")[0]
        if not os.path.exists(os.path.normpath(os.path.join(docs, path))):
            problems.append(f"links to {target}, which does not exist")
    return problems


def parts_table(text):
    """{folder: (may depend on, its tests also use)} from "## Parts"."""
    section = text.split("## Parts", 1)[-1].split("\n## ", 1)[0]
    rows = {}
    header = None
    for line in section.splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
            continue
        if set(cells[0]) <= set("-: "):
            continue
        row = dict(zip(header, cells))
        folders = re.findall(r"`([^`/]+)/`", row.get("folder", ""))
        if not folders:
            continue

        def tops_in(cell):
            return set(re.findall(r"`([A-Za-z0-9_]+)/`", cell or ""))

        rows[folders[0]] = (tops_in(row.get("may depend on")),
                            tops_in(row.get("its tests also use")))
    return rows


def labels_in(text, own):
    found = set()
    for label in LABEL.findall(text):
        if (label.startswith("//visibility") or ":__pkg__" in label or
                ":__subpackages__" in label):
            continue
        top = label[2:].split(":")[0].split("/")[0]
        if top and top not in (own, "third_party"):
            found.add(top)
    return found


def build_dependencies(root, top):
    """(packages the part's non-test rules reference, those only its tests
    reference), as top-level folder names."""
    product, tests = set(), set()
    for folder, _, files in os.walk(os.path.join(root, top)):
        if "BUILD.bazel" not in files:
            continue
        with open(os.path.join(folder, "BUILD.bazel")) as f:
            text = LOAD.sub("", f.read())
        rest = text
        for rule in RULE.finditer(text):
            kind, body = rule.group(1), rule.group(2)
            if kind.endswith("_test") or re.search(r"testonly\s*=\s*(True|1)",
                                                   body):
                tests |= labels_in(rule.group(0), top)
                rest = rest.replace(rule.group(0), "")
        product |= labels_in(rest, top)
    return product, tests - product


def run(root):
    """Returns (problems, counts) for the tree at `root`."""
    page = os.path.join(root, PAGE)
    if not os.path.isfile(page):
        return [f"{PAGE} is missing"], {}
    with open(page) as f:
        text = f.read()
    tops = top_folders(root)
    problems = path_problems(root, text, tops)
    rows = parts_table(text)
    for top in tops:
        if top not in rows:
            problems.append(f"the Parts table has no row for {top}/")
    named = set(CODE.findall(text))
    daemon = os.path.join(root, "daemon")
    subsystems = 0
    if os.path.isdir(daemon):
        for sub in sorted(os.listdir(daemon)):
            if os.path.isfile(os.path.join(daemon, sub, "BUILD.bazel")):
                subsystems += 1
                if f"daemon/{sub}/" not in named:
                    problems.append(f"does not name the daemon subsystem "
                                    f"daemon/{sub}/")
    for top, (may, tests_use) in sorted(rows.items()):
        if not os.path.isdir(os.path.join(root, top)):
            continue  # reported as a missing path
        product, test_only = build_dependencies(root, top)
        for cell, actual, column in ((may, product, "may depend on"),
                                     (tests_use, test_only,
                                      "its tests also use")):
            for p in sorted(actual - cell):
                problems.append(f"{top}/: \"{column}\" lacks {p}/, which "
                                f"its BUILD files reference")
            for p in sorted(cell - actual):
                problems.append(f"{top}/: \"{column}\" lists {p}/, which "
                                f"its BUILD files do not reference")
    counts = {
        "paths and labels named": len(set(CODE.findall(prose(text)))),
        "parts": len(rows),
        "daemon subsystems": subsystems,
    }
    return problems, counts


def main(argv):
    root = os.path.abspath(argv[1] if len(argv) > 1 else ".")
    problems, counts = run(root)
    summary = ", ".join(f"{v} {k}" for k, v in counts.items())
    if problems:
        print(f"check_architecture_doc: {PAGE} disagrees with the tree at "
              f"{root} ({len(problems)}):")
        for p in problems:
            print("  " + p)
        return 1
    print(f"check_architecture_doc: OK ({summary})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
