"""Runs the pods of rendered Kubernetes manifests as local processes.

What a cluster would do with the rendered objects, done here with real
processes and no cluster:

  * which pods a workload creates, with their names, host names, labels and
    annotations (LeaderWorkerSet, StatefulSet, Indexed Job);
  * what the controllers and the kubelet add to each container's
    environment (LWS_LEADER_ADDRESS, LWS_GROUP_SIZE, LWS_WORKER_INDEX,
    JOB_COMPLETION_INDEX, HOSTNAME), the downward API (fieldRef), ConfigMap
    and Secret references, and $(VAR) expansion in env values, command and
    args, with Kubernetes' own rules;
  * the pod network: as root, every pod gets its own network namespace with
    its own IP on a bridge that lives in a "node" namespace, and the DNS
    names a headless Service (or LeaderWorkerSet's own) gives the pods;
    processes run as the pod's runAsUser/runAsGroup, volumes owned by its
    fsGroup. Without root, pods share the host network on distinct loopback
    addresses (127.x.y.z) and the few values that name the wildcard address
    or a pod's DNS name are rewritten to those addresses (reported in
    `rewrites`);
  * the kubelet's order: native sidecars (init containers with restartPolicy
    Always) start first and gate what follows with their startup probe, then
    ordinary init containers run to completion, then the main containers;
    probes (grpc, exec, tcpSocket) are run like the kubelet runs them.

Volumes become per-pod folders (emptyDir) or folders the caller fills
(Secret); a container's mount paths are mapped onto them by rewriting the
mount path prefix in its arguments and environment, the one place where what
runs differs from what the manifest says, since the pods share one file
system.

Every process, namespace and folder it creates, it removes (Cluster.close),
stopping processes by their process group, which it created.
"""

import base64
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.request

LWS_API = "leaderworkerset.x-k8s.io/v1"
# iproute2's ip; tests run with a short PATH.
IP = next((p for p in ("/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip")
           if os.path.exists(p)), "ip")
TOOL_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
NAMESPACE = "default"
POD_UID = 65532


class WiringError(Exception):
    """The manifests cannot run as written (what Kubernetes would refuse)."""


# --------------------------------------------------------------- expansion


def expand(text, lookup):
    """Kubernetes' $(VAR) expansion (k8s.io/.../third_party/forked/golang/
    expansion): $(NAME) becomes the value of NAME when lookup knows it and
    stays as written otherwise; $$ is a literal $."""
    out = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "$" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                close = text.find(")", i + 2)
                if close < 0:
                    out.append("$(")
                    i += 2
                    continue
                name = text[i + 2:close]
                value = lookup(name)
                out.append(value if value is not None else "$(" + name + ")")
                i = close + 1
                continue
            out.append("$" + nxt)
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


# ----------------------------------------------------------------- objects


def index_objects(objects):
    by_kind = {}
    for o in objects:
        by_kind.setdefault(o["kind"], {})[o["metadata"]["name"]] = o
    return by_kind


def selector_matches(selector, labels):
    return all(labels.get(k) == v for k, v in (selector or {}).items())


class PodSpec:
    """One pod a controller would create from a workload."""

    def __init__(self, workload, name, hostname, subdomain, template, index,
                 extra_labels, extra_annotations, injected_env):
        self.workload = workload
        self.name = name
        self.hostname = hostname
        self.subdomain = subdomain
        self.template = template
        self.index = index
        meta = template.get("metadata", {})
        self.labels = dict(meta.get("labels", {}))
        self.labels.update(extra_labels)
        self.annotations = dict(meta.get("annotations", {}))
        self.annotations.update(extra_annotations)
        self.injected_env = injected_env
        self.spec = template.get("spec", {})
        self.ip = None
        self.node_name = "node-" + str(index)


