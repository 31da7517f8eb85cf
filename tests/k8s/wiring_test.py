"""The manifests in deploy/kubernetes form a working rankd job as written.

For each deployment (LeaderWorkerSet CPU demo, its TLS overlay, the
StatefulSet and Indexed Job variants) it renders the kustomization, starts
one simulated pod per pod the controller would create (tests/k8s/podsim.py:
network namespaces when root), each with exactly the command, arguments and
environment Kubernetes would give its rankd sidecar and its serving
container (the serving example, one process per local rank, Gloo on the pod
IP), probes every rankd the way the kubelet would, and checks that the job
forms: every node registered, every rank joined and serving, the same job
state visible from every pod, metrics served. Deleting the pods (SIGTERM)
stops every rank cleanly with rank 0's self-check passed; the Indexed Job
serves its steps and completes. The CPU demo also loses a pod's serving
container and checks that every pod reports the failure and that the other
pods' serving containers fail (what makes LeaderWorkerSet recreate the
group). A plain torch.distributed program (python/tests/torch_program.py,
changed only in its init line) also runs in the CPU demo's serving
container in place of the serving example, under the manifests' own
rankrun line and the ConfigMap's settings.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import manifests  # noqa: E402
import podsim  # noqa: E402

# The image's programs (deploy/Dockerfile) and their Bazel outputs.
BINARIES = {
    "rankd": "daemon/rankd",
    "rankctl": "client/rankctl",
    "rankrun": "launcher/rankrun",
    "serving": "examples/serving",
}


def binaries():
    return {name: manifests.runfile(path) for name, path in BINARIES.items()}


def torch_image_files(folder):
    """What a torch serving image adds, in `folder` (readable by the pods'
    user): the rankd Python package over librankd.so, and the program.
    Returns (PYTHONPATH, RANKD_LIBRARY, program path); None when this
    host's python3 has no torch."""
    try:
        subprocess.run(["/usr/bin/python3", "-c", "import torch"], check=True,
                       capture_output=True, timeout=120)
    except (subprocess.CalledProcessError, OSError):
        return None
    package = os.path.join(folder, "rankd")
    os.makedirs(package)
    source = os.path.dirname(manifests.runfile("python/rankd/__init__.py"))
    for name in os.listdir(source):
        if name.endswith(".py"):
            shutil.copy(os.path.join(source, name), package)
    library = os.path.join(folder, "librankd.so")
    shutil.copy(manifests.runfile("capi/librankd.so"), library)
    program = os.path.join(folder, "torch_program.py")
    shutil.copy(manifests.runfile("python/tests/torch_program.py"), program)
    for dirpath, dirs, files in os.walk(folder):
        os.chmod(dirpath, 0o755)
        for f in files:
            os.chmod(os.path.join(dirpath, f), 0o644)
    return folder, library, program


def sanitizer_preload(library):
    """The ASan runtime to preload into an uninstrumented Python that loads
    `library`, when it is a sanitizer build's (it then needs __asan_
    symbols); None otherwise."""
    symbols = subprocess.run(["nm", "-D", "--undefined-only", library],
                             capture_output=True, text=True, check=True)
    if " __asan_" not in symbols.stdout:
        return None
    runtime = subprocess.run(
        ["clang-14", "-print-file-name=libclang_rt.asan-x86_64.so"],
        capture_output=True, text=True, check=True)
    return runtime.stdout.strip()


def wait_for(predicate, limit_s, what):
    deadline = time.time() + limit_s
    last = None
    while time.time() < deadline:
        try:
            last = predicate()
            if last:
                return last
        except Exception as e:  # retried until the deadline
            last = e
        time.sleep(0.2)
    raise AssertionError(f"timed out after {limit_s} s waiting for {what} "
                         f"(last: {last})")


