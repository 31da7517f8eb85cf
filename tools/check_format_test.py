"""Runs tools/check_format.py over this repository, and checks the checker
on small trees written here (an unformatted file is named, a formatted one
passes, third_party/ is left alone), so that the repository check cannot
pass by finding nothing.

The repository is found through this file's real path (Bazel's runfiles
link to the source tree); the target is tagged "external" so that Bazel
never serves a cached result after some other file changed. Each test
method is one case in $XML_OUTPUT_FILE (tools/count_results.py counts
them). Stdlib only.
"""

import io
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stdout

HERE = os.path.dirname(os.path.realpath(__file__))
sys.path.insert(0, HERE)

import check_format  # noqa: E402
import junit_unittest  # noqa: E402

REPO = os.path.dirname(HERE)
FORMATTED = "int Add(int a, int b) { return a + b; }\n"
UNFORMATTED = "int Add( int a,int b ){return a+b;}\n"


def run_on(files):
    with tempfile.TemporaryDirectory() as root:
        with open(os.path.join(root, ".clang-format"), "w") as f:
            f.write("BasedOnStyle: Google\n")
        for path, text in files.items():
            full = os.path.join(root, path)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "w") as f:
                f.write(text)
        out = io.StringIO()
        with redirect_stdout(out):
            status = check_format.main(["check_format.py"], root=root)
    return status, out.getvalue()


class CheckFormatTest(unittest.TestCase):
    def test_the_repository_is_formatted(self):
        out = io.StringIO()
        with redirect_stdout(out):
            status = check_format.main(["check_format.py"], root=REPO)
        self.assertEqual(status, 0, out.getvalue())
        self.assertGreater(len(check_format.sources(REPO)), 100)

    def test_an_unformatted_file_is_named(self):
        status, out = run_on({"a/good.cc": FORMATTED, "a/bad.h": UNFORMATTED})
        self.assertEqual(status, 1, out)
        self.assertIn("not formatted: a/bad.h", out)
        self.assertNotIn("good.cc", out)

    def test_formatted_files_and_third_party_pass(self):
        status, out = run_on({"a/good.cc": FORMATTED,
                              "third_party/x/vendored.cc": UNFORMATTED})
        self.assertEqual(status, 0, out)
        self.assertIn("1 of 1 files formatted", out)


if __name__ == "__main__":
    junit_unittest.main()