def workload_pods(objects):
    """The pods of the first workload (LWS, StatefulSet or Indexed Job)."""
    for o in objects:
        kind = o["kind"]
        name = o["metadata"]["name"]
        spec = o.get("spec", {})
        if kind == "LeaderWorkerSet" and o["apiVersion"] == LWS_API:
            lwt = spec["leaderWorkerTemplate"]
            size = int(lwt.get("size", 1))
            replicas = int(spec.get("replicas", 1))
            policy = spec.get("networkConfig", {}).get("subdomainPolicy",
                                                       "Shared")
            pods = []
            for g in range(replicas):
                subdomain = name if policy == "Shared" else f"{name}-{g}"
                key = hashlib.sha1(f"{name}-{g}".encode()).hexdigest()
                for w in range(size):
                    template = lwt["workerTemplate"]
                    if w == 0 and "leaderTemplate" in lwt:
                        template = lwt["leaderTemplate"]
                    pod_name = f"{name}-{g}" if w == 0 else f"{name}-{g}-{w}"
                    pods.append(
                        PodSpec(
                            o, pod_name, pod_name, subdomain, template,
                            len(pods), {
                                "leaderworkerset.sigs.k8s.io/name": name,
                                "leaderworkerset.sigs.k8s.io/group-index":
                                    str(g),
                                "leaderworkerset.sigs.k8s.io/worker-index":
                                    str(w),
                                "leaderworkerset.sigs.k8s.io/group-key": key,
                            }, {"leaderworkerset.sigs.k8s.io/size": str(size)},
                            [
                                ("LWS_LEADER_ADDRESS",
                                 f"{name}-{g}.{subdomain}.{NAMESPACE}"),
                                ("LWS_GROUP_SIZE", str(size)),
                                ("LWS_WORKER_INDEX", str(w)),
                            ]))
            return pods
        if kind == "StatefulSet":
            pods = []
            for i in range(int(spec.get("replicas", 1))):
                pod_name = f"{name}-{i}"
                pods.append(
                    PodSpec(
                        o, pod_name, pod_name, spec.get("serviceName"),
                        spec["template"], i, {
                            "apps.kubernetes.io/pod-index": str(i),
                            "statefulset.kubernetes.io/pod-name": pod_name,
                        }, {}, []))
            return pods
        if kind == "Job":
            if spec.get("completionMode") != "Indexed":
                raise WiringError(f"Job {name} is not an Indexed Job")
            pods = []
            template = spec["template"]
            for i in range(int(spec.get("completions", 1))):
                suffix = hashlib.sha1(f"{name}{i}".encode()).hexdigest()[:5]
                pods.append(
                    PodSpec(
                        o, f"{name}-{i}-{suffix}", f"{name}-{i}",
                        template.get("spec", {}).get("subdomain"), template, i,
                        {
                            "batch.kubernetes.io/job-completion-index": str(i),
                            "batch.kubernetes.io/job-name": name,
                            "job-name": name,
                        }, {"batch.kubernetes.io/job-completion-index": str(i)},
                        [("JOB_COMPLETION_INDEX", str(i))]))
            return pods
    raise WiringError("no LeaderWorkerSet, StatefulSet or Indexed Job found")


def dns_records(pods, objects):
    """host name -> IP for the names pods get from their headless Service."""
    by_kind = index_objects(objects)
    services = by_kind.get("Service", {})
    records = {}
    for pod in pods:
        sub = pod.subdomain
        if not sub:
            continue
        is_lws = pod.workload["kind"] == "LeaderWorkerSet"
        svc = services.get(sub)
        if not is_lws:
            # The pod's subdomain must be a headless Service selecting it.
            if svc is None:
                raise WiringError(f"pod {pod.name}: subdomain {sub} names no "
                                  "Service in the manifests")
            if svc["spec"].get("clusterIP") != "None":
                raise WiringError(f"Service {sub} is not headless")
            if not selector_matches(svc["spec"].get("selector"), pod.labels):
                raise WiringError(f"Service {sub} does not select pod "
                                  f"{pod.name}")
        base = f"{pod.hostname}.{sub}"
        for name in (base, f"{base}.{NAMESPACE}", f"{base}.{NAMESPACE}.svc",
                     f"{base}.{NAMESPACE}.svc.cluster.local"):
            records[name] = pod.ip
    return records


# --------------------------------------------------------------- env setup