def make_certificates(folder, names, ips):
    """A CA and one certificate (server and client use) for `names`/`ips`,
    as the rankd-tls Secret holds them (tls.crt, tls.key, ca.crt)."""

    def openssl(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True,
                       cwd=folder)

    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
            "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
            "-subj", "/CN=rankd test CA")
    san = ",".join([f"DNS:{n}" for n in names] + [f"IP:{i}" for i in ips])
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
            "-nodes", "-keyout", "tls.key", "-out", "tls.csr", "-subj",
            "/CN=rankd")
    with open(os.path.join(folder, "ext.cnf"), "w") as f:
        f.write(f"subjectAltName={san}\nextendedKeyUsage=serverAuth,clientAuth\n"
                "basicConstraints=CA:FALSE\n")
    openssl("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "tls.crt", "-days", "2", "-extfile",
            "ext.cnf")
    secret = os.path.join(folder, "secret")
    os.makedirs(secret)
    for name in ("tls.crt", "tls.key", "ca.crt"):
        with open(os.path.join(folder, name), "rb") as src, \
                open(os.path.join(secret, name), "wb") as dst:
            dst.write(src.read())
    return secret


class WiringTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.deploy = manifests.Deploy()
        cls.mode = ("network namespaces" if podsim.netns_available() else
                    "host network (not root: loopback addresses)")
        print(f"pods run in: {cls.mode}", flush=True)

    @classmethod
    def tearDownClass(cls):
        cls.deploy.close()

    def create(self, overlay, **kwargs):
        objects = self.deploy.render(overlay)
        cluster = podsim.Cluster(objects, binaries(), **kwargs)
        self.addCleanup(cluster.close)
        self.addCleanup(lambda: self._dump_logs_on_failure(cluster))
        return objects, cluster

    def start(self, overlay, **kwargs):
        objects, cluster = self.create(overlay, **kwargs)
        cluster.start_all()
        for r in cluster.rewrites:
            print(f"  host-network rewrite: {r}", flush=True)
        return objects, cluster

    def _dump_logs_on_failure(self, cluster):
        outcome = getattr(self, "_outcome", None)
        errors = getattr(getattr(outcome, "result", None), "errors", [])
        failures = getattr(getattr(outcome, "result", None), "failures", [])
        if any(t is self for t, _ in errors + failures):
            print(cluster.logs(), flush=True)

    def config(self, objects):
        cm = [o for o in manifests.by_kind(objects, "ConfigMap")]
        self.assertEqual(len(cm), 1)
        return cm[0]["data"]

    def wait_ready(self, cluster, limit_s=30):
        for pod in cluster.pods:
            wait_for(lambda p=pod: cluster.sidecar_probe(p, "readinessProbe"),
                     limit_s, f"{pod.name}'s rankd to be ready")

    def status(self, cluster, pod, tls=None):
        return podsim.json_of(cluster.rankctl(pod, ["--json", "status"], tls))

    def check_job_forms(self, objects, cluster, expected_state, tls=None):
        data = self.config(objects)
        nproc = int(data["RANKD_NPROC_PER_NODE"])
        nnodes = len(cluster.pods)
        world = nproc * nnodes
        # Every rank joins: the job is READY (or COMPLETED, when the ranks
        # already left), and every pod's rankd says so.
        for i, pod in enumerate(cluster.pods):
            job = wait_for(
                lambda p=pod: (lambda j: j if j["state"] in expected_state
                               else None)(self.status(cluster, p, tls)),
                60, f"the job as seen from {pod.name}")
            self.assertEqual(job["jobId"], data["RANKD_JOB_ID"])
            self.assertEqual(job["worldSize"], world)
            self.assertEqual(job["nnodes"], nnodes)
            self.assertEqual(job["servedByNode"], i)
            self.assertEqual(job["servedByCoordinator"], i == 0)
        # The topology names every pod (downward API POD_NAME) and the
        # layout from the ConfigMap.
        topology = podsim.json_of(
            cluster.rankctl(cluster.pods[-1], ["--json", "topology"], tls))
        self.assertEqual(topology["worldSize"], world)
        self.assertEqual(topology["topology"]["tensor"],
                         int(data.get("RANKD_TENSOR_PARALLEL", 1)))
        return world, nproc

    def check_metrics(self, cluster, world, state):
        for pod in cluster.pods:
            port = int(cluster.container(pod, "rankd").env[
                "RANKD_METRICS_LISTEN"].rsplit(":", 1)[1])
            annotations = pod.annotations
            self.assertEqual(annotations.get("prometheus.io/port"), str(port))
            text = cluster.scrape(pod, port, annotations["prometheus.io/path"])
            self.assertEqual(
                podsim.metric(text, "rankd_job_state", {"state": state}), 1.0,
                text[:2000])
            self.assertEqual(podsim.metric(text, "rankd_job_world_size"), world)
            self.assertEqual(podsim.metric(text, "rankd_ready"),
                             1.0 if state != "FAILED" else 0.0)

    def serving_log(self, cluster, pod, labelled=False):
        """The serving container's output. rankrun labels every line with
        its rank ("[rank 3] READY rank=3 ..."); the labels are removed
        unless `labelled`."""
        log = cluster.container(pod, "serving").read_log()
        return log if labelled else re.sub(r"^\[rank \d+\] ", "", log,
                                            flags=re.M)

    def wait_serving(self, cluster, world, steps=10):
        """Every rank of every pod serves, with Gloo on its pod's IP; then
        waits for `steps` steps (rounds of batch agreement)."""
        leader = cluster.pods[0]  # node 0: rank 0 prints the progress
        wait_for(lambda: "PROGRESS step " in self.serving_log(cluster, leader),
                 60, "rank 0 to serve its first step")
        self.assertIn(f"SERVING world {world} ",
                      self.serving_log(cluster, leader))
        for pod in cluster.pods:
            ready = [l for l in self.serving_log(cluster, pod).splitlines()
                     if l.startswith("READY rank=")]
            self.assertEqual(len(ready), world // len(cluster.pods),
                             self.serving_log(cluster, pod)[-2000:])
            for line in ready:
                self.assertTrue(line.endswith(f" hostname={pod.ip}"), line)
            # Each line is whole and labelled with the rank that wrote it.
            labelled = re.findall(r"^\[rank (\d+)\] READY rank=(\d+) ",
                                  self.serving_log(cluster, pod, labelled=True),
                                  re.M)
            self.assertEqual(len(labelled), len(ready), labelled)
            for label, rank in labelled:
                self.assertEqual(label, rank)
        wait_for(lambda: (podsim.metric(cluster.scrape(leader, 9421),
                                        "rankd_rounds_total", {"code": "OK"})
                          or 0) >= steps * world // len(cluster.pods),
                 60, f"{steps} serving steps")

    def served_cleanly(self, cluster, world, steps=None):
        """Every rank stopped (DONE), rank 0 printed the summary with the
        self-check passed (for `steps` steps when given)."""
        for pod in cluster.pods:
            log = self.serving_log(cluster, pod)
            self.assertEqual(log.count("DONE rank="), world // len(cluster.pods),
                             log[-2000:])
        log = self.serving_log(cluster, cluster.pods[0])
        self.assertIn("== summary", log)
        self.assertRegex(log, r"self-check    PASSED: (\d+)/\1 steps")
        if steps is not None:
            self.assertIn(f"self-check    PASSED: {steps}/{steps} steps", log)

    def stop_all(self, cluster, serving=None):
        """Deletes every pod (the kubelet's order: serving, then rankd);
        rankd exits 0 and, when given, the serving container with
        `serving`."""
        for pod in cluster.pods:
            codes = cluster.stop_pod(pod)
            self.assertEqual(codes.get("rankd"), 0,
                             cluster.container(pod, "rankd").read_log()[-2000:])
            if serving is not None:
                self.assertEqual(codes.get("serving"), serving,
                                 self.serving_log(cluster, pod)[-2000:])

    def stop_serving_cleanly(self, cluster, world):
        """Pod deletion: SIGTERM to the serving containers stops every rank
        at the same step, cleanly; the job completes."""
        self.stop_all(cluster, serving=0)
        self.served_cleanly(cluster, world)
        drained = {re.search(r"^DRAINED rank=\d+ step=(\d+):", line, re.M)
                   .group(1)
                   for pod in cluster.pods
                   for line in self.serving_log(cluster, pod).splitlines()
                   if line.startswith("DRAINED ")}
        self.assertEqual(len(drained), 1, drained)

    # ------------------------------------------------------------- tests

    def test_leaderworkerset_cpu_demo_forms_a_job_and_reports_a_lost_pod(self):
        objects, cluster = self.start("overlays/cpu-demo")
        self.wait_ready(cluster)
        world, nproc = self.check_job_forms(objects, cluster, {"JOB_STATE_READY"})
        self.wait_serving(cluster, world)
        self.check_metrics(cluster, world, "READY")
        leader_metrics = cluster.scrape(cluster.pods[0], 9421)
        # Serving ranks are joined, or in a batch agreement round.
        self.assertEqual(
            sum(podsim.metric(leader_metrics, "rankd_members",
                              {"state": state}) or 0
                for state in ("JOINED", "IN_ROUND")),
            world)

        # A worker pod's serving container dies: every pod sees the job fail,
        # naming a lost rank, and no rankd is ready any more (what
        # LeaderWorkerSet recreates the group for).
        victim = cluster.pods[-1]
        cluster.stop_container(cluster.container(victim, "serving"),
                               sig=signal.SIGKILL)
        for pod in cluster.pods:
            job = wait_for(
                lambda p=pod: (lambda j: j if j["state"] == "JOB_STATE_FAILED"
                               else None)(self.status(cluster, p)),
                20, f"{pod.name} to report the failure")
            self.assertRegex(job["failure"], r"rank \d+ .*lost")
            wait_for(lambda p=pod: not cluster.sidecar_probe(p, "readinessProbe"),
                     10, f"{pod.name} to turn unready")
            self.assertTrue(cluster.sidecar_probe(pod, "livenessProbe"))
        text = cluster.scrape(cluster.pods[0], 9421)
        self.assertGreaterEqual(podsim.metric(text, "rankd_ranks_lost_total"), 1)
        self.check_metrics(cluster, world, "FAILED")
        # The other pods' serving containers fail (exit 3), naming the lost
        # rank: the container restart LeaderWorkerSet recreates the group on.
        for pod in cluster.pods[:-1]:
            c = cluster.container(pod, "serving")
            self.assertEqual(c.process.wait(timeout=30), 3, c.read_log()[-2000:])
            self.assertRegex(self.serving_log(cluster, pod),
                             r"(?m)^(FAILED|CAUSE) rank=.* lost")
        self.stop_all(cluster)

    def test_torch_program_runs_in_the_serving_container(self):
        # The CPU demo with a torch program in place of the serving
        # example: the manifests' rankrun line with the program after its
        # "--"; the rank, world size and store come from rankd://.
        tmp = tempfile.mkdtemp(prefix="rk-torch-")
        os.chmod(tmp, 0o755)
        self.addCleanup(lambda: shutil.rmtree(tmp, ignore_errors=True))
        files = torch_image_files(tmp)
        if files is None:
            self.skipTest("/usr/bin/python3 has no torch (python3-torch)")
        pythonpath, library, program = files
        objects = self.deploy.render("overlays/cpu-demo")
        template = manifests.pod_template(
            manifests.by_kind(objects, "LeaderWorkerSet")[0])
        serving = [c for c in template["spec"]["containers"]
                   if c["name"] == "serving"][0]
        # A sanitizer build's librankd.so needs its runtime loaded first,
        # into Python only (python/run_pytest.sh): rankrun and rankd carry
        # their own.
        python = 'python3'
        preload = sanitizer_preload(library)
        if preload:
            python = (f'env LD_PRELOAD={preload} '
                      'ASAN_OPTIONS=detect_leaks=0 python3')
        script, count = re.subn(r"(-- \\\n\s*)serving .*",
                                r'\1' + python + r' "$TORCH_PROGRAM" ops\n',
                                serving["args"][0], flags=re.S)
        self.assertEqual(count, 1, serving["args"][0])
        serving["args"][0] = script
        serving["env"] += [
            {"name": "TORCH_PROGRAM", "value": program},
            {"name": "TORCH_PROGRAM_TIMEOUT", "value": "120"},
            {"name": "PYTHONPATH", "value": pythonpath},
            {"name": "RANKD_LIBRARY", "value": library},
            {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
        ]
        if podsim.netns_available():
            # In a cluster the pod's host name resolves to its IP, which
            # Gloo binds; here the host name is the machine's.
            serving["env"].append({"name": "GLOO_SOCKET_IFNAME",
                                   "value": "eth0"})
        cluster = podsim.Cluster(objects, binaries())
        self.addCleanup(cluster.close)
        self.addCleanup(lambda: self._dump_logs_on_failure(cluster))
        cluster.start_all()
        self.wait_ready(cluster)
        data = self.config(objects)
        nproc = int(data["RANKD_NPROC_PER_NODE"])
        world = nproc * len(cluster.pods)
        self.assertIn("torch/", data["RANKD_KV_SHARED_PREFIXES"])
        ranks = []
        for pod in cluster.pods:
            c = cluster.container(pod, "serving")
            self.assertEqual(c.process.wait(timeout=180), 0,
                             c.read_log()[-3000:])
            found = re.findall(r"^\[rank (\d+)\] TORCH OK (\d+)$",
                               c.read_log(), re.M)
            self.assertEqual(len(found), nproc, c.read_log()[-3000:])
            for label, rank in found:
                self.assertEqual(label, rank)
                ranks.append(int(rank))
        self.assertEqual(sorted(ranks), list(range(world)))
        job = self.status(cluster, cluster.pods[0])
        self.assertEqual(job["state"], "JOB_STATE_COMPLETED", job)
        self.stop_all(cluster)

    def test_tls_overlay_forms_a_job_over_mutual_tls(self):
        tmp = tempfile.mkdtemp(prefix="rk-tls-")
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", tmp]))
        objects, cluster = self.create("overlays/tls")
        lws = manifests.by_kind(objects, "LeaderWorkerSet")[0]
        name = lws["metadata"]["name"]
        names = [f"*.{name}.{podsim.NAMESPACE}", f"*.{name}", "localhost"]
        # Without network namespaces peers reach each other by IP.
        ips = ["127.0.0.1"] + [pod.ip for pod in cluster.pods]
        cluster.secret_files["rankd-tls"] = make_certificates(tmp, names, ips)
        cluster.start_all()
        self.wait_ready(cluster)
        tls = [f"--tls_ca={tmp}/ca.crt", f"--tls_cert={tmp}/tls.crt",
               f"--tls_key={tmp}/tls.key",
               f"--tls_server_name={name}-0.{name}.{podsim.NAMESPACE}"
               if cluster.netns else f"--tls_server_name={cluster.pods[0].ip}"]
        world, nproc = self.check_job_forms(objects, cluster,
                                            {"JOB_STATE_READY"}, tls)
        # Plaintext is refused on the TLS listener.
        plain = cluster.rankctl(cluster.pods[0], ["status"])
        self.assertNotEqual(plain.returncode, 0)
        self.wait_serving(cluster, world)
        self.check_metrics(cluster, world, "READY")
        # The group is deleted: every rank stops cleanly, the job completes.
        self.stop_serving_cleanly(cluster, world)

    def test_statefulset_variant_forms_a_job(self):
        objects, cluster = self.start("variants/statefulset")
        self.wait_ready(cluster)
        world, nproc = self.check_job_forms(objects, cluster, {"JOB_STATE_READY"})
        self.wait_serving(cluster, world)
        self.check_metrics(cluster, world, "READY")
        self.stop_serving_cleanly(cluster, world)

    def test_indexed_job_variant_runs_to_completion(self):
        objects, cluster = self.start("variants/indexed-job")
        self.wait_ready(cluster)
        world, nproc = self.check_job_forms(
            objects, cluster, {"JOB_STATE_READY", "JOB_STATE_COMPLETED"})
        # The serving containers serve their steps and finish; the Job's
        # pods succeed.
        steps = int(cluster.container(cluster.pods[0], "serving")
                    .env["SERVING_STEPS"])
        self.assertGreater(steps, 0)
        for pod in cluster.pods:
            c = cluster.container(pod, "serving")
            self.assertEqual(c.process.wait(timeout=60), 0, c.read_log()[-2000:])
        self.served_cleanly(cluster, world, steps)
        job = self.status(cluster, cluster.pods[0])
        self.assertEqual(job["state"], "JOB_STATE_COMPLETED")
        self.check_metrics(cluster, world, "COMPLETED")
        # Then the kubelet stops the sidecars: rankd leaves cleanly.
        for pod in cluster.pods:
            self.assertEqual(cluster.stop_pod(pod).get("rankd"), 0)


if __name__ == "__main__":
    manifests.main()
