"""deploy/Dockerfile is a recipe that builds what the manifests run.

No container engine is available here, so the recipe is checked statically
against what can be checked: its stages and base images, that the build
stage installs the project's build dependencies (tools/setup.sh), that the
runtime stage installs the Debian package of every shared library the built
binaries link (ldd + dpkg -S), that it ships every program the manifests
run, and that it runs as the unprivileged user the manifests expect.
"""

import os
import re
import shlex
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import manifests  # noqa: E402

# Packages of tools/setup.sh that only tests, demos or benchmarks need.
NOT_FOR_BUILDING = {
    "python3-yaml", "kubectl", "nodejs", "npm", "iproute2", "procps",
    "openssl", "python3-torch", "curl",
}
# In debian:bookworm-slim already (essential or required by apt).
IN_SLIM_BASE = {"libc6", "libgcc-s1", "libstdc++6", "zlib1g"}
SHIPPED = {"rankd": "daemon/rankd", "rankctl": "client/rankctl",
           "rank_worker": "tests/rank_worker"}


def dockerfile():
    with open(manifests.runfile("deploy/Dockerfile")) as f:
        text = f.read()
    # Join continuation lines, drop comments.
    lines = []
    for line in text.replace("\\\n", " ").splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            lines.append(line.strip())
    return text, lines


def stages(lines):
    args = {}
    result = []
    for line in lines:
        word, _, rest = line.partition(" ")
        if word == "ARG" and not result:
            name, _, value = rest.partition("=")
            args[name] = value
        elif word == "FROM":
            image = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), ""),
                           rest.split()[0])
            result.append({"image": image, "lines": []})
        elif result:
            result[-1]["lines"].append(line)
    return result


def apt_packages(stage):
    packages = set()
    for line in stage["lines"]:
        if not line.startswith("RUN"):
            continue
        for command in line[3:].split("&&"):
            words = shlex.split(command)
            if "apt-get" in words and "install" in words:
                packages |= {w for w in words[words.index("install") + 1:]
                             if not w.startswith("-")}
    return packages


def setup_packages():
    with open(manifests.runfile("tools/setup.sh")) as f:
        text = f.read()
    block = re.search(r"^packages=\((.*?)\)", text, re.S | re.M).group(1)
    words = set()
    for line in block.splitlines():
        words |= set(line.split("#")[0].split())
    return words


def linked_packages(binary):
    """{library path: Debian package owning it (None if none)}."""
    out = subprocess.run(["ldd", binary], capture_output=True, text=True,
                         check=True).stdout
    candidates = {}
    for line in out.splitlines():
        m = re.search(r"=> (/\S+)", line)
        if not m:
            continue
        path = m.group(1)
        real = os.path.realpath(path)
        # dpkg knows each file under one name: the link or its target, with
        # or without /usr (merged /usr).
        names = {path, real, os.path.join(os.path.dirname(path),
                                          os.path.basename(real))}
        names |= {n[len("/usr"):] for n in names if n.startswith("/usr/")}
        names |= {"/usr" + n for n in names if not n.startswith("/usr/")}
        candidates[path] = names
    every = sorted(set().union(*candidates.values()))
    # One dpkg query for all of them (each query reads the whole database).
    p = subprocess.run(["dpkg", "-S", *every], capture_output=True, text=True)
    owner_of = {}
    for line in p.stdout.splitlines():
        package, _, file = line.partition(": ")
        owner_of[file.strip()] = package.split(":")[0]
    return {path: next((owner_of[n] for n in sorted(names) if n in owner_of),
                       None)
            for path, names in candidates.items()}


class ImageRecipeTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.text, cls.lines = dockerfile()
        cls.stages = stages(cls.lines)

    def test_multi_stage_on_debian_bookworm(self):
        self.assertEqual([s["image"] for s in self.stages],
                         ["debian:bookworm", "debian:bookworm-slim"])
        self.assertIn("COPY --from=build /out/ /", self.stages[1]["lines"])

    def test_build_stage_installs_the_build_dependencies(self):
        needed = setup_packages() - NOT_FOR_BUILDING
        missing = needed - apt_packages(self.stages[0])
        self.assertEqual(missing, set(),
                         "tools/setup.sh installs build dependencies the image's "
                         "build stage does not")
        build = " ".join(self.stages[0]["lines"])
        self.assertIn("bazel --batch build -c opt", build)
        for target in ("//daemon:rankd", "//client:rankctl", "//tests:rank_worker"):
            self.assertIn(target, build)

    def test_runtime_stage_has_every_linked_library(self):
        runtime = apt_packages(self.stages[1]) | IN_SLIM_BASE
        for name, path in SHIPPED.items():
            with self.subTest(binary=name):
                linked = linked_packages(manifests.runfile(path))
                unknown = [p for p, owner in linked.items() if owner is None]
                self.assertEqual(unknown, [], "libraries of no Debian package")
                missing = {o for o in linked.values()} - runtime
                self.assertEqual(missing, set(),
                                 f"{name} links libraries from these packages, "
                                 "which the runtime stage does not install")

    def test_ships_every_program_the_manifests_run(self):
        deploy = manifests.Deploy()
        self.addCleanup(deploy.close)
        programs = set()
        for name in deploy.kustomizations():
            for o in manifests.workloads(deploy.render(name)):
                spec = manifests.pod_template(o)["spec"]
                for c in spec.get("initContainers", []) + spec["containers"]:
                    programs.add(c["command"][0])
                    for probe in ("startupProbe", "readinessProbe",
                                  "livenessProbe"):
                        if "exec" in c.get(probe, {}):
                            programs.add(c[probe]["exec"]["command"][0])
                    script = " ".join(c.get("args", []))
                    programs |= {p for p in SHIPPED if re.search(
                        rf"(^|\s){p}\s", script)}
        shipped = set(SHIPPED) | {"/bin/sh"}  # /bin/sh: in the Debian base.
        self.assertLessEqual(programs, shipped)
        self.assertIn("rank_worker", programs)

    def test_runs_as_the_manifests_unprivileged_user(self):
        runtime = self.stages[1]["lines"]
        users = [l.split()[1] for l in runtime if l.startswith("USER ")]
        self.assertEqual(users, ["65532:65532"])
        self.assertTrue(any("useradd" in l and "--uid 65532" in l
                            for l in runtime))
        exposed = {w for l in runtime if l.startswith("EXPOSE")
                   for w in l.split()[1:]}
        self.assertEqual(exposed, {"7421", "9421"})

    def test_example_slot_is_marked_and_context_is_lean(self):
        self.assertIn("SLOT for the example serving binary", self.text)
        self.assertIn("EXTRA_TARGETS", self.text)
        with open(manifests.runfile("deploy/Dockerfile.dockerignore")) as f:
            ignored = f.read().split()
        for entry in (".git", "**/node_modules", "bazel-*"):
            self.assertIn(entry, ignored)


if __name__ == "__main__":
    manifests.main()
