"""Test helpers: find the deploy/ manifests and the built binaries in Bazel's
runfiles, render kustomizations with `kubectl kustomize`, and write JUnit
XML so that tools/count_results.py counts each test case."""

import os
import shutil
import subprocess
import tempfile
import unittest
import xml.etree.ElementTree as ET

import yaml

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"


def runfile(path):
    """Absolute path of a workspace file in the test's runfiles."""
    for base in (os.environ.get("TEST_SRCDIR"), os.environ.get("RUNFILES_DIR")):
        if base:
            candidate = os.path.join(base, "rankd", path)
            if os.path.exists(candidate):
                return candidate
    here = os.path.dirname(os.path.abspath(__file__))
    candidate = os.path.join(here, "..", "..", path)
    if os.path.exists(candidate):
        return os.path.abspath(candidate)
    raise FileNotFoundError(path)


def copy_tree(path):
    """A real (symlink-free) copy of a runfiles folder: kustomize refuses
    files that resolve outside the kustomization root."""
    dest = tempfile.mkdtemp(prefix="rk-manifests-")
    target = os.path.join(dest, os.path.basename(path.rstrip("/")))
    shutil.copytree(runfile(path), target, symlinks=False)
    return dest, target


class Deploy:
    """A private copy of deploy/kubernetes; remove with close()."""

    def __init__(self):
        self.tmp, self.root = copy_tree("deploy/kubernetes")
        # The job's credentials, as a user writes them before applying.
        subprocess.run([os.path.join(self.root, "components", "credentials",
                                     "create.sh")],
                       check=True, capture_output=True, timeout=60)

    def kustomizations(self):
        """Every folder holding a kustomization.yaml, relative to the root."""
        found = []
        for dirpath, _, files in os.walk(self.root):
            if "kustomization.yaml" in files:
                found.append(os.path.relpath(dirpath, self.root))
        return sorted(found)

    def render_text(self, name):
        p = subprocess.run([KUBECTL, "kustomize", os.path.join(self.root, name)],
                           capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            raise RuntimeError(f"kubectl kustomize {name}: {p.stderr}")
        return p.stdout

    def render(self, name):
        return [o for o in yaml.safe_load_all(self.render_text(name)) if o]

    def close(self):
        shutil.rmtree(self.tmp, ignore_errors=True)


def by_kind(objects, kind):
    return [o for o in objects if o["kind"] == kind]


def pod_template(workload):
    """The pod template of a workload (the worker template for an LWS)."""
    if workload["kind"] == "LeaderWorkerSet":
        return workload["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    return workload["spec"]["template"]


def workloads(objects):
    return [o for o in objects
            if o["kind"] in ("LeaderWorkerSet", "StatefulSet", "Job")]


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
        self.outcomes.append((test, "failure", self._exc_info_to_string(err, test)))

    def addError(self, test, err):
        super().addError(test, err)
        self.outcomes.append((test, "error", self._exc_info_to_string(err, test)))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self.outcomes.append((test, "skipped", reason))

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            kind = "failure" if issubclass(err[0], test.failureException) else "error"
            self.outcomes.append((subtest, kind, self._exc_info_to_string(err, test)))


def main():
    """Runs the calling module's tests; writes $XML_OUTPUT_FILE."""
    import __main__
    suite = unittest.defaultTestLoader.loadTestsFromModule(__main__)
    runner = unittest.TextTestRunner(resultclass=JUnitResult, verbosity=2)
    result = runner.run(suite)
    path = os.environ.get("XML_OUTPUT_FILE")
    if path:
        suites = ET.Element("testsuites")
        ts = ET.SubElement(suites, "testsuite", name=__main__.__file__,
                           tests=str(len(result.outcomes)))
        for test, kind, text in result.outcomes:
            name = test.id().split(".", 1)[-1]
            case = ET.SubElement(ts, "testcase", name=name,
                                 classname=type(test).__name__)
            if kind in ("failure", "error"):
                ET.SubElement(case, kind, message=text.splitlines()[-1][:200]
                              if text else kind).text = text
            elif kind == "skipped":
                ET.SubElement(case, "skipped", message=text)
        ET.ElementTree(suites).write(path, encoding="utf-8",
                                     xml_declaration=True)
    raise SystemExit(0 if result.wasSuccessful() else 1)
