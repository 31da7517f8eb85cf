"""Test helpers: find the deploy/ manifests and the built binaries in Bazel's
runfiles, render kustomizations with `kubectl kustomize`, and write JUnit
XML so that tools/count_results.py counts each test case."""

import os
import shutil
import subprocess
import sys
import tempfile

import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.realpath(__file__)))), "tools"))
import junit_unittest  # noqa: E402

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


# The k8s tests' runner: one JUnit <testcase> per test (tools/junit_unittest.py).
main = junit_unittest.main
