"""Runs tools/check_internal_includes.py over this repository, and checks the
checker itself on small trees written here (a bad and a good case of every
rule), so that the repository check cannot pass by finding nothing.

The repository is found through this file's real path (Bazel's runfiles
link to the source tree), because its rule spans every package: the
target is tagged "external" so that Bazel never serves a cached result
after some other file changed. Each test method is one case in
$XML_OUTPUT_FILE (tools/count_results.py counts them). Stdlib only.
"""

import io
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stdout

HERE = os.path.dirname(os.path.realpath(__file__))
sys.path.insert(0, HERE)

import check_internal_includes as checker  # noqa: E402
import junit_unittest  # noqa: E402

REPO = os.path.dirname(HERE)


def write_tree(root, files):
    for path, text in files.items():
        full = os.path.join(root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w") as f:
            f.write(text)


def check(files):
    with tempfile.TemporaryDirectory() as root:
        write_tree(root, files)
        violations, counts = checker.run(root)
    return violations, counts


# A package `lib` with a private header, a public one, a test helper in
# testing/ and a subpackage; `app` outside it.
PRIVATE = "namespace demo::lib::internal {\nint Helper();\n}\n"
GOOD = {
    "WORKSPACE": "",
    "lib/BUILD.bazel": (
        'package(default_visibility = ["//visibility:private"])\n'
        'cc_library(name = "impl", srcs = ["internal/helper.h"],\n'
        '           hdrs = ["lib.h"], visibility = ["//visibility:public"])\n'
        'cc_library(name = "helper", hdrs = ["internal/helper.h"])\n'),
    "lib/lib.h": "namespace demo::lib {\nint Api();\n}\n",
    "lib/lib.cc": '#include "lib/lib.h"\n#include "lib/internal/helper.h"\n',
    "lib/internal/helper.h": PRIVATE,
    "lib/internal/helper.cc": '#include "lib/internal/helper.h"\n',
    "lib/testing/fake.cc": '#include "lib/internal/helper.h"\n',
    "lib/sub/other.cc": "// no includes\n",
    "app/BUILD.bazel": 'cc_binary(name = "app", srcs = ["main.cc"])\n',
    "app/main.cc": '#include "lib/lib.h"\n#include <vector>\n',
}


class CheckerTest(unittest.TestCase):

    def test_good_tree_passes(self):
        violations, counts = check(GOOD)
        self.assertEqual(violations, [])
        self.assertEqual(counts["internal/ includes"], 3)
        self.assertEqual(counts["internal/ headers"], 1)

    def test_include_from_another_package_fails(self):
        tree = dict(GOOD)
        tree["app/main.cc"] = '#include "lib/lib.h"\n#include "lib/internal/helper.h"\n'
        violations, _ = check(tree)
        self.assertEqual(len(violations), 1, violations)
        self.assertTrue(violations[0].startswith(
            "app/main.cc:2: includes lib/internal/helper.h, which is private "
            "to //lib"), violations[0])

    def test_include_from_a_subpackage_fails(self):
        # lib/sub has its own BUILD: another package, not lib's inside.
        tree = dict(GOOD)
        tree["lib/sub/BUILD.bazel"] = ""
        tree["lib/sub/other.cc"] = '#include "lib/internal/helper.h"\n'
        violations, _ = check(tree)
        self.assertEqual(len(violations), 1, violations)
        self.assertIn("lib/sub/other.cc:1: includes lib/internal/helper.h",
                      violations[0])

    def test_testing_subpackage_counts_as_inside(self):
        tree = dict(GOOD)
        tree["lib/testing/BUILD.bazel"] = ""
        self.assertEqual(check(tree)[0], [])

    def test_header_without_internal_namespace_fails(self):
        tree = dict(GOOD)
        tree["lib/internal/helper.h"] = (
            "// namespace internal { in a comment does not count\n"
            "namespace demo::lib {\nint Helper();\n}\n")
        violations, _ = check(tree)
        self.assertEqual(len(violations), 1, violations)
        self.assertIn("lib/internal/helper.h:1: declares no `internal` "
                      "namespace", violations[0])

    def test_nested_internal_namespace_passes(self):
        tree = dict(GOOD)
        tree["lib/internal/helper.h"] = (
            "namespace demo {\nnamespace internal {\nint Helper();\n}\n}\n")
        self.assertEqual(check(tree)[0], [])

    def test_internal_header_in_visible_hdrs_fails(self):
        tree = dict(GOOD)
        tree["lib/BUILD.bazel"] = GOOD["lib/BUILD.bazel"].replace(
            'name = "helper", hdrs = ["internal/helper.h"]',
            'name = "helper", hdrs = ["internal/helper.h"], '
            'visibility = ["//app:__pkg__"]')
        violations, _ = check(tree)
        self.assertEqual(len(violations), 1, violations)
        self.assertIn("lib/BUILD.bazel:4: internal/helper.h is in the hdrs of "
                      "a target visible outside //lib (//app:__pkg__)",
                      violations[0])

    def test_visibility_not_written_out_counts_as_visible(self):
        # A variable (or select()) could name any package.
        tree = dict(GOOD)
        tree["lib/BUILD.bazel"] = "VIS = [\"//app:__pkg__\"]\n" + GOOD[
            "lib/BUILD.bazel"].replace(
                'name = "helper", hdrs = ["internal/helper.h"]',
                'name = "helper", hdrs = ["internal/helper.h"], '
                'visibility = VIS')
        violations, _ = check(tree)
        self.assertEqual(len(violations), 1, violations)
        self.assertIn("internal/helper.h is in the hdrs of a target visible "
                      "outside //lib (<not a written-out list>)",
                      violations[0])

    def test_internal_headers_by_glob_or_textual_hdrs_fail(self):
        for attribute in ('hdrs = glob(["internal/*.h"])',
                          'textual_hdrs = ["internal/helper.h"]'):
            tree = dict(GOOD)
            tree["lib/BUILD.bazel"] = GOOD["lib/BUILD.bazel"].replace(
                'name = "helper", hdrs = ["internal/helper.h"]',
                'name = "helper", ' + attribute +
                ', visibility = ["//app:__pkg__"]')
            violations, _ = check(tree)
            self.assertEqual(len(violations), 1, (attribute, violations))
            self.assertIn("is in the hdrs of a target visible outside //lib",
                          violations[0])

    def test_public_header_including_internal_fails(self):
        tree = dict(GOOD)
        tree["lib/lib.h"] = '#include "lib/internal/helper.h"\n'
        violations, _ = check(tree)
        self.assertEqual(len(violations), 1, violations)
        self.assertIn("lib/lib.h:1: public header includes "
                      "lib/internal/helper.h", violations[0])

    def test_skips_third_party_and_build_outputs(self):
        tree = dict(GOOD)
        tree["third_party/x/BUILD.bazel"] = ""
        tree["third_party/x/a.cc"] = '#include "lib/internal/helper.h"\n'
        tree["rust/target/gen.cc"] = '#include "lib/internal/helper.h"\n'
        self.assertEqual(check(tree)[0], [])

    def test_main_reports_file_line_and_fails(self):
        tree = dict(GOOD)
        tree["app/main.cc"] = '#include "lib/internal/helper.h"\n'
        with tempfile.TemporaryDirectory() as root:
            write_tree(root, tree)
            out = io.StringIO()
            with redirect_stdout(out):
                code = checker.main(["check_internal_includes.py", root])
        self.assertEqual(code, 1)
        self.assertIn("app/main.cc:1: includes lib/internal/helper.h",
                      out.getvalue())


class RepositoryTest(unittest.TestCase):

    def test_repository_keeps_internal_private(self):
        self.assertTrue(os.path.isfile(os.path.join(REPO, "WORKSPACE")),
                        f"not the repository root: {REPO}")
        violations, counts = checker.run(REPO)
        summary = ", ".join(f"{v} {k}" for k, v in counts.items())
        print(f"checked {REPO}: {summary}")
        # Not vacuous: the tree has hundreds of sources and several
        # internal/ folders, each included from inside its package.
        self.assertGreater(counts["source files"], 200, summary)
        self.assertGreater(counts["internal/ includes"], 20, summary)
        self.assertGreater(counts["internal/ headers"], 10, summary)
        self.assertEqual(
            violations, [],
            "\n\"internal/ means private\" (docs/architecture.md) is broken; "
            "run /usr/bin/python3 tools/check_internal_includes.py:\n  " +
            "\n  ".join(violations))


if __name__ == "__main__":
    junit_unittest.main()