def field_ref(pod, path):
    if path == "metadata.name":
        return pod.name
    if path == "metadata.namespace":
        return NAMESPACE
    if path == "status.podIP":
        return pod.ip
    if path == "status.hostIP":
        return "192.0.2.1"
    if path == "spec.nodeName":
        return pod.node_name
    if path == "spec.serviceAccountName":
        return pod.spec.get("serviceAccountName", "default")
    for prefix, source in (("metadata.labels['", pod.labels),
                           ("metadata.annotations['", pod.annotations)):
        if path.startswith(prefix) and path.endswith("']"):
            key = path[len(prefix):-2]
            if key not in source:
                return ""
            return source[key]
    raise WiringError(f"pod {pod.name}: unsupported fieldRef {path}")


def container_env(pod, container, objects, secrets):
    """The environment Kubernetes gives `container` of `pod` (ordered)."""
    by_kind = index_objects(objects)
    configmaps = by_kind.get("ConfigMap", {})
    env = {"HOSTNAME": pod.hostname,
           "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:"
                   "/sbin:/bin",
           "KUBERNETES_SERVICE_HOST": "192.0.2.250",
           "KUBERNETES_SERVICE_PORT": "443"}
    where = f"pod {pod.name} container {container['name']}"

    def config_value(ref, kind):
        name, key = ref["name"], ref["key"]
        if kind == "configMapKeyRef":
            data = configmaps.get(name, {}).get("data")
            if data is None:
                raise WiringError(f"{where}: ConfigMap {name} not found")
        else:
            data = secrets.get(name)
            if data is None:
                raise WiringError(f"{where}: Secret {name} not found")
        if key not in data:
            if ref.get("optional"):
                return None
            raise WiringError(f"{where}: {kind} {name} has no key {key}")
        return str(data[key])

    for source in container.get("envFrom", []):
        prefix = source.get("prefix", "")
        if "configMapRef" in source:
            name = source["configMapRef"]["name"]
            cm = configmaps.get(name)
            if cm is None:
                if source["configMapRef"].get("optional"):
                    continue
                raise WiringError(f"{where}: ConfigMap {name} not found")
            for k, v in cm.get("data", {}).items():
                env[prefix + k] = str(v)
        elif "secretRef" in source:
            name = source["secretRef"]["name"]
            if name not in secrets:
                raise WiringError(f"{where}: Secret {name} not found")
            for k, v in secrets[name].items():
                env[prefix + k] = str(v)
    entries = [{"name": k, "value": v} for k, v in pod.injected_env]
    entries += container.get("env", [])
    for e in entries:
        name = e["name"]
        if "valueFrom" in e:
            vf = e["valueFrom"]
            if "fieldRef" in vf:
                value = field_ref(pod, vf["fieldRef"]["fieldPath"])
            elif "configMapKeyRef" in vf:
                value = config_value(vf["configMapKeyRef"], "configMapKeyRef")
            elif "secretKeyRef" in vf:
                value = config_value(vf["secretKeyRef"], "secretKeyRef")
            else:
                raise WiringError(f"{where}: unsupported valueFrom {vf}")
            if value is None:
                continue
        else:
            value = expand(str(e.get("value", "")), env.get)
        env[name] = value
    return env


def container_argv(container, env):
    if "command" not in container:
        raise WiringError(f"container {container['name']}: no command (the "
                          "image's entrypoint is not modelled)")
    words = list(container["command"]) + list(container.get("args", []))
    return [expand(str(w), env.get) for w in words]


# ----------------------------------------------------------------- network


def is_root():
    return os.geteuid() == 0


def netns_available():
    """Network namespaces can be used (root, iproute2, and not switched off
    with RANKD_TEST_HOST_NETWORK=1)."""
    if os.environ.get("RANKD_TEST_HOST_NETWORK") == "1":
        return False
    if not is_root() or not os.path.exists(IP):
        return False
    name = f"rkprobe{os.getpid()}"
    ok = subprocess.run([IP, "netns", "add", name],
                        capture_output=True).returncode == 0
    if ok:
        subprocess.run([IP, "netns", "del", name], capture_output=True)
    return ok


