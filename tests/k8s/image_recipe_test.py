"""deploy/Dockerfile is a recipe that builds what the manifests run.

No container engine is available here, so the recipe is checked statically
against what can be checked: its stages and base images (one build stage,
a CPU and a GPU runtime flavour), that the build stage installs the project's
build dependencies (tools/setup.sh) and no CUDA, that the runtime stage
installs the Debian package of every shared library the built binaries link
(ldd + dpkg -S), that the GPU flavour ships the CUDA runtime and NCCL that
`serving` opens at run time, where the loader finds them, that it ships
every program the manifests run, and that it runs as the unprivileged user
the manifests expect.

The binaries checked are this machine's build, which is the image's: rankd
is built without CUDA and the NCCL backend opens libcudart and libnccl with
dlopen (dataplane/nccl/internal/native_library.h), so no binary links them,
whether or not this machine has them. The sonames `serving` opens are read
from the binary and checked against the GPU runtime stage.
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
           "rankrun": "launcher/rankrun", "serving": "examples/serving"}
# What the NCCL backend opens at run time, by soname prefix. No binary may
# link these: the CPU image, which lacks them, would not start.
CUDA_LIBRARIES = ("libcudart.so.", "libnccl.so.")


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


def is_cuda_library(path):
    return os.path.basename(path).startswith(CUDA_LIBRARIES)


def dlopened_sonames(binary, prefix):
    """The sonames starting with `prefix` that `binary` names as strings
    (what it passes to dlopen), e.g. {"libcudart.so.13", ...}."""
    with open(binary, "rb") as f:
        data = f.read()
    return {m.group(1).decode() for m in re.finditer(
        rb"(" + re.escape(prefix.encode()) + rb"\d+)\0", data)}


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
                # One build stage: the flavours ship the same binaries.
                self.assertEqual([s["name"] for s in build], ["build"])
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
                       "//launcher:rankrun", "//examples:serving"):
            self.assertIn(target, script)

    def test_no_cuda_outside_the_gpu_runtime_stage(self):
        for flavor in ("cpu", "gpu"):
            with self.subTest(flavor=flavor):
                build, runtime = self.final(flavor)
                # The GPU runtime stage is the only place CUDA may appear.
                checked = build + (runtime if flavor == "cpu" else [])
                for s in checked:
                    for line in s["lines"]:
                        self.assertNotIn("CUDA_HOME", line, s["name"])
                        self.assertNotIn("nvidia.com", line, s["name"])
                        self.assertNotIn("ARG CUDA_", line, s["name"])
                self.assertFalse({p for p in self.packages(checked)
                                  if "cuda" in p or "nccl" in p})
                # Nothing in the build depends on the flavour.
                self.assertNotIn("ARG FLAVOR", build[0]["lines"])

    def test_gpu_runtime_ships_what_serving_opens(self):
        _, runtime = self.final("gpu")
        gpu = self.named["runtime-gpu"]
        lines = gpu["lines"]
        script = " ".join(" ".join(lines).split())  # single spaces
        # NVIDIA's repository (its keyring), for the configured CUDA version.
        self.assertEqual(self.args["CUDA_REPO"], "debian12")
        self.assertRegex(self.args["CUDA_VERSION"], r"^\d+\.\d+$")
        repo = ("https://developer.download.nvidia.com/compute/cuda/repos/"
                "${CUDA_REPO}/x86_64/cuda-keyring_1.1-1_all.deb")
        self.assertIn("ARG CUDA_VERSION", lines)
        self.assertIn("ARG CUDA_REPO", lines)
        self.assertTrue(any(l.startswith("ADD " + repo) for l in lines))
        self.assertIn('cuda="$(echo "${CUDA_VERSION}" | tr . -)"', script)
        self.assertIn('v="+cuda${CUDA_VERSION}"', script)
        # The runtime libraries only (no -dev packages, no toolkit), and
        # every CPU library.
        installed = {bare(p) for p in apt_packages(gpu)}
        self.assertEqual(installed, {"cuda-cudart-$cuda", "libnccl2"})
        self.assertLessEqual(self.packages(self.final("cpu")[1]),
                             self.packages(runtime))
        self.assertIn("ENV NVIDIA_DRIVER_CAPABILITIES=compute,utility", lines)

        # What `serving` opens: libcudart of the default CUDA version's major
        # (cuda-cudart-X-Y ships libcudart.so.X) and libnccl.so.2 (libnccl2).
        serving = manifests.runfile(SHIPPED["serving"])
        cudart = dlopened_sonames(serving, "libcudart.so.")
        nccl = dlopened_sonames(serving, "libnccl.so.")
        major = self.args["CUDA_VERSION"].split(".")[0]
        self.assertIn(f"libcudart.so.{major}", cudart)
        self.assertEqual(nccl, {"libnccl.so.2"})
        # ... through the loader: the stage registers libcudart's folder
        # with ldconfig, and fails unless the cache has a libcudart that
        # serving opens (and no other) and libnccl.so.2.
        self.assertIn('echo "/usr/local/cuda-${CUDA_VERSION}/targets/'
                      'x86_64-linux/lib" > /etc/ld.so.conf.d/', script)
        self.assertIn("&& ldconfig &&", script)
        pattern = re.search(r"ldconfig -p \| grep -Eq '([^']*libcudart[^']*)'",
                            script)
        self.assertIsNotNone(pattern, "no check of libcudart in ldconfig -p")
        for n in range(10, 20):
            soname = f"libcudart.so.{n}"
            self.assertEqual(bool(re.search(pattern.group(1), soname + " ")),
                             soname in cudart, soname)
        self.assertIn("ldconfig -p | grep -q 'libnccl\\.so\\.2 '", script)

    def test_runtime_stage_has_every_linked_library(self):
        cpu = self.packages(self.final("cpu")[1]) | IN_SLIM_BASE
        for name, path in SHIPPED.items():
            with self.subTest(binary=name):
                binary = manifests.runfile(path)
                linked = linked_packages(binary)
                # The CUDA runtime and NCCL are opened at run time, never
                # linked (nor found through an rpath to this machine's CUDA).
                self.assertEqual([p for p in linked if is_cuda_library(p)],
                                 [], f"{name} links CUDA libraries")
                self.assertEqual([d for d in runpath(binary) if "cuda" in d],
                                 [], f"{name}'s rpath")
                unknown = [p for p, owner in linked.items() if owner is None]
                self.assertEqual(unknown, [], "libraries of no Debian package")
                missing = set(linked.values()) - cpu
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
