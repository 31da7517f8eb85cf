"""deploy/Dockerfile is a recipe that builds what the manifests run.

No container engine is available here, so the recipe is checked statically
against what can be checked: its stages and base images (a CPU and a GPU
flavour), that the build stage installs the project's build dependencies
(tools/setup.sh), that the runtime stage installs the Debian package of every
shared library the built binaries link (ldd + dpkg -S), that the GPU flavour
builds against and ships the CUDA runtime and NCCL, that it ships every
program the manifests run, and that it runs as the unprivileged user the
manifests expect.

The binaries checked are this machine's build. Where this machine has a CUDA
Toolkit (/usr/local/cuda), tools/cuda.bzl links `serving` with libcudart and
libnccl from there (rpath); the image's CPU build stage has no CUDA Toolkit,
so its `serving` links neither. Those two libraries are therefore checked
against the GPU runtime stage, everything else against the CPU one.
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
           "serving": "examples/serving"}
# What tools/cuda.bzl links when it finds CUDA (-lcudart -lnccl), by soname
# prefix, and the package of NVIDIA's repository that provides it at run
# time (cuda-cudart-<version> names the CUDA version).
CUDA_LIBRARIES = {"libcudart.so.": "cuda-cudart-", "libnccl.so.": "libnccl2"}


def dockerfile():
    with open(manifests.runfile("deploy/Dockerfile")) as f:
        text = f.read()
    # Join continuation lines, drop comments.
    lines = []
    for line in text.replace("\\\n", " ").splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            lines.append(line.strip())
    return text, lines


def stages(lines, **build_args):
    """[{"name", "image", "lines"}] with the global ARGs (defaults, or
    `build_args`) substituted in FROM; an unnamed stage's name is None."""
    args = {}
    result = []
    for line in lines:
        word, _, rest = line.partition(" ")
        if word == "ARG" and not result:
            name, _, value = rest.partition("=")
            args[name] = build_args.get(name, value)
        elif word == "FROM":
            words = rest.split()
            image = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), ""),
                           words[0])
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" \
                else None
            result.append({"name": name, "image": image, "lines": []})
        elif result:
            result[-1]["lines"].append(line)
    return result


def global_args(lines):
    args = {}
    for line in lines:
        word, _, rest = line.partition(" ")
        if word == "FROM":
            break
        if word == "ARG":
            name, _, value = rest.partition("=")
            args[name] = value
    return args


def chain(all_stages, stage):
    """`stage` and the stages it is built FROM, nearest first."""
    by_name = {s["name"]: s for s in all_stages if s["name"]}
    out = [stage]
    while stage["image"] in by_name:
        stage = by_name[stage["image"]]
        out.append(stage)
    return out


def bare(package):
    """A package name without its =version."""
    return package.split("=", 1)[0]


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


def runpath(binary):
    """The binary's DT_RUNPATH / DT_RPATH folders."""
    out = subprocess.run(["readelf", "-d", binary], capture_output=True,
                         text=True, check=True).stdout
    folders = []
    for m in re.finditer(r"\((?:RUNPATH|RPATH)\).*\[(.*)\]", out):
        folders += m.group(1).split(":")
    return folders


