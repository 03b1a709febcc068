"""A real, throw-away Kubernetes control plane: etcd + kube-apiserver on loopback.

Why: CEL rules, defaults, pruning, printer columns, selectable fields and admission webhooks
are only exercised for real by the real API server. The binaries are built from the Go module
proxy by `tools/build-control-plane.sh` into a cache outside the clone. Ports are picked free
at start, so several control planes can run side by side on one machine. There is no
controller-manager: CronJobs never fire and owner garbage collection never runs.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pathlib
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator
from typing import Any

import httpx
import yaml

from finops_devenv import ports, tls

log = logging.getLogger(__name__)

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
BUILD_SCRIPT = REPO_ROOT / "tools" / "build-control-plane.sh"


class ControlPlaneError(RuntimeError):
    """The control plane could not be built, started or used."""


def ensure_binaries() -> pathlib.Path:
    """Return the directory holding `etcd` and `kube-apiserver`, building them if missing.

    `FINOPS_ENVTEST_BIN` points at a ready directory and skips the build script.
    """
    override = os.environ.get("FINOPS_ENVTEST_BIN")
    if override:
        path = pathlib.Path(override)
    else:
        if not BUILD_SCRIPT.exists():
            raise ControlPlaneError(
                f"{BUILD_SCRIPT} not found; set FINOPS_ENVTEST_BIN to a directory holding "
                "etcd and kube-apiserver"
            )
        done = subprocess.run([str(BUILD_SCRIPT)], check=False, stdout=subprocess.PIPE, text=True)
        if done.returncode != 0:
            raise ControlPlaneError(f"{BUILD_SCRIPT} failed with exit status {done.returncode}")
        path = pathlib.Path(done.stdout.strip().splitlines()[-1])
    for name in ("etcd", "kube-apiserver"):
        if not (path / name).is_file():
            raise ControlPlaneError(f"{path / name} is missing")
    return path


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 20) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `timeout` seconds."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _scratch_root() -> str | None:
    """Prefer memory-backed storage for etcd: fsync on disk makes every write slow."""
    shm = pathlib.Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


class ControlPlane:
    """etcd + kube-apiserver with client-certificate auth (user `admin`, `system:masters`)."""

    def __init__(self, bin_dir: pathlib.Path | None = None, start_timeout: float = 90.0) -> None:
        self.bin_dir = bin_dir or ensure_binaries()
        self.start_timeout = start_timeout
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="finops-kube-", dir=_scratch_root()))
        self.port = 0
        self.server = ""
        self.kubeconfig = self.dir / "kubeconfig"
        self.ca_file = self.dir / "serving-ca.crt"
        self.client_cert = self.dir / "admin.crt"
        self.client_key = self.dir / "admin.key"
        self._procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self._apiserver_args: list[str] = []
        self._client_ca = tls.TinyCA("finops-test-client-ca")
        self._serving_ca = tls.TinyCA("finops-test-serving-ca")

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> ControlPlane:
        """Start etcd, then kube-apiserver; return once `default` namespace exists."""
        try:
            etcd_url = self._start_etcd()
            self._start_apiserver(etcd_url)
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the API server first, then etcd, and remove every file."""
        for _name, proc in reversed(self._procs):
            stop_process(proc, timeout=15)
        self._procs.clear()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        out = (self.dir / f"{name}.log").open("ab")  # a restarted process appends
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, cwd=self.dir)
        out.close()
        self._procs.append((name, proc))
        return proc

    def log_tail(self, name: str, lines: int = 30) -> str:
        """The end of a component's log, for error messages."""
        path = self.dir / f"{name}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def _start_etcd(self) -> str:
        client, peer = ports.free_port(), ports.free_port()
        url, peer_url = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
        self._spawn(
            "etcd",
            [
                str(self.bin_dir / "etcd"),
                "--name=finops-test",
                f"--data-dir={self.dir / 'etcd'}",
                f"--listen-client-urls={url}",
                f"--advertise-client-urls={url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=finops-test={peer_url}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )
        self._poll("etcd", lambda: httpx.get(f"{url}/health", timeout=2).status_code == 200)
        return url

    def _start_apiserver(self, etcd_url: str) -> None:
        self.port = ports.free_port()
        self.server = f"https://127.0.0.1:{self.port}"
        serving_crt, serving_key = self._serving_ca.serving(["127.0.0.1", "localhost"]).write(
            self.dir, "apiserver"
        )
        self.ca_file.write_bytes(self._serving_ca.cert_pem)
        client_ca = self.dir / "client-ca.crt"
        client_ca.write_bytes(self._client_ca.cert_pem)
        self._client_ca.client("admin", ["system:masters"]).write(self.dir, "admin")
        sa_pub, sa_key = tls.rsa_key_pair().write(self.dir, "sa-signer")
        self._apiserver_args = [
            str(self.bin_dir / "kube-apiserver"),
            "--allow-privileged=true",
            "--authorization-mode=RBAC",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.port}",
            f"--cert-dir={self.dir}",
            f"--tls-cert-file={serving_crt}",
            f"--tls-private-key-file={serving_key}",
            f"--client-ca-file={client_ca}",
            "--disable-admission-plugins=ServiceAccount",
            f"--etcd-servers={etcd_url}",
            f"--service-account-issuer={self.server}/",
            f"--service-account-key-file={sa_pub}",
            f"--service-account-signing-key-file={sa_key}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--enable-priority-and-fairness=false",
            "--profiling=false",
        ]
        self._spawn("kube-apiserver", self._apiserver_args)
        self._write_kubeconfig()

    def _write_kubeconfig(self) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "finops-test",
                    "cluster": {"server": self.server, "certificate-authority": str(self.ca_file)},
                }
            ],
            "users": [
                {
                    "name": "admin",
                    "user": {
                        "client-certificate": str(self.client_cert),
                        "client-key": str(self.client_key),
                    },
                }
            ],
            "contexts": [
                {"name": "finops-test", "context": {"cluster": "finops-test", "user": "admin"}}
            ],
            "current-context": "finops-test",
        }
        self.kubeconfig.write_text(yaml.safe_dump(config))

    def _wait_ready(self) -> None:
        with self.http(timeout=5) as client:

            def ready() -> bool:
                return (
                    client.get("/readyz").status_code == 200
                    and client.get("/api/v1/namespaces/default").status_code == 200
                )

            self._poll("kube-apiserver", ready)

    def _poll(self, name: str, check: Any) -> None:
        deadline = time.monotonic() + self.start_timeout
        proc = dict(self._procs)[name]
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise ControlPlaneError(
                    f"{name} exited with status {proc.returncode}:\n{self.log_tail(name)}"
                )
            with contextlib.suppress(httpx.HTTPError, OSError):
                if check():
                    return
            time.sleep(0.2)
        raise ControlPlaneError(
            f"{name} not ready after {self.start_timeout}s:\n{self.log_tail(name)}"
        )

    # -- faults (tests/faults) -----------------------------------------------------------------

    def stop_apiserver(self) -> None:
        """Stop kube-apiserver only (etcd keeps the data); `start_apiserver` brings it back."""
        for entry in [e for e in self._procs if e[0] == "kube-apiserver"]:
            stop_process(entry[1], timeout=15)
            self._procs.remove(entry)

    def start_apiserver(self) -> None:
        """Start kube-apiserver again on the same port, certificates and etcd; wait for it."""
        if any(name == "kube-apiserver" for name, _ in self._procs):
            raise ControlPlaneError("kube-apiserver is already running")
        self._spawn("kube-apiserver", self._apiserver_args)
        self._wait_ready()

    def apiserver_pid(self) -> int:
        """Process id of the running kube-apiserver (to freeze it with SIGSTOP/SIGCONT)."""
        return dict(self._procs)["kube-apiserver"].pid

    # -- clients -------------------------------------------------------------------------------

    def ssl_context(self) -> ssl.SSLContext:
        """Trust the serving CA and present the admin client certificate."""
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        ctx.load_cert_chain(str(self.client_cert), str(self.client_key))
        return ctx

    def http(self, timeout: float = 30.0) -> httpx.Client:
        """An HTTP client talking to the API server as `admin` (system:masters)."""
        return httpx.Client(base_url=self.server, verify=self.ssl_context(), timeout=timeout)

    # -- helpers used by tests and the sandbox -------------------------------------------------

    def install_crds(self, paths: Iterable[pathlib.Path], timeout: float = 60.0) -> list[str]:
        """Create or replace each CRD and wait until all are Established; return their names."""
        names: list[str] = []
        base = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        with self.http() as client:
            for path in paths:
                for doc in yaml.safe_load_all(path.read_text()):
                    if not doc:
                        continue
                    name = doc["metadata"]["name"]
                    resp = client.post(base, json=doc)
                    if resp.status_code == 409:
                        current = client.get(f"{base}/{name}").json()
                        doc["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                        resp = client.put(f"{base}/{name}", json=doc)
                    if resp.status_code >= 300:
                        raise ControlPlaneError(
                            f"installing CRD {name} from {path} failed: {resp.status_code} "
                            f"{resp.text}"
                        )
                    names.append(name)
            deadline = time.monotonic() + timeout
            for name in names:
                while True:
                    status = client.get(f"{base}/{name}").json().get("status") or {}
                    conds = status.get("conditions") or []
                    if any(c["type"] == "Established" and c["status"] == "True" for c in conds):
                        break
                    if time.monotonic() > deadline:
                        raise ControlPlaneError(f"CRD {name} not Established: {json.dumps(conds)}")
                    time.sleep(0.1)
        return names

    def create_namespace(self, name: str, labels: dict[str, str] | None = None) -> None:
        """Create a namespace (there is no namespace controller, so none is ever removed)."""
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        if labels:
            body["metadata"]["labels"] = labels  # type: ignore[index]
        with self.http() as client:
            resp = client.post("/api/v1/namespaces", json=body)
            if resp.status_code not in (201, 409):
                raise ControlPlaneError(f"creating namespace {name}: {resp.text}")


@contextlib.contextmanager
def running(crd_dir: pathlib.Path | None = None) -> Iterator[ControlPlane]:
    """A started control plane (with the CRDs of `crd_dir` installed), stopped on exit."""
    with ControlPlane() as cp:
        if crd_dir is not None:
            cp.install_crds(sorted(crd_dir.glob("*.yaml")))
        yield cp
