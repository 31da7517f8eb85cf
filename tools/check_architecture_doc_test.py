"""Runs tools/check_architecture_doc.py over this repository, and checks
the checker on small trees written here (a good one, and one bad case per
rule), so that the repository check cannot pass by finding nothing.

The repository is found through this file's real path (Bazel's runfiles
link to the source tree), because the page names files of every package:
the target is tagged "external" so that Bazel never serves a cached result
after some other file changed. Each test method is one case in
$XML_OUTPUT_FILE (tools/count_results.py counts them). Stdlib only.
"""

import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.realpath(__file__))
sys.path.insert(0, HERE)

import check_architecture_doc as checker  # noqa: E402
import junit_unittest  # noqa: E402

REPO = os.path.dirname(HERE)

PAGE = """# map

Paths: `lib/lib.h`, `app/`, `//lib:lib`, [other](other.md).

## Parts

| part | folder | what it is | may depend on | its tests also use |
|---|---|---|---|---|
| library | `lib/` | a library | — | — |
| app | `app/` | uses `lib/` | `lib/` | `tools/` |
| docs | `docs/` | this | — | — |
| tools | `tools/` | scripts | — | — |

## Next
"""

GOOD = {
    "WORKSPACE": "",
    "docs/architecture.md": PAGE,
    "docs/other.md": "",
    "lib/BUILD.bazel": 'cc_library(\n    name = "lib",\n'
                       '    hdrs = ["lib.h"],\n'
                       '    visibility = ["//visibility:public"],\n'
                       '    deps = ["//third_party:absl"],\n)\n',
    "lib/lib.h": "",
    "app/BUILD.bazel": ('load("//tools:defs.bzl", "macro")\n'
                        'cc_binary(\n    name = "app",\n'
                        '    deps = ["//lib"],\n)\n'
                        'cc_test(\n    name = "app_test",\n'
                        '    data = ["//tools:script.sh"],\n'
                        '    deps = ["//lib"],\n)\n'),
    "tools/BUILD.bazel": 'exports_files(["script.sh"])\n',
    "tools/script.sh": "",
}


def check(changes=None, removed=()):
    files = dict(GOOD)
    files.update(changes or {})
    for path in removed:
        del files[path]
    with tempfile.TemporaryDirectory() as root:
        for path, text in files.items():
            full = os.path.join(root, path)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "w") as f:
                f.write(text)
        problems, _ = checker.run(root)
    return problems


class CheckerTest(unittest.TestCase):

    def test_good_tree_passes(self):
        self.assertEqual(check(), [])

    def test_missing_path(self):
        problems = check(removed=["lib/lib.h"])
        self.assertIn("names lib/lib.h, which does not exist", problems)

    def test_missing_link(self):
        problems = check(removed=["docs/other.md"])
        self.assertIn("links to other.md, which does not exist", problems)

    def test_missing_label(self):
        problems = check({"lib/BUILD.bazel": 'exports_files(["lib.h"])\n'})
        self.assertIn("names label //lib:lib, which does not exist", problems)

    def test_unnamed_top_level_folder(self):
        problems = check({"extra/BUILD.bazel": ""})
        self.assertIn("the Parts table has no row for extra/", problems)

    def test_unnamed_daemon_subsystem(self):
        problems = check({
            "docs/architecture.md": PAGE.replace(
                "| tools |", "| daemon | `daemon/` | d | — | — |\n| tools |"),
            "daemon/BUILD.bazel": "",
            "daemon/node/BUILD.bazel": "",
        })
        self.assertIn("does not name the daemon subsystem daemon/node/",
                      problems)

    def test_dependency_missing_from_cell(self):
        problems = check({"lib/BUILD.bazel": GOOD["lib/BUILD.bazel"].replace(
            '"//third_party:absl"', '"//tools:script.sh"')})
        self.assertIn('lib/: "may depend on" lacks tools/, which its BUILD '
                      'files reference', problems)

    def test_cell_lists_what_build_does_not(self):
        problems = check({"docs/architecture.md": PAGE.replace(
            "| a library | — |", "| a library | `tools/` |")})
        self.assertIn('lib/: "may depend on" lists tools/, which its BUILD '
                      'files do not reference', problems)

    def test_test_dependencies_have_their_own_column(self):
        problems = check({"docs/architecture.md": PAGE.replace(
            "| `lib/` | `tools/` |", "| `lib/` | — |")})
        self.assertIn('app/: "its tests also use" lacks tools/, which its '
                      'BUILD files reference', problems)


class RepositoryTest(unittest.TestCase):

    def test_architecture_page_matches_the_tree(self):
        self.assertTrue(os.path.isfile(os.path.join(REPO, "WORKSPACE")),
                        f"not the repository root: {REPO}")
        problems, counts = checker.run(REPO)
        summary = ", ".join(f"{v} {k}" for k, v in counts.items())
        print(f"checked {REPO}: {summary}")
        # Not vacuous: the page names every part and many files.
        self.assertGreaterEqual(counts.get("parts", 0), 15, summary)
        self.assertGreater(counts.get("paths and labels named", 0), 100,
                           summary)
        self.assertEqual(
            problems, [],
            "\ndocs/architecture.md disagrees with the tree; update the "
            "page (or run /usr/bin/python3 tools/check_architecture_doc.py):"
            "\n  " + "\n  ".join(problems))


if __name__ == "__main__":
    junit_unittest.main()
