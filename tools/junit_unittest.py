"""Runs a Python test module's unittest cases and writes Bazel's
$XML_OUTPUT_FILE with one <testcase> per test method (and per failed
subtest), so that tools/count_results.py counts every case, not one per
target.

    if __name__ == "__main__":
        junit_unittest.main()   # the calling module's tests; exits 0 or 1

Stdlib only; used by the Python tests under tools/ and tests/k8s/.
"""

import os
import unittest
import xml.etree.ElementTree as ET


class JUnitResult(unittest.TextTestResult):
    """Records each test's outcome for a JUnit XML file."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.outcomes = []

    def addSuccess(self, test):
        super().addSuccess(test)
        self.outcomes.append((test, None, None))

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self.outcomes.append(
            (test, "failure", self._exc_info_to_string(err, test)))

    def addError(self, test, err):
        super().addError(test, err)
        self.outcomes.append(
            (test, "error", self._exc_info_to_string(err, test)))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self.outcomes.append((test, "skipped", reason))

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            kind = ("failure" if issubclass(err[0], test.failureException)
                    else "error")
            self.outcomes.append(
                (subtest, kind, self._exc_info_to_string(err, test)))


def write_xml(path, suite_name, outcomes):
    """Writes `outcomes` (test, kind or None, text) as JUnit XML to `path`."""
    suites = ET.Element("testsuites")
    ts = ET.SubElement(suites, "testsuite", name=suite_name,
                       tests=str(len(outcomes)))
    for test, kind, text in outcomes:
        name = test.id().split(".", 1)[-1]
        case = ET.SubElement(ts, "testcase", name=name,
                             classname=type(test).__name__)
        if kind in ("failure", "error"):
            ET.SubElement(case, kind, message=text.splitlines()[-1][:200]
                          if text else kind).text = text
        elif kind == "skipped":
            ET.SubElement(case, "skipped", message=text)
    ET.ElementTree(suites).write(path, encoding="utf-8", xml_declaration=True)


def main():
    """Runs the calling (__main__) module's tests; writes $XML_OUTPUT_FILE
    when Bazel sets it; exits 0 when every test passed, else 1."""
    import __main__
    suite = unittest.defaultTestLoader.loadTestsFromModule(__main__)
    runner = unittest.TextTestRunner(resultclass=JUnitResult, verbosity=2)
    result = runner.run(suite)
    path = os.environ.get("XML_OUTPUT_FILE")
    if path:
        write_xml(path, os.path.basename(__main__.__file__), result.outcomes)
    raise SystemExit(0 if result.wasSuccessful() else 1)