def cuda_library(path):
    """The CUDA_LIBRARIES key of a linked library, or None."""
    name = os.path.basename(path)
    return next((k for k in CUDA_LIBRARIES if name.startswith(k)), None)


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
        cls.args = global_args(cls.lines)
        cls.stages = {flavor: stages(cls.lines, FLAVOR=flavor)
                      for flavor in ("cpu", "gpu")}
        cls.named = {s["name"]: s for s in cls.stages["cpu"] if s["name"]}

    def final(self, flavor):
        """The stages the image of `flavor` is made of: (build chain,
        runtime chain), nearest first."""
        all_stages = self.stages[flavor]
        runtime = all_stages[-1]
        copies = [l for l in runtime["lines"] if l.startswith("COPY --from=")]
        self.assertEqual(copies, ["COPY --from=build /out/ /"])
        build = next(s for s in all_stages if s["name"] == "build")
        return chain(all_stages, build), chain(all_stages, runtime)

    def packages(self, chain_of_stages):
        return {bare(p) for s in chain_of_stages for p in apt_packages(s)}

    def test_two_flavours_on_debian_bookworm(self):
        self.assertEqual(self.args["FLAVOR"], "cpu")
        for flavor in ("cpu", "gpu"):
            with self.subTest(flavor=flavor):
                build, runtime = self.final(flavor)
                self.assertEqual([s["name"] for s in build],
                                 ["build", f"build-{flavor}"] +
                                 (["build-cpu"] if flavor == "gpu" else []))
                self.assertEqual(build[-1]["image"], "debian:bookworm")
                self.assertEqual([s["name"] for s in runtime],
                                 [None, f"runtime-{flavor}"] +
                                 (["runtime-cpu"] if flavor == "gpu" else []))
                self.assertEqual(runtime[-1]["image"], "debian:bookworm-slim")
        # The default target (the last stage) is the CPU image.
        self.assertIsNone(self.stages["cpu"][-1]["name"])
        self.assertEqual(self.stages["cpu"][-1]["image"], "runtime-cpu")

    def test_build_stage_installs_the_build_dependencies(self):
        needed = setup_packages() - NOT_FOR_BUILDING
        build, _ = self.final("cpu")
        missing = needed - self.packages(build)
        self.assertEqual(missing, set(),
                         "tools/setup.sh installs build dependencies the image's "
                         "build stage does not")
        script = " ".join(build[0]["lines"])
        self.assertIn("bazel --batch build -c opt", script)
        for target in ("//daemon:rankd", "//client:rankctl",
                       "//examples:serving"):
            self.assertIn(target, script)

    def test_cpu_flavour_builds_without_cuda(self):
        build, runtime = self.final("cpu")
        for s in build + runtime:
            for line in s["lines"]:
                self.assertFalse(line.startswith("ENV CUDA_HOME"), s["name"])
                self.assertNotIn("nvidia.com", line, s["name"])
        self.assertFalse({p for p in self.packages(build + runtime)
                          if "cuda" in p or "nccl" in p})

    def test_gpu_flavour_builds_with_cuda_and_nccl_and_ships_them(self):
        build, runtime = self.final("gpu")
        gpu_build = self.named["build-gpu"]
        installed = {bare(p) for p in apt_packages(gpu_build)}
        self.assertIn("cuda-cudart-dev-$cuda", installed)
        self.assertIn("libnccl-dev", installed)
        self.assertIn("libnccl2", installed)
        # NVIDIA's repository (its keyring), for the configured CUDA version.
        self.assertEqual(self.args["CUDA_REPO"], "debian12")
        self.assertRegex(self.args["CUDA_VERSION"], r"^\d+\.\d+$")
        repo = ("https://developer.download.nvidia.com/compute/cuda/repos/"
                "${CUDA_REPO}/x86_64/cuda-keyring_1.1-1_all.deb")
        for stage in (gpu_build, self.named["runtime-gpu"]):
            lines = stage["lines"]
            self.assertIn("ARG CUDA_VERSION", lines)
            self.assertIn("ARG CUDA_REPO", lines)
            self.assertTrue(any(l.startswith("ADD " + repo) for l in lines),
                            stage["name"])
            script = " ".join(lines)
            self.assertIn('cuda="$(echo "${CUDA_VERSION}" | tr . -)"', script)
            self.assertIn('v="+cuda${CUDA_VERSION}"', script)
        # tools/cuda.bzl finds them through CUDA_HOME (and nccl.h in /usr).
        env = [l for l in gpu_build["lines"] if l.startswith("ENV CUDA_HOME=")]
        self.assertEqual(env, ["ENV CUDA_HOME=/usr/local/cuda-${CUDA_VERSION}/"
                               "targets/x86_64-linux"])
        # The build refuses a serving binary without NCCL.
        script = " ".join(build[0]["lines"])
        self.assertIn("ARG FLAVOR", build[0]["lines"])
        self.assertIn("ldd /out/usr/local/bin/serving | grep -q 'libnccl", script)
        # The runtime has the CUDA runtime and NCCL, and every CPU library.
        shipped = self.packages(runtime)
        self.assertIn("cuda-cudart-$cuda", shipped)
        self.assertIn("libnccl2", shipped)
        self.assertLessEqual(self.packages(self.final("cpu")[1]), shipped)
        self.assertIn("ENV NVIDIA_DRIVER_CAPABILITIES=compute,utility",
                      self.named["runtime-gpu"]["lines"])

    def test_runtime_stage_has_every_linked_library(self):
        cpu = self.packages(self.final("cpu")[1]) | IN_SLIM_BASE
        gpu = self.packages(self.final("gpu")[1]) | IN_SLIM_BASE
        for name, path in SHIPPED.items():
            with self.subTest(binary=name):
                binary = manifests.runfile(path)
                linked = linked_packages(binary)
                cuda = {p: cuda_library(p) for p in linked if cuda_library(p)}
                # The CUDA runtime and NCCL: only through tools/cuda.bzl's
                # rpath (this machine's CUDA Toolkit), only in `serving`.
                for library, kind in cuda.items():
                    self.assertEqual(name, "serving", library)
                    self.assertIn(os.path.dirname(library), runpath(binary))
                    self.assertTrue(any(p.startswith(CUDA_LIBRARIES[kind])
                                        for p in gpu),
                                    f"the GPU runtime stage installs no "
                                    f"{CUDA_LIBRARIES[kind]}* for {library}")
                debian = {p: o for p, o in linked.items() if p not in cuda}
                unknown = [p for p, owner in debian.items() if owner is None]
                self.assertEqual(unknown, [], "libraries of no Debian package")
                missing = set(debian.values()) - cpu
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
        self.assertIn("serving", programs)
        build = " ".join(self.named["build"]["lines"])
        for program, path in SHIPPED.items():
            package, _, target = path.rpartition("/")
            self.assertIn(f"//{package}:{target}", build)

    def test_runs_as_the_manifests_unprivileged_user(self):
        for flavor in ("cpu", "gpu"):
            with self.subTest(flavor=flavor):
                _, runtime = self.final(flavor)
                lines = [l for s in runtime for l in s["lines"]]
                users = [l.split()[1] for l in lines if l.startswith("USER ")]
                self.assertEqual(users, ["65532:65532"])
                self.assertTrue(any("useradd" in l and "--uid 65532" in l
                                    for l in lines))
                exposed = {w for l in lines if l.startswith("EXPOSE")
                           for w in l.split()[1:]}
                self.assertEqual(exposed, {"7421", "9421"})

    def test_more_targets_can_be_added_and_context_is_lean(self):
        self.assertIn("ARG EXTRA_TARGETS", self.text)
        self.assertIn("${TARGETS} ${EXTRA_TARGETS}", self.text)
        with open(manifests.runfile("deploy/Dockerfile.dockerignore")) as f:
            ignored = f.read().split()
        for entry in (".git", "**/node_modules", "bazel-*"):
            self.assertIn(entry, ignored)


if __name__ == "__main__":
    manifests.main()