def run(argv, check=True):
    p = subprocess.run(argv, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {p.stderr.strip()}")
    return p


# ----------------------------------------------------------------- cluster


class Container:

    def __init__(self, pod, spec, env, argv, log):
        self.pod = pod
        self.spec = spec
        self.env = env
        self.argv = argv
        self.log = log
        self.process = None

    @property
    def name(self):
        return self.spec["name"]

    def running(self):
        return self.process is not None and self.process.poll() is None

    def read_log(self):
        try:
            with open(self.log, errors="replace") as f:
                return f.read()
        except OSError:
            return ""


class Cluster:
    """The pods of one rendered manifest set, run as local processes."""

    def __init__(self, objects, binaries, secrets=None, secret_files=None,
                 use_netns=None):
        """binaries: image command name -> host path (rankd, rankctl, ...).
        secrets: Secret name -> {key: value} for secretKeyRef.
        secret_files: Secret name -> folder holding its keys as files.
        Secrets among `objects` (a kustomize secretGenerator's) are
        modelled from their data unless secret_files names them."""
        self.objects = objects
        self.secrets = secrets or {}
        self.secret_files = secret_files or {}
        self.netns = netns_available() if use_netns is None else use_netns
        self.id = f"{os.getpid() % 10000}{random.randint(0, 99)}"
        self.root = tempfile.mkdtemp(prefix="rkw")
        self.namespaces = []
        self.containers = []
        try:
            self._setup(binaries)
        except BaseException:
            self.close()
            raise

    def _setup(self, binaries):
        os.chmod(self.root, 0o755)
        for obj in self.objects:
            name = obj["metadata"]["name"]
            if obj["kind"] != "Secret" or name in self.secret_files:
                continue
            folder = os.path.join(self.root, "secrets", name)
            os.makedirs(folder)
            items = {k: base64.b64decode(v) for k, v in obj.get("data", {}).items()}
            items.update({k: v.encode() for k, v in obj.get("stringData", {}).items()})
            for key, value in items.items():
                with open(os.path.join(folder, key), "wb") as f:
                    f.write(value)
            self.secret_files[name] = folder
        self.rewrites = []
        self.pods = workload_pods(self.objects)
        self._lock = threading.Lock()
        if self.netns:
            self.node_ip = "192.0.2.1"
            for i, pod in enumerate(self.pods):
                pod.ip = f"192.0.2.{10 + i}"
        else:
            a, b = random.randint(20, 250), random.randint(1, 250)
            self.node_ip = f"127.{a}.{b}.1"
            for i, pod in enumerate(self.pods):
                pod.ip = f"127.{a}.{b}.{10 + i}"
        self.records = dns_records(self.pods, self.objects)
        self.bin_dir = os.path.join(self.root, "bin")
        os.makedirs(self.bin_dir)
        for name, path in binaries.items():
            target = os.path.join(self.bin_dir, name)
            if self.netns:
                # The pods' user must be able to run them (a copy, not a link
                # into root's Bazel cache).
                shutil.copy(path, target)
                os.chmod(target, 0o755)
            else:
                os.symlink(os.path.abspath(path), target)
        if self.netns:
            self._make_network()

    # -- network

    def ns(self, pod):
        return f"rkw{self.id}p{pod.index}"

    def _make_network(self):
        sw = f"rkw{self.id}sw"
        run([IP, "netns", "add", sw])
        self.namespaces.append(sw)
        run([IP, "-n", sw, "link", "set", "lo", "up"])
        run([IP, "-n", sw, "link", "add", "br0", "type", "bridge"])
        run([IP, "-n", sw, "addr", "add", f"{self.node_ip}/24", "dev", "br0"])
        run([IP, "-n", sw, "link", "set", "br0", "up"])
        hosts = ["127.0.0.1 localhost", "::1 localhost"]
        for name, ip in sorted(self.records.items()):
            hosts.append(f"{ip} {name}")
        for pod in self.pods:
            ns = self.ns(pod)
            run([IP, "netns", "add", ns])
            self.namespaces.append(ns)
            run([IP, "-n", ns, "link", "set", "lo", "up"])
            host_if = f"rkw{self.id}v{pod.index}"
            run([IP, "-n", sw, "link", "add", host_if, "type", "veth", "peer",
                 "name", "eth0", "netns", ns])
            run([IP, "-n", sw, "link", "set", host_if, "master", "br0"])
            run([IP, "-n", sw, "link", "set", host_if, "up"])
            run([IP, "-n", ns, "addr", "add", f"{pod.ip}/24", "dev", "eth0"])
            run([IP, "-n", ns, "link", "set", "eth0", "up"])
            # `ip netns exec` mounts these over /etc/hosts and
            # /etc/resolv.conf: the headless Service's DNS names, and no
            # name server outside the pod.
            etc = f"/etc/netns/{ns}"
            os.makedirs(etc, exist_ok=True)
            with open(f"{etc}/hosts", "w") as f:
                f.write("\n".join(hosts + [f"{pod.ip} {pod.hostname}"]) + "\n")
            with open(f"{etc}/resolv.conf", "w") as f:
                f.write(f"nameserver 127.0.0.1\nsearch {NAMESPACE}.svc."
                        "cluster.local svc.cluster.local cluster.local\n"
                        "options ndots:5 attempts:1 timeout:1\n")

    def in_node(self, argv):
        """argv run from the node (where the kubelet and Prometheus are)."""
        if self.netns:
            return [IP, "netns", "exec", f"rkw{self.id}sw"] + argv
        return argv

    def in_pod(self, pod, argv, as_user=True):
        """argv run inside `pod`'s network (as its user, when root)."""
        if not self.netns:
            return argv
        prefix = [IP, "netns", "exec", self.ns(pod)]
        if as_user:
            ctx = pod.spec.get("securityContext", {})
            uid = ctx.get("runAsUser", POD_UID)
            gid = ctx.get("runAsGroup", uid)
            groups = [str(gid)]
            if "fsGroup" in ctx:
                groups.append(str(ctx["fsGroup"]))
            prefix += ["setpriv", f"--reuid={uid}", f"--regid={gid}",
                       f"--groups={','.join(groups)}", "--inh-caps=-all",
                       "--bounding-set=-all", "--no-new-privs"]
        return prefix + argv

    # -- volumes

    def _volume_dirs(self, pod):
        dirs = {}
        fs_group = pod.spec.get("securityContext", {}).get("fsGroup")
        for v in pod.spec.get("volumes", []):
            path = os.path.join(self.root, str(pod.index), v["name"])
            if "emptyDir" in v:
                os.makedirs(path, exist_ok=True)
                if self.netns and fs_group is not None:
                    os.chown(path, 0, fs_group)
                    os.chmod(path, 0o2775)
                else:
                    os.chmod(path, 0o777)
            elif "secret" in v:
                name = v["secret"]["secretName"]
                source = self.secret_files.get(name)
                if source is None:
                    raise WiringError(f"pod {pod.name}: Secret {name} (volume "
                                      f"{v['name']}) does not exist")
                shutil.copytree(source, path)
                mode = v["secret"].get("defaultMode", 0o644)
                for f in os.listdir(path):
                    fp = os.path.join(path, f)
                    if self.netns and fs_group is not None:
                        os.chown(fp, 0, fs_group)
                    os.chmod(fp, mode)
                os.chmod(path, 0o755)
            else:
                raise WiringError(f"pod {pod.name}: volume {v['name']}: only "
                                  "emptyDir and secret are modelled")
            dirs[v["name"]] = path
        return dirs

    def _map_paths(self, container, volume_dirs, words):
        mounts = sorted(container.get("volumeMounts", []),
                        key=lambda m: -len(m["mountPath"]))
        out = []
        for w in words:
            for m in mounts:
                if m["name"] not in volume_dirs:
                    raise WiringError(f"container {container['name']} mounts "
                                      f"unknown volume {m['name']}")
                if m["mountPath"] in w:
                    w = w.replace(m["mountPath"], volume_dirs[m["name"]])
            out.append(w)
        return out

    def _host_network_rewrites(self, pod, container, env):
        """Without network namespaces: what only a pod network can give."""
        if self.netns:
            return env
        out = {}
        for k, v in env.items():
            new = v.replace("0.0.0.0:", f"{pod.ip}:")
            for name, ip in sorted(self.records.items(),
                                   key=lambda r: -len(r[0])):
                new = new.replace(name + ":", ip + ":")
                if new == name:
                    new = ip
            if new != v:
                self.rewrites.append(
                    f"{pod.name}/{container['name']}: {k}={v} -> {new}")
            out[k] = new
        return out

    # -- containers

    def prepare(self, pod, container):
        env = container_env(pod, container, self.objects, self.secrets)
        argv = container_argv(container, env)
        volume_dirs = getattr(pod, "volume_dirs", None)
        if volume_dirs is None:
            volume_dirs = pod.volume_dirs = self._volume_dirs(pod)
        names = list(env)
        values = self._map_paths(container, volume_dirs, list(env.values()))
        env = dict(zip(names, values))
        argv = self._map_paths(container, volume_dirs, argv)
        env = self._host_network_rewrites(pod, container, env)
        env["PATH"] = self.bin_dir + ":" + env["PATH"]
        log = os.path.join(self.root, f"{pod.name}.{container['name']}.log")
        return Container(pod, container, env, argv, log)

    def start(self, c):
        argv = list(c.argv)
        if "/" not in argv[0]:
            found = shutil.which(argv[0], path=c.env["PATH"])
            if found is None:
                raise WiringError(f"{c.pod.name}/{c.name}: {argv[0]} is not in "
                                  "the image")
            argv[0] = found
        with open(c.log, "ab") as log:
            c.process = subprocess.Popen(self.in_pod(c.pod, argv),
                                         env=c.env,
                                         stdin=subprocess.DEVNULL,
                                         stdout=log,
                                         stderr=subprocess.STDOUT,
                                         start_new_session=True,
                                         cwd="/")
        with self._lock:
            self.containers.append(c)

    def probe(self, c, probe):
        """One probe as the kubelet runs it; True on success."""
        timeout = probe.get("timeoutSeconds", 1)
        if "grpc" in probe:
            g = probe["grpc"]
            argv = [os.path.join(self.bin_dir, "rankctl"),
                    f"--target={c.pod.ip}:{g['port']}",
                    f"--timeout_ms={timeout * 1000}", "health"]
            if g.get("service"):
                argv.insert(-1, f"--service={g['service']}")
            argv = self.in_node(argv)
            env = {"PATH": TOOL_PATH}
        elif "exec" in probe:
            words = self._map_paths(c.spec, c.pod.volume_dirs,
                                    [expand(w, c.env.get)
                                     for w in probe["exec"]["command"]])
            found = shutil.which(words[0], path=c.env["PATH"])
            if found is None:
                return False
            argv = self.in_pod(c.pod, [found] + words[1:])
            env = c.env
        elif "tcpSocket" in probe:
            port = probe["tcpSocket"]["port"]
            argv = self.in_node(["python3", "-c",
                                 "import socket,sys; socket.create_connection("
                                 f"('{c.pod.ip}', {int(port)}), {timeout})"])
            env = {"PATH": TOOL_PATH}
        else:
            raise WiringError(f"{c.pod.name}/{c.name}: unsupported probe "
                              f"{probe}")
        try:
            p = subprocess.run(argv, env=env, capture_output=True,
                               timeout=timeout + 5)
        except subprocess.TimeoutExpired:
            return False
        return p.returncode == 0

    def wait_probe(self, c, kind, limit_s):
        """Runs c's `kind` probe until it succeeds or limit_s passes."""
        probe = c.spec.get(kind)
        if probe is None:
            return True
        deadline = time.time() + limit_s
        period = min(probe.get("periodSeconds", 10), 1)
        while time.time() < deadline:
            if not c.running() and c.process is not None:
                return False
            if self.probe(c, probe):
                return True
            time.sleep(period)
        return False

    def start_pod(self, pod, startup_limit_s=30):
        """The kubelet's start sequence for one pod."""
        for spec in pod.spec.get("initContainers", []):
            c = self.prepare(pod, spec)
            self.start(c)
            if spec.get("restartPolicy") == "Always":
                if not self.wait_probe(c, "startupProbe", startup_limit_s):
                    raise WiringError(
                        f"{pod.name}/{c.name}: startup probe never passed\n"
                        + c.read_log()[-3000:])
            else:
                if c.process.wait(timeout=startup_limit_s) != 0:
                    raise WiringError(f"{pod.name}/{c.name}: init container "
                                      "failed\n" + c.read_log()[-3000:])
        for spec in pod.spec.get("containers", []):
            self.start(self.prepare(pod, spec))

    def start_all(self, startup_limit_s=30):
        errors = []

        def one(pod):
            try:
                self.start_pod(pod, startup_limit_s)
            except Exception as e:  # reported below
                errors.append(f"{pod.name}: {e}")

        threads = [threading.Thread(target=one, args=(p,)) for p in self.pods]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise WiringError("\n".join(errors))

    def container(self, pod, name):
        for c in self.containers:
            if c.pod is pod and c.name == name:
                return c
        raise KeyError(f"{pod.name}/{name}")

    def sidecar_probe(self, pod, kind, name="rankd"):
        c = self.container(pod, name)
        return self.probe(c, c.spec[kind])

    def rankctl(self, pod, args, tls=None, timeout_s=10):
        """rankctl against pod's rankd from inside the pod, as
        `kubectl port-forward` would connect (127.0.0.1:PORT)."""
        c = self.container(pod, "rankd")
        port = int(c.env.get("RANKD_LISTEN", "0.0.0.0:7421").rsplit(":", 1)[1])
        host = "127.0.0.1" if self.netns else pod.ip
        argv = [os.path.join(self.bin_dir, "rankctl"), f"--target={host}:{port}"]
        # The operator's copy of the job's operator token.
        creds = self.secret_files.get("rankd-credentials")
        if creds is not None:
            argv.append(f"--token_file={creds}/operator.token")
        argv += tls or []
        argv += args
        p = subprocess.run(self.in_pod(pod, argv, as_user=False),
                           capture_output=True, text=True, timeout=timeout_s,
                           env={"PATH": TOOL_PATH})
        return p

    def scrape(self, pod, port, path="/metrics"):
        """GET http://<pod IP>:port/path from the node, as Prometheus would."""
        url = f"http://{pod.ip}:{port}{path}"
        if not self.netns:
            with urllib.request.urlopen(url, timeout=5) as r:
                return r.read().decode()
        p = subprocess.run(self.in_node([
            "python3", "-c",
            "import sys, urllib.request; sys.stdout.write(urllib.request."
            f"urlopen({url!r}, timeout=5).read().decode())"
        ]), capture_output=True, text=True, timeout=15)
        if p.returncode != 0:
            raise RuntimeError(f"scrape {url}: {p.stderr}")
        return p.stdout

    def stop_container(self, c, sig=signal.SIGTERM, grace_s=10):
        """Stops c's process group (which this cluster created)."""
        if c.process is None:
            return None
        if c.process.poll() is None:
            try:
                os.killpg(c.process.pid, sig)
            except ProcessLookupError:
                pass
            try:
                c.process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                os.killpg(c.process.pid, signal.SIGKILL)
                c.process.wait()
        # Background children of a shell live on in its group.
        try:
            os.killpg(c.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        return c.process.returncode

    def stop_pod(self, pod, grace_s=10):
        """Pod deletion: main containers first, then sidecars in reverse.
        Returns {container name: exit status}."""
        result = {}
        mains = [c for c in self.containers
                 if c.pod is pod and c.spec in pod.spec.get("containers", [])]
        sidecars = [c for c in self.containers
                    if c.pod is pod and c not in mains]
        for c in mains:
            result[c.name] = self.stop_container(c, grace_s=grace_s)
        for c in reversed(sidecars):
            result[c.name] = self.stop_container(c, grace_s=grace_s)
        return result

    def close(self):
        for c in list(self.containers):
            if c.process is not None:
                try:
                    os.killpg(c.process.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                try:
                    c.process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
        for ns in self.namespaces:
            subprocess.run([IP, "netns", "del", ns], capture_output=True)
            shutil.rmtree(f"/etc/netns/{ns}", ignore_errors=True)
        self.namespaces = []
        shutil.rmtree(self.root, ignore_errors=True)

    def logs(self):
        return "\n".join(f"--- {c.pod.name}/{c.name} ({c.argv[0]})\n"
                         + c.read_log()[-4000:] for c in self.containers)


def json_of(completed):
    if completed.returncode != 0:
        raise RuntimeError(f"rankctl exited {completed.returncode}: "
                           f"{completed.stdout}{completed.stderr}")
    return json.loads(completed.stdout)


def metric(text, name, labels=None):
    """Value of one sample of the Prometheus text `text`, or None."""
    want = name
    if labels:
        want += "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"
    for line in text.splitlines():
        if line.startswith(want + " "):
            return float(line.split()[-1])
    return None

