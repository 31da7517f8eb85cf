"""deploy/kubernetes renders, validates against the Kubernetes API schemas
offline, and keeps the wiring rankd needs.

  * every kustomization (base, overlays, variants) renders with
    `kubectl kustomize`;
  * every rendered object is valid for its apiVersion/kind, strictly (no
    unknown fields), with tools/k8s-validate/validate.mjs; the validator
    itself is shown to catch the mistakes it is there for;
  * the rules an operator relies on: rankd is a native sidecar with gRPC
    readiness/liveness probes on its listen port, sharing its socket with
    the serving container through an emptyDir; non-root, read-only root file
    system, no privilege escalation, resources on every container; the node
    index, group size and coordinator come from the workload's own
    conventions; the serving container runs the serving example once per
    local rank, with the pod IP for Gloo, passing SIGTERM on; the
    NetworkPolicy lets only the group reach rankd's port; metrics are
    announced where rankd serves them; GPU and TLS overlays do what they
    say.
"""

import copy
import os
import subprocess
import sys
import tempfile
import unittest

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import manifests  # noqa: E402
import podsim  # noqa: E402

NODE = "/usr/bin/node"


def validator():
    """(node, validate.mjs) in the source tree, where tools/setup.sh
    installed its npm packages."""
    script = os.path.realpath(manifests.runfile("tools/k8s-validate/validate.mjs"))
    modules = os.path.join(os.path.dirname(script), "node_modules")
    if not os.path.isdir(modules):
        raise RuntimeError(
            f"{modules} is missing: run tools/setup.sh (it runs npm ci there)")
    node = NODE if os.path.exists(NODE) else "node"
    return node, script


def validate(objects_or_text):
    node, script = validator()
    text = objects_or_text
    if not isinstance(text, str):
        text = yaml.safe_dump_all(objects_or_text, sort_keys=False)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(text)
    try:
        p = subprocess.run([node, script, f.name], capture_output=True,
                           text=True, timeout=120)
    finally:
        os.unlink(f.name)
    return p.returncode, p.stdout + p.stderr


def rankd_of(template):
    for c in template["spec"].get("initContainers", []):
        if c["name"] == "rankd":
            return c
    return None


def port_of(address):
    return int(address.rsplit(":", 1)[1])


def ports_allowed(rule):
    """(start, end) TCP port ranges an ingress rule allows."""
    ranges = []
    for p in rule.get("ports", []):
        if p.get("protocol", "TCP") != "TCP":
            continue
        start = p["port"]
        ranges.append((start, p.get("endPort", start)))
    return ranges or [(1, 65535)]


def in_place(rendered):
    """Whether a rendered deployment recovers in place: its rankd runs with
    --recovery=on (docs/kubernetes.md, "When a pod dies")."""
    return rendered.config.get("RANKD_RECOVERY") == "on"


class Rendered:
    """One rendered kustomization and its rankd workload."""

    def __init__(self, name, objects):
        self.name = name
        self.objects = objects
        loads = manifests.workloads(objects)
        self.workload = loads[0] if loads else None
        self.pods = podsim.workload_pods(objects) if loads else []
        for i, pod in enumerate(self.pods):
            pod.ip = f"192.0.2.{10 + i}"
        cms = manifests.by_kind(objects, "ConfigMap")
        self.config = cms[0]["data"] if cms else {}

    @property
    def template(self):
        return manifests.pod_template(self.workload)

    def env(self, container, pod_index=0):
        return podsim.container_env(self.pods[pod_index], container,
                                    self.objects, {})


class ManifestsTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.deploy = manifests.Deploy()
        cls.rendered = {}
        for name in cls.deploy.kustomizations():
            try:
                cls.rendered[name] = Rendered(name, cls.deploy.render(name))
            except Exception as e:  # reported by test_every_kustomization_renders
                cls.rendered[name] = e

    @classmethod
    def tearDownClass(cls):
        cls.deploy.close()

    def deployments(self):
        """Rendered kustomizations that run rankd pods."""
        for name, r in sorted(self.rendered.items()):
            if isinstance(r, Rendered) and r.workload is not None:
                yield name, r

    # ------------------------------------------------------------ render

    def test_every_kustomization_renders(self):
        expected = {"base", "overlays/cpu-demo", "overlays/gpu", "overlays/tls",
                    "overlays/monitoring", "overlays/in-place-recovery",
                    "variants/statefulset",
                    "variants/statefulset-in-place-recovery",
                    "variants/indexed-job"}
        self.assertLessEqual(expected, set(self.rendered))
        for name, r in sorted(self.rendered.items()):
            with self.subTest(kustomization=name):
                self.assertIsInstance(r, Rendered, f"{name}: {r}")
                self.assertTrue(r.objects)

    def test_every_rendered_object_is_valid_against_the_api_schemas(self):
        node, script = validator()
        folder = tempfile.mkdtemp(prefix="rk-rendered-")
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", folder]))
        files = {}
        for name in sorted(self.rendered):
            path = os.path.join(folder, name.replace("/", "_") + ".yaml")
            with open(path, "w") as f:
                f.write(self.deploy.render_text(name))
            files[path] = name
        # One run for all (node starts in seconds); output per file.
        p = subprocess.run([node, script, *files], capture_output=True,
                           text=True, timeout=300)
        sections = {}
        current = None
        for line in p.stdout.splitlines():
            if line.startswith("FILE "):
                current = files.get(line[5:])
                sections[current] = []
            elif current is not None:
                sections[current].append(line)
        for name in sorted(self.rendered):
            with self.subTest(kustomization=name):
                lines = sections.get(name, [])
                self.assertTrue(lines, p.stdout + p.stderr)
                errors = [l for l in lines if l.startswith("ERROR")]
                self.assertEqual(errors, [])
                self.assertTrue(all(l.startswith(("OK ", "ERROR "))
                                    or "objects checked" in l for l in lines))
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)

    # --------------------------------------------------- validator itself

    def mutated(self, mutate):
        objects = copy.deepcopy(self.rendered["overlays/cpu-demo"].objects)
        mutate(objects)
        return validate(objects)

    def lws(self, objects):
        return manifests.by_kind(objects, "LeaderWorkerSet")[0]

    def test_validator_rejects_unknown_fields_in_pod_templates(self):
        def typo(objects):
            rankd = rankd_of(manifests.pod_template(self.lws(objects)))
            rankd["readinessprobe"] = rankd.pop("readinessProbe")
        code, out = self.mutated(typo)
        self.assertEqual(code, 1, out)
        self.assertIn('V1Container has no field "readinessprobe"', out)

    def test_validator_rejects_bad_leaderworkerset_fields(self):
        def bad(objects):
            spec = self.lws(objects)["spec"]
            spec["leaderWorkerTemplate"]["restartPolicy"] = "Sometimes"
            spec["leaderWorkerTemplate"]["sizee"] = 2
            spec["networkConfig"] = {}
        code, out = self.mutated(bad)
        self.assertEqual(code, 1, out)
        self.assertIn("restartPolicy: must be equal to one of the allowed", out)
        self.assertIn('additional properties "sizee"', out)
        self.assertIn("must have required property 'subdomainPolicy'", out)

    def test_validator_rejects_wrong_types_and_unknown_kinds(self):
        def bad(objects):
            rankd = rankd_of(manifests.pod_template(self.lws(objects)))
            rankd["readinessProbe"]["grpc"]["port"] = "7421"
            manifests.by_kind(objects, "NetworkPolicy")[0]["kind"] = "NetPolicy"
            manifests.by_kind(objects, "ConfigMap")[0]["metadata"]["labelz"] = {}
        code, out = self.mutated(bad)
        self.assertEqual(code, 1, out)
        self.assertIn("grpc/port must be integer", out)
        self.assertIn("no schema for networking.k8s.io/v1 NetPolicy", out)
        self.assertIn('V1ObjectMeta has no field "labelz"', out)

    def test_validator_rejects_duplicate_keys(self):
        text = self.deploy.render_text("overlays/cpu-demo").replace(
            "  name: rankd-config\n", "  name: rankd-config\n  name: other\n", 1)
        code, out = validate(text)
        self.assertEqual(code, 1, out)
        self.assertIn("Map keys must be unique", out)

    # ------------------------------------------------------------ wiring

    def test_rankd_is_a_native_sidecar_probed_over_grpc(self):
        for name, r in self.deployments():
            with self.subTest(kustomization=name):
                rankd = rankd_of(r.template)
                self.assertIsNotNone(rankd, "no rankd init container")
                self.assertEqual(rankd.get("restartPolicy"), "Always")
                self.assertEqual(rankd["command"], ["rankd"])
                env = r.env(rankd)
                listen = port_of(env["RANKD_LISTEN"])
                ports = {p["name"]: p["containerPort"] for p in rankd["ports"]}
                self.assertEqual(ports.get("rankd"), listen)
                for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
                    self.assertIn(kind, rankd)
                ready, live = rankd["readinessProbe"], rankd["livenessProbe"]
                if "grpc" in ready:
                    self.assertEqual(ready["grpc"],
                                     {"port": listen, "service": "readiness"})
                    self.assertEqual(live["grpc"], {"port": listen})
                    self.assertEqual(rankd["startupProbe"]["grpc"],
                                     {"port": listen})
                else:
                    # TLS: Kubernetes' gRPC probes cannot do TLS; rankctl asks
                    # over the (plaintext) Unix socket instead.
                    self.assertIn("RANKD_TLS_CERT", env)
                    socket = "--target=unix://" + env["RANKD_SOCKET"]
                    self.assertEqual(ready["exec"]["command"][:2],
                                     ["rankctl", socket])
                    self.assertIn("--service=readiness",
                                  ready["exec"]["command"])
                    self.assertNotIn("--service=readiness",
                                     live["exec"]["command"])
                    self.assertEqual(live["exec"]["command"][-1], "health")

    def test_socket_is_shared_through_an_emptydir(self):
        for name, r in self.deployments():
            with self.subTest(kustomization=name):
                rankd = rankd_of(r.template)
                socket = r.env(rankd)["RANKD_SOCKET"]
                folder = os.path.dirname(socket)
                volumes = {v["name"]: v for v in r.template["spec"]["volumes"]}

                def socket_volume(container):
                    for m in container.get("volumeMounts", []):
                        if m["mountPath"] == folder:
                            return m["name"]
                    return None

                volume = socket_volume(rankd)
                self.assertIsNotNone(volume, f"rankd does not mount {folder}")
                self.assertIn("emptyDir", volumes[volume])
                for c in r.template["spec"]["containers"]:
                    self.assertEqual(socket_volume(c), volume, c["name"])
                    self.assertEqual(r.env(c).get("RANKD_TARGET"),
                                     "unix://" + socket, c["name"])
                # The serving container's job id is rankd's own: rankrun
                # takes it from the daemon ({job_id}).
                self.assertIn("RANKD_JOB_ID", r.env(rankd))
                # torch programs' store keys (init_method="rankd://") are
                # written by every rank: the job declares them shared.
                self.assertIn("torch/", r.env(rankd).get(
                    "RANKD_KV_SHARED_PREFIXES", "").split(","))

    def test_pods_run_non_root_with_read_only_root_and_resources(self):
        for name, r in self.deployments():
            with self.subTest(kustomization=name):
                spec = r.template["spec"]
                pod = spec["securityContext"]
                self.assertTrue(pod["runAsNonRoot"])
                self.assertNotEqual(pod["runAsUser"], 0)
                self.assertIn("fsGroup", pod)
                self.assertEqual(pod["seccompProfile"]["type"], "RuntimeDefault")
                self.assertFalse(spec.get("enableServiceLinks", True))
                for c in spec.get("initContainers", []) + spec["containers"]:
                    ctx = c["securityContext"]
                    self.assertFalse(ctx["allowPrivilegeEscalation"], c["name"])
                    self.assertTrue(ctx["readOnlyRootFilesystem"], c["name"])
                    self.assertEqual(ctx["capabilities"]["drop"], ["ALL"])
                    self.assertFalse(ctx.get("privileged", False))
                    res = c["resources"]
                    self.assertIn("cpu", res["requests"], c["name"])
                    self.assertIn("memory", res["requests"], c["name"])
                    self.assertIn("memory", res["limits"], c["name"])
                    self.assertTrue(c["image"].startswith("rankd:"), c["image"])

    def test_group_shape_comes_from_the_workload(self):
        for name, r in self.deployments():
            with self.subTest(kustomization=name):
                w = r.workload
                rankd = rankd_of(r.template)
                port = port_of(r.env(rankd)["RANKD_LISTEN"])
                for i, pod in enumerate(r.pods):
                    env = r.env(rankd, i)
                    if w["kind"] == "LeaderWorkerSet":
                        for key in ("RANKD_NNODES", "RANKD_NODE_INDEX",
                                    "RANKD_COORDINATOR"):
                            self.assertNotIn(key, env, "LWS provides it")
                        self.assertEqual(env["LWS_WORKER_INDEX"], str(i))
                        self.assertEqual(w["spec"]["leaderWorkerTemplate"]
                                         ["restartPolicy"],
                                         "None" if in_place(r) else
                                         "RecreateGroupOnPodRestart")
                        continue
                    self.assertEqual(int(env["RANKD_NNODES"]), len(r.pods))
                    if w["kind"] == "StatefulSet":
                        self.assertEqual(env["RANKD_NODE_INDEX"], str(i))
                        subdomain = w["spec"]["serviceName"]
                        self.assertEqual(w["spec"]["podManagementPolicy"],
                                         "Parallel")
                    else:
                        self.assertEqual(env["JOB_COMPLETION_INDEX"], str(i))
                        self.assertEqual(w["spec"]["parallelism"],
                                         w["spec"]["completions"])
                        self.assertEqual(w["spec"]["backoffLimit"], 0)
                        subdomain = r.template["spec"]["subdomain"]
                    self.assertEqual(env["RANKD_COORDINATOR"],
                                     f"{w['metadata']['name']}-0.{subdomain}:"
                                     f"{port}")
                    # The coordinator's name resolves: a headless Service
                    # that selects the pods and publishes them unready.
                    records = podsim.dns_records(r.pods, r.objects)
                    self.assertIn(env["RANKD_COORDINATOR"].split(":")[0],
                                  records)
                    svc = [s for s in manifests.by_kind(r.objects, "Service")
                           if s["metadata"]["name"] == subdomain][0]
                    self.assertTrue(svc["spec"]["publishNotReadyAddresses"])

    def test_network_policy_admits_only_the_group_to_rankds_port(self):
        for name, r in self.deployments():
            with self.subTest(kustomization=name):
                env = r.env(rankd_of(r.template))
                # The gRPC listener and the leader's round link.
                rankd_ports = [port_of(env["RANKD_LISTEN"]),
                               int(env["RANKD_ROUND_LINK_PORT"])]
                policies = manifests.by_kind(r.objects, "NetworkPolicy")
                self.assertEqual(len(policies), 1)
                spec = policies[0]["spec"]
                self.assertEqual(spec["policyTypes"], ["Ingress"])
                for pod in r.pods:
                    self.assertTrue(podsim.selector_matches(
                        spec["podSelector"]["matchLabels"], pod.labels),
                        f"policy does not select {pod.name}")
                for port in rankd_ports:
                    admitted = 0
                    for rule in spec["ingress"]:
                        covers = any(a <= port <= b
                                     for a, b in ports_allowed(rule))
                        if not covers:
                            continue
                        admitted += 1
                        self.assertIn("from", rule,
                                      f"rankd's port {port} open to all")
                        for peer in rule["from"]:
                            self.assertEqual(set(peer), {"podSelector"})
                            selector = peer["podSelector"]["matchLabels"]
                            self.assertEqual(
                                selector, spec["podSelector"]["matchLabels"])
                    self.assertEqual(admitted, 1, f"port {port}")
                # The serving container's and metrics ports stay reachable.
                metrics = port_of(r.env(rankd_of(r.template))
                                  ["RANKD_METRICS_LISTEN"])
                self.assertTrue(any(
                    "from" not in rule and any(
                        a <= metrics <= b for a, b in ports_allowed(rule))
                    for rule in spec["ingress"]))

    def test_metrics_are_announced_where_rankd_serves_them(self):
        for name, r in self.deployments():
            with self.subTest(kustomization=name):
                rankd = rankd_of(r.template)
                port = port_of(r.env(rankd)["RANKD_METRICS_LISTEN"])
                ports = {p["name"]: p["containerPort"] for p in rankd["ports"]}
                self.assertEqual(ports.get("metrics"), port)
                notes = r.template["metadata"]["annotations"]
                self.assertEqual(notes["prometheus.io/scrape"], "true")
                self.assertEqual(notes["prometheus.io/port"], str(port))
                self.assertEqual(notes["prometheus.io/path"], "/metrics")

    def test_monitoring_overlay_scrapes_every_rankd(self):
        r = self.rendered["overlays/monitoring"]
        monitor = manifests.by_kind(r.objects, "ServiceMonitor")[0]
        services = [s for s in manifests.by_kind(r.objects, "Service")
                    if podsim.selector_matches(
                        monitor["spec"]["selector"]["matchLabels"],
                        s["metadata"].get("labels", {}))]
        self.assertEqual(len(services), 1)
        svc = services[0]
        self.assertEqual(svc["spec"]["clusterIP"], "None")
        for pod in r.pods:
            self.assertTrue(podsim.selector_matches(svc["spec"]["selector"],
                                                    pod.labels))
        port_names = {p["name"]: p for p in svc["spec"]["ports"]}
        for endpoint in monitor["spec"]["endpoints"]:
            self.assertIn(endpoint["port"], port_names)
            target = port_names[endpoint["port"]]["targetPort"]
            self.assertIn(target, [p["name"] for p in rankd_of(r.template)
                                   ["ports"]])

    def test_serving_container_runs_the_example_per_local_rank(self):
        for name, r in self.deployments():
            with self.subTest(kustomization=name):
                serving = [c for c in r.template["spec"]["containers"]
                           if c["name"] == "serving"]
                self.assertEqual(len(serving), 1)
                c = serving[0]
                self.assertEqual(c["command"], ["/bin/sh", "-c"])
                script = c["args"][0]
                env = r.env(c)
                # rankrun replaces the shell (exec: it is PID 1 and gets the
                # kubelet's SIGTERM) and starts one `serving` per local rank
                # of the pod's rankd, which it reuses through the socket.
                code = [l.strip() for l in script.splitlines()
                        if l.strip() and not l.strip().startswith("#")]
                self.assertTrue(code[0].startswith("exec rankrun "), code)
                words = " ".join(l.rstrip("\\").strip() for l in code).split()
                self.assertIn('--target="$RANKD_TARGET"', words)
                self.assertEqual(env["RANKD_TARGET"],
                                 "unix:///run/rankd/rankd.sock")
                launcher = words[:words.index("--")]
                program = words[words.index("--") + 1:]
                self.assertNotIn("--daemon=start", launcher)
                self.assertIn("--exit_delay_ms=2000", launcher)
                grace = [int(w.split("=")[1]) for w in launcher
                         if w.startswith("--stop_grace_ms=")]
                self.assertEqual(len(grace), 1)
                self.assertLess(grace[0] / 1000,
                                r.template["spec"]
                                ["terminationGracePeriodSeconds"])
                # Each rank with its job, local rank (rankrun fills them in)
                # and Gloo address (the pod IP).
                self.assertEqual(program[0], "serving")
                for flag in ("--job_id={job_id}", "--local_rank={local_rank}",
                             '--hostname="$POD_IP"',
                             '--steps="$SERVING_STEPS"', "$SERVING_ARGS"):
                    self.assertIn(flag, program)
                self.assertEqual(env["POD_IP"], r.pods[0].ip)
                backend = "nccl" if name == "overlays/gpu" else "gloo"
                self.assertIn(f"--backend={backend}",
                              env["SERVING_ARGS"].split())
                steps = int(env["SERVING_STEPS"])
                if r.workload["kind"] == "Job":
                    self.assertGreater(steps, 0)
                else:
                    self.assertEqual(steps, 0)

    def test_in_place_recovery_variants_restart_only_what_failed(self):
        """The in-place variants: the coordinator recovers (RECOVERING at a
        new epoch, not FAILED), only the failed pod restarts, rankrun
        restarts a failed rank; every other deployment fails the job on a
        loss and restarts the whole group (or, for the StatefulSet and the
        Job, leaves that to the operator)."""
        variants = {"overlays/in-place-recovery",
                    "variants/statefulset-in-place-recovery"}
        self.assertLessEqual(variants, {n for n, _ in self.deployments()})
        for name, r in self.deployments():
            with self.subTest(kustomization=name):
                env = r.env(rankd_of(r.template))
                serving = [c for c in r.template["spec"]["containers"]
                           if c["name"] == "serving"][0]
                words = serving["args"][0].split()
                restarts = [w for w in words
                            if w.startswith("--max_restarts=")]
                # The serving example recovers in place only when told to
                # (examples/serving/serving_main.cc, --recover).
                recover = [w for w in words if w.startswith("--recover")]
                if name not in variants:
                    self.assertFalse(in_place(r))
                    self.assertEqual(env.get("RANKD_RECOVERY", "off"), "off")
                    self.assertEqual(restarts, [])
                    self.assertEqual(recover, [])
                    continue
                self.assertTrue(in_place(r))
                self.assertEqual(env["RANKD_RECOVERY"], "on")
                deadline = int(env["RANKD_RECOVERY_DEADLINE_MS"])
                self.assertGreaterEqual(deadline, 60000)  # a pod's reschedule
                self.assertLessEqual(deadline, 86400000)
                # Each serving process waits for the replacement as long
                # as rankd does.
                self.assertIn("--recover", recover)
                self.assertIn(f"--recover_timeout_ms={deadline}", recover)
                self.assertEqual(len(restarts), 1)
                self.assertGreater(int(restarts[0].split("=")[1]), 0)
                w = r.workload
                if w["kind"] == "LeaderWorkerSet":
                    self.assertEqual(
                        w["spec"]["leaderWorkerTemplate"]["restartPolicy"],
                        "None")
                else:
                    # A StatefulSet replaces the failed pod alone, under
                    # its ordinal (its node index), by default.
                    self.assertEqual(w["kind"], "StatefulSet")
                    self.assertNotIn("updateStrategy", w["spec"])

    def test_gpu_overlay_gives_each_rank_a_gpu(self):
        r = self.rendered["overlays/gpu"]
        serving = r.template["spec"]["containers"][0]
        nproc = int(r.config["RANKD_NPROC_PER_NODE"])
        self.assertEqual(int(serving["resources"]["limits"]["nvidia.com/gpu"]),
                         nproc)
        self.assertIn("/dev/shm",
                      [m["mountPath"] for m in serving["volumeMounts"]])
        self.assertIn("nvidia.com/gpu", [t["key"] for t in
                                         r.template["spec"]["tolerations"]])
        self.assertNotIn("nvidia.com/gpu",
                         rankd_of(r.template)["resources"].get("limits", {}))
        # The GPU image (deploy/Dockerfile, FLAVOR=gpu: CUDA runtime and
        # NCCL) for every container; the serving example runs NCCL.
        for c in (r.template["spec"]["initContainers"]
                  + r.template["spec"]["containers"]):
            self.assertEqual(c["image"], "rankd:0.1.0-gpu", c["name"])
        self.assertIn("--backend=nccl", r.config["SERVING_ARGS"].split())
        world = nproc * r.workload["spec"]["leaderWorkerTemplate"]["size"]
        degrees = 1
        for key in ("RANKD_TENSOR_PARALLEL", "RANKD_PIPELINE_PARALLEL",
                    "RANKD_EXPERT_PARALLEL"):
            degrees *= int(r.config.get(key, 1))
        self.assertEqual(world % degrees, 0)

    def test_tls_overlay_mounts_the_certificates_from_a_secret(self):
        r = self.rendered["overlays/tls"]
        rankd = rankd_of(r.template)
        env = r.env(rankd)
        volumes = {v["name"]: v for v in r.template["spec"]["volumes"]}
        mounts = {m["mountPath"]: m for m in rankd["volumeMounts"]}
        for key, file in (("RANKD_TLS_CERT", "tls.crt"),
                          ("RANKD_TLS_KEY", "tls.key"), ("RANKD_TLS_CA", "ca.crt")):
            folder, base = os.path.split(env[key])
            self.assertEqual(base, file)
            mount = mounts[folder]
            self.assertTrue(mount["readOnly"])
            self.assertEqual(volumes[mount["name"]]["secret"]["secretName"],
                             "rankd-tls")
        self.assertEqual(env["RANKD_TLS_REQUIRE_CLIENT_CERT"], "true")

    def test_every_rankd_gets_the_jobs_credentials_and_only_rankd(self):
        for name, r in self.deployments():
            with self.subTest(kustomization=name):
                secrets = {s["metadata"]["name"]: s
                           for s in manifests.by_kind(r.objects, "Secret")}
                self.assertIn("rankd-credentials", secrets)
                # No job-wide rank credential: each rank gets its own
                # token from its pod's rankd (--issue_rank_tokens), handed
                # to rankrun once.
                self.assertEqual(sorted(secrets["rankd-credentials"]["data"]),
                                 ["node.key", "operator.token"])
                self.assertEqual(r.env(rankd_of(r.template)).get(
                    "RANKD_ISSUE_RANK_TOKENS"), "true")
                rankd = rankd_of(r.template)
                folder = r.env(rankd)["RANKD_CREDENTIALS_DIR"]
                volumes = {v["name"]: v for v in r.template["spec"]["volumes"]}
                mount = {m["mountPath"]: m for m in rankd["volumeMounts"]}[folder]
                self.assertTrue(mount["readOnly"])
                volume = volumes[mount["name"]]["secret"]
                self.assertEqual(volume["secretName"], "rankd-credentials")
                # Group-readable (fsGroup), never world-readable.
                self.assertEqual(volume["defaultMode"] & 0o007, 0)
                for c in r.template["spec"]["containers"]:
                    self.assertNotIn(mount["name"],
                                     [m["name"] for m in c.get("volumeMounts", [])],
                                     c["name"])
                    self.assertNotIn("RANKD_CREDENTIALS_DIR", r.env(c), c["name"])


if __name__ == "__main__":
    manifests.main()
