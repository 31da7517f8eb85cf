"""A real local rankd job for the Python tests: fresh credentials, one
rankd daemon per node (the first the coordinator) on loopback, and rank
processes started with the environment a launcher sets. Stops only what it
started, by pid.

Binaries come from $RANKD_BIN_DIR (a bazel-bin or an install prefix's
layout: daemon/rankd and client/rankctl, or bin/rankd and bin/rankctl).
"""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time


def _binary(name, subdir):
    root = os.environ.get("RANKD_BIN_DIR", "")
    for path in (os.path.join(root, subdir, name), os.path.join(root, "bin",
                                                                name)):
        if os.path.exists(path):
            return path
    raise FileNotFoundError(
        f"{name} not found under $RANKD_BIN_DIR={root!r} ({subdir}/ or bin/)")


def _native_env():
    """The environment for rankd and rankctl: without the sanitizer runtime
    a sanitizer build preloads into Python (python/run_pytest.sh), which
    those binaries carry themselves."""
    return {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalJob:
    """`nnodes` daemons x `nproc_per_node` ranks of job `job_id`; every
    daemon also gets `daemon_flags`."""

    def __init__(self, job_id, nnodes=1, nproc_per_node=2, daemon_flags=()):
        self.job_id = job_id
        self.nnodes = nnodes
        self.nproc_per_node = nproc_per_node
        self.dir = tempfile.mkdtemp(prefix="rankd-pytest-")
        self._daemon_flags = list(daemon_flags)
        self._daemons = []
        self._ranks = []
        self.addresses = [f"127.0.0.1:{_free_port()}" for _ in range(nnodes)]

    def socket_target(self, node):
        return f"unix://{self.dir}/node{node}.sock"

    def start(self, timeout=20.0):
        rankd = _binary("rankd", "daemon")
        rankctl = _binary("rankctl", "client")
        creds = os.path.join(self.dir, "credentials")
        subprocess.run([rankctl, "credentials", "create", creds], check=True,
                       stdout=subprocess.DEVNULL, env=_native_env())
        node_creds = [creds]
        for n in range(1, self.nnodes):
            own = os.path.join(self.dir, f"credentials-node{n}")
            os.mkdir(own, 0o700)
            token = subprocess.run(
                [rankctl, "credentials", "node-token", creds, self.job_id,
                 str(n)], check=True, capture_output=True,
                env=_native_env()).stdout
            with open(os.path.join(own, "node.token"), "wb") as f:
                f.write(token)
            shutil.copy(os.path.join(creds, "operator.token"), own)
            node_creds.append(own)
        for n in range(self.nnodes):
            args = [rankd, f"--job_id={self.job_id}", f"--nnodes={self.nnodes}",
                    f"--node_index={n}",
                    f"--nproc_per_node={self.nproc_per_node}",
                    f"--listen={self.addresses[n]}",
                    f"--socket={self.dir}/node{n}.sock",
                    f"--credentials_dir={node_creds[n]}",
                    "--heartbeat_interval_ms=100",
                    "--heartbeat_timeout_ms=1000"] + self._daemon_flags
            if n > 0:
                args.append(f"--coordinator={self.addresses[0]}")
            log = open(os.path.join(self.dir, f"daemon{n}.log"), "wb")
            self._daemons.append(subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT,
                env=_native_env()))
        deadline = time.monotonic() + timeout
        for n in range(self.nnodes):
            while True:
                probe = subprocess.run(
                    [rankctl, f"--target={self.addresses[n]}",
                     "--service=readiness", "--timeout_ms=1000", "health"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                    env=_native_env())
                if probe.returncode == 0:
                    break
                if self._daemons[n].poll() is not None or \
                        time.monotonic() > deadline:
                    raise RuntimeError(
                        f"daemon {n} did not become ready:\n" +
                        self.log(f"daemon{n}.log"))
                time.sleep(0.1)
        return self

    def rank_token(self, node, rank):
        """Rank `rank`'s own token for joining through node `node`."""
        rankctl = _binary("rankctl", "client")
        return subprocess.run(
            [rankctl, "credentials", "rank-token",
             os.path.join(self.dir, "credentials"), self.job_id, str(node),
             str(rank)], check=True, capture_output=True, text=True,
            env=_native_env()).stdout.strip()

    def log(self, name):
        try:
            with open(os.path.join(self.dir, name), errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def start_rank(self, program, node, local_rank, *args, env=None,
                   log_name=None):
        """Starts `program` (a Python file, under /usr/bin/python3) as local
        rank `local_rank` of node `node`, its output in `log_name` (default
        rank<r>.log); returns the process."""
        r = node * self.nproc_per_node + local_rank
        e = dict(os.environ)
        e.update(env or {})
        e.update({"RANKD_TARGET": self.socket_target(node),
                  "RANKD_JOB_ID": self.job_id,
                  "RANKD_LOCAL_RANK": str(local_rank),
                  # The rank's own token, as rankrun hands it.
                  "RANKD_RANK_TOKEN": self.rank_token(node, r)})
        log = open(os.path.join(self.dir, log_name or f"rank{r}.log"), "wb")
        p = subprocess.Popen([sys.executable, program, *args], env=e,
                             stdout=log, stderr=subprocess.STDOUT)
        self._ranks.append(p)
        return p

    def run_ranks(self, program, *args, timeout=90.0, env=None):
        """Runs `program` (a Python file, under /usr/bin/python3) on every
        rank; returns [(exit code, output)] in rank order."""
        procs = []
        for n in range(self.nnodes):
            for l in range(self.nproc_per_node):
                procs.append((n * self.nproc_per_node + l,
                              self.start_rank(program, n, l, *args, env=env)))
        deadline = time.monotonic() + timeout
        results = []
        for r, p in procs:
            try:
                code = p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                code = p.wait()
            results.append((code, self.log(f"rank{r}.log")))
        return results

    def stop(self):
        for p in self._ranks + self._daemons:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
