"""A real single-node Kubernetes cluster on this machine: pods run in containers, CronJobs fire.

Why: the chart's pods, the image's entrypoint, the generated CronJobs, the downward API,
garbage collection and webhooks reached through their Service only happen for real with a
kubelet, a scheduler and a controller-manager. This module runs all of them (etcd,
kube-apiserver, kube-controller-manager, kube-scheduler, containerd + runc, kubelet,
kube-proxy, CoreDNS) as host processes, with certificates made per run.

It changes the host, so it needs root and keeps to names of its own: the interfaces
`finops0` (the node's address, a dummy interface) and `finops-br0` (the pod bridge), iptables
chains `FINOPS-*` plus the `KUBE-*`/`CNI-*` chains kube-proxy and CNI make, mounts under
`STATE_ROOT`. One cluster per machine; `start()` first removes whatever a crashed run left,
and `stop()` removes everything (`teardown()` does it without a running instance).

Every packet stays on this machine: the node and Service addresses are routed to the dummy
interface, pods reach nothing but the bridge and the node's own addresses (a FORWARD rule
drops the rest), and cluster DNS answers only cluster names.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pathlib
import shlex
import shutil
import signal
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import yaml

from finops_devenv import controlplane, ports, tls

log = logging.getLogger(__name__)

REPO_ROOT = controlplane.REPO_ROOT
NODE_BUILD = REPO_ROOT / "tools" / "build-node.sh"
IMAGES_BUILD = REPO_ROOT / "tools" / "images.sh"
STATE_ROOT = pathlib.Path(os.environ.get("FINOPS_NODE_STATE", "/var/lib/finops-node"))

NODE_NAME = "finops-node"
NODE_IP = "10.213.0.1"
POD_CIDR = "10.213.1.0/24"
POD_GATEWAY = "10.213.1.1"
SERVICE_CIDR = "10.213.2.0/24"
KUBERNETES_SERVICE_IP = "10.213.2.1"
CLUSTER_DOMAIN = "cluster.local"
APISERVER_PORT = 6443
DUMMY = "finops0"
BRIDGE = "finops-br0"
EGRESS_CHAIN = "FINOPS-EGRESS"
COMPONENTS = ("kubelet", "kube-controller-manager", "kube-scheduler", "kube-proxy", "coredns")
STORAGE_CLASS = "finops-local"


class RealNodeError(RuntimeError):
    """The cluster could not be built, started, used or removed."""


def _run(args: Sequence[str], check: bool = True, **kw: Any) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(list(args), capture_output=True, text=True, check=False, **kw)
    if check and done.returncode != 0:
        raise RealNodeError(
            f"{' '.join(args)} failed ({done.returncode}): {done.stderr.strip() or done.stdout}"
        )
    return done


def _script_dir(script: pathlib.Path, env_override: str) -> pathlib.Path:
    override = os.environ.get(env_override)
    if override:
        return pathlib.Path(override)
    done = subprocess.run([str(script)], check=False, stdout=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise RealNodeError(f"{script} failed with exit status {done.returncode}")
    return pathlib.Path(done.stdout.strip().splitlines()[-1])


def node_binaries() -> pathlib.Path:
    """The directory with kubelet & co., built by `tools/build-node.sh` when missing."""
    path = _script_dir(NODE_BUILD, "FINOPS_NODE_BIN")
    for name in (*COMPONENTS, "kubectl"):
        if not (path / name).is_file():
            raise RealNodeError(f"{path / name} is missing")
    return path


@dataclass(frozen=True)
class Image:
    """One image built by `tools/images.sh`: its name, reference and OCI archive."""

    name: str
    ref: str
    archive: pathlib.Path

    @property
    def repository(self) -> str:
        return self.ref.rsplit(":", 1)[0]

    @property
    def tag(self) -> str:
        return self.ref.rsplit(":", 1)[1]


def build_images(names: Sequence[str] = ()) -> dict[str, Image]:
    """Build (or reuse) the images; `tools/images.sh` prints `NAME REF ARCHIVE` per line."""
    done = subprocess.run(
        [str(IMAGES_BUILD), *names], check=False, stdout=subprocess.PIPE, text=True
    )
    if done.returncode != 0:
        raise RealNodeError(f"{IMAGES_BUILD} failed with exit status {done.returncode}")
    images: dict[str, Image] = {}
    for line in done.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3:
            images[parts[0]] = Image(parts[0], parts[1], pathlib.Path(parts[2]))
    return images


def host_ready() -> str:
    """Why this machine cannot run the node, or '' when it can (root, tools present)."""
    if os.geteuid() != 0:
        return "needs root (it configures interfaces, iptables, mounts and cgroups)"
    for tool in ("containerd", "runc", "iptables", "ip", "ctr", "mount"):
        if shutil.which(tool) is None:
            return f"{tool} not found (tools/setup.sh installs Debian's containerd, runc, iptables)"
    if not pathlib.Path("/usr/lib/cni/bridge").exists():
        return "/usr/lib/cni/bridge not found (Debian's containernetworking-plugins)"
    return ""


# -- teardown: works from the state folder alone, so a crashed run can be cleaned up ----------


@contextlib.contextmanager
def _uninterruptible() -> Iterator[None]:
    """SIGINT and SIGTERM held off while a cluster is removed: a second Ctrl-C during the
    teardown would otherwise stop it halfway and leave processes, rules and mounts behind.
    (Signals can only be set from the main thread; elsewhere this does nothing.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in held.items():
            signal.signal(sig, handler)


def _kill_pidfiles(state: pathlib.Path) -> None:
    pids: list[int] = []
    for pidfile in state.glob("*/*.pid"):
        with contextlib.suppress(ValueError, OSError):
            pids.append(int(pidfile.read_text().strip()))
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + (10 if sig == signal.SIGTERM else 5)
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is dead for our purposes; reap it if it is our child.
    with contextlib.suppress(ChildProcessError):
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    stat = pathlib.Path(f"/proc/{pid}/stat")
    with contextlib.suppress(OSError):
        return stat.read_text().split(")")[-1].split()[0] != "Z"
    return False


def _kill_shims(state: pathlib.Path) -> None:
    """Kill every containerd shim and container process started under this state folder."""
    root = str(state)
    for proc in pathlib.Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if "containerd-shim" in cmd and root in cmd:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(int(proc.name), signal.SIGKILL)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(proc.name), signal.SIGKILL)
    # Container processes are in the pod cgroups kubelet made; kill what is left there.
    for tasks in pathlib.Path("/sys/fs/cgroup/pids/kubepods").rglob("cgroup.procs"):
        with contextlib.suppress(OSError):
            for pid in tasks.read_text().split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)


def _unmount_under(root: pathlib.Path) -> None:
    prefix = str(root)
    for _ in range(5):
        mounts = []
        for line in pathlib.Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4].replace("\\040", " ")
            if point == prefix or point.startswith(prefix + "/"):
                mounts.append(point)
        if not mounts:
            return
        for point in sorted(mounts, key=len, reverse=True):
            _run(["umount", "-l", point], check=False)


def _netns_cleanup() -> None:
    netns = pathlib.Path("/var/run/netns")
    if not netns.is_dir():
        return
    for ns in netns.glob("cni-*"):
        _run(["umount", "-l", str(ns)], check=False)
        with contextlib.suppress(OSError):
            ns.unlink()


def _iptables_cleanup() -> None:
    """Remove our chain and every chain kube-proxy and CNI made, in every table, IPv4 and IPv6.

    Rules are split as a shell would (kube-proxy's carry quoted comments), so `-D` names the
    very rule `iptables-save` printed; a chain still jumped to could not be deleted.
    """
    for tool in ("iptables", "ip6tables"):
        for table in ("filter", "nat", "mangle"):
            _iptables_table_cleanup(tool, table)


_OUR_CHAINS = ("KUBE-", "CNI-", "FINOPS-")


def _iptables_table_cleanup(tool: str, table: str) -> None:
    listing = _run([f"{tool}-save", "-t", table], check=False).stdout
    for line in listing.splitlines():
        if not line.startswith("-A ") or not any(f"-j {p}" in line for p in _OUR_CHAINS):
            continue
        parts = shlex.split(line)
        if not parts[1].startswith(_OUR_CHAINS):  # rules inside our chains go with them
            _run([tool, "-t", table, "-D", *parts[1:]], check=False)
    chains = [
        line[1:].split()[0]
        for line in listing.splitlines()
        if line.startswith(":") and line[1:].startswith(_OUR_CHAINS)
    ]
    for action in ("-F", "-X"):
        for chain in chains:
            _run([tool, "-t", table, action, chain], check=False)


def teardown(state_root: pathlib.Path = STATE_ROOT) -> None:
    """Remove every trace of a cluster under `state_root`, running or crashed; idempotent."""
    if state_root.exists():
        for state in [state_root, *[p for p in state_root.iterdir() if p.is_dir()]]:
            _kill_pidfiles(state)
        _kill_shims(state_root)
    _netns_cleanup()
    for link in (BRIDGE, DUMMY):
        _run(["ip", "link", "delete", link], check=False)
    _iptables_cleanup()
    if state_root.exists():
        _unmount_under(state_root)
        shutil.rmtree(state_root, ignore_errors=True)


def leftovers(state_root: pathlib.Path = STATE_ROOT) -> list[str]:
    """What a cluster left on this host: processes, interfaces, chains, mounts, namespaces.

    Empty after a complete teardown; the cluster tier asserts that when it ends.
    """
    found: list[str] = []
    root = str(state_root)
    for proc in pathlib.Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            with contextlib.suppress(OSError):
                cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                if root in cmd:
                    found.append(f"process {proc.name}: {cmd.strip()[:120]}")
    for link in (BRIDGE, DUMMY):
        if pathlib.Path("/sys/class/net", link).exists():
            found.append(f"interface {link}")
    for tool in ("iptables", "ip6tables"):
        for table in ("filter", "nat", "mangle"):
            listing = _run([f"{tool}-save", "-t", table], check=False).stdout
            found += [
                f"{tool} {table} {line.split()[0]}"
                for line in listing.splitlines()
                if line.startswith(tuple(f":{p}" for p in _OUR_CHAINS))
            ]
    for line in pathlib.Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4]
        if point == root or point.startswith(root + "/"):
            found.append(f"mount {point}")
    netns = pathlib.Path("/var/run/netns")
    if netns.is_dir():
        found += [f"network namespace {ns.name}" for ns in netns.glob("cni-*")]
    if state_root.exists():
        found.append(f"folder {state_root}")
    return found


# -- the running cluster ------------------------------------------------------------------------


class RealNode:
    """One control plane and one node, started with `start()` and removed with `stop()`."""

    def __init__(
        self,
        state_root: pathlib.Path = STATE_ROOT,
        control_bin: pathlib.Path | None = None,
        node_bin: pathlib.Path | None = None,
        start_timeout: float = 120.0,
    ) -> None:
        self.state_root = state_root
        self.dir = state_root / "run"
        self.control_bin = control_bin
        self.node_bin = node_bin
        self.start_timeout = start_timeout
        self.server = f"https://{NODE_IP}:{APISERVER_PORT}"
        self.kubeconfig = self.dir / "pki" / "admin.kubeconfig"
        self.ca_file = self.dir / "pki" / "ca.crt"
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._ca = tls.TinyCA("finops-node-ca")

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self, images: Sequence[Image] = ()) -> RealNode:
        """Bring the cluster up with `images` imported; return once the node is Ready.

        An image named `pause` becomes the pod sandbox image.
        """
        reason = host_ready()
        if reason:
            raise RealNodeError(f"cannot run a real node here: {reason}")
        self.control_bin = self.control_bin or controlplane.ensure_binaries()
        self.node_bin = self.node_bin or node_binaries()
        teardown(self.state_root)
        try:
            self.dir.mkdir(parents=True)
            self._host_network()
            self._pki()
            self._start_etcd()
            self._start_apiserver()
            pause = [i.ref for i in images if i.name == "pause"]
            self._start_containerd(pause[0] if pause else "localhost/pause:latest")
            self.import_images(images)
            self._start_kubelet()
            self._start_controllers()
            self._start_proxy_and_dns()
            self._wait_node_ready()
            self._storage()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every process (node first) and remove interfaces, rules, mounts and files."""
        order = [
            "kube-proxy",
            "coredns",
            "kubelet",
            "kube-scheduler",
            "kube-controller-manager",
            "containerd",
            "kube-apiserver",
            "etcd",
        ]
        with _uninterruptible():
            for name in order:
                proc = self._procs.pop(name, None)
                if proc is not None:
                    controlplane.stop_process(proc, timeout=10)
            teardown(self.state_root)

    def __enter__(self) -> RealNode:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log_tail(self, name: str, lines: int = 40) -> str:
        """The end of a component's log, for error messages."""
        path = self.dir / "logs" / f"{name}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def _spawn(self, name: str, args: Sequence[str]) -> subprocess.Popen[bytes]:
        logs = self.dir / "logs"
        logs.mkdir(exist_ok=True)
        out = (logs / f"{name}.log").open("ab")
        proc = subprocess.Popen(
            list(args), stdout=out, stderr=subprocess.STDOUT, cwd=self.dir, start_new_session=True
        )
        out.close()
        (logs / f"{name}.pid").write_text(str(proc.pid))
        self._procs[name] = proc
        return proc

    def _poll(self, name: str, check: Callable[[], bool], timeout: float | None = None) -> None:
        deadline = time.monotonic() + (timeout or self.start_timeout)
        while time.monotonic() < deadline:
            proc = self._procs.get(name)
            if proc is not None and proc.poll() is not None:
                raise RealNodeError(
                    f"{name} exited with status {proc.returncode}:\n{self.log_tail(name)}"
                )
            with contextlib.suppress(httpx.HTTPError, OSError, RealNodeError):
                if check():
                    return
            time.sleep(0.2)
        raise RealNodeError(
            f"{name} not ready after {timeout or self.start_timeout}s:\n{self.log_tail(name)}"
        )

    # -- host network -------------------------------------------------------------------------

    def _host_network(self) -> None:
        for key, value in (
            ("net/ipv4/ip_forward", "1"),
            ("net/bridge/bridge-nf-call-iptables", "1"),
        ):
            path = pathlib.Path("/proc/sys") / key
            if not path.exists() and key.startswith("net/bridge"):
                _run(["modprobe", "br_netfilter"], check=False)
            path.write_text(value)
        _run(["ip", "link", "add", DUMMY, "type", "bridge"])
        _run(["ip", "addr", "add", f"{NODE_IP}/32", "dev", DUMMY])
        _run(["ip", "link", "set", DUMMY, "up"])
        # Service addresses that no rule translates end on the dummy interface, never on a
        # real one.
        _run(["ip", "route", "add", SERVICE_CIDR, "dev", DUMMY])
        # The pod bridge exists before the first pod so the egress rule can name it.
        _run(["ip", "link", "add", BRIDGE, "type", "bridge"])
        _run(["ip", "addr", "add", f"{POD_GATEWAY}/24", "dev", BRIDGE])
        _run(["ip", "link", "set", BRIDGE, "up"])
        # Pods may talk to each other (through the bridge) and to this host; nothing they
        # send is forwarded anywhere else.
        _run(["iptables", "-N", EGRESS_CHAIN])
        _run(["iptables", "-A", EGRESS_CHAIN, "-o", BRIDGE, "-j", "RETURN"])
        _run(["iptables", "-A", EGRESS_CHAIN, "-s", POD_CIDR, "-j", "DROP"])
        _run(["iptables", "-A", EGRESS_CHAIN, "-i", BRIDGE, "-j", "DROP"])
        _run(["iptables", "-I", "FORWARD", "1", "-j", EGRESS_CHAIN])

    # -- certificates and kubeconfigs ---------------------------------------------------------

    def _pki(self) -> None:
        pki = self.dir / "pki"
        pki.mkdir(mode=0o700)
        self.ca_file.write_bytes(self._ca.cert_pem)
        (pki / "ca.key").write_bytes(self._ca.key_pem)
        (pki / "ca.key").chmod(0o600)
        sans = [
            NODE_IP,
            KUBERNETES_SERVICE_IP,
            "127.0.0.1",
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            f"kubernetes.default.svc.{CLUSTER_DOMAIN}",
        ]
        self._ca.serving(sans).write(pki, "apiserver")
        self._ca.serving([NODE_IP, NODE_NAME, "127.0.0.1"]).write(pki, "kubelet-serving")
        self._ca.client("kube-apiserver-kubelet-client", ["system:masters"]).write(
            pki, "apiserver-kubelet-client"
        )
        tls.rsa_key_pair().write(pki, "sa")
        users = {
            "admin": ("admin", ["system:masters"]),
            "controller-manager": ("system:kube-controller-manager", []),
            "scheduler": ("system:kube-scheduler", []),
            "kubelet": (f"system:node:{NODE_NAME}", ["system:nodes"]),
            "kube-proxy": ("system:kube-proxy", []),
            "coredns": ("finops:coredns", ["system:masters"]),
        }
        for stem, (user, groups) in users.items():
            crt, key = self._ca.client(user, groups).write(pki, stem)
            self._kubeconfig(pki / f"{stem}.kubeconfig", crt, key)

    def _kubeconfig(self, path: pathlib.Path, crt: pathlib.Path, key: pathlib.Path) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "finops-node",
                    "cluster": {"server": self.server, "certificate-authority": str(self.ca_file)},
                }
            ],
            "users": [
                {"name": "u", "user": {"client-certificate": str(crt), "client-key": str(key)}}
            ],
            "contexts": [
                {"name": "finops-node", "context": {"cluster": "finops-node", "user": "u"}}
            ],
            "current-context": "finops-node",
        }
        path.write_text(yaml.safe_dump(config))

    # -- control plane ------------------------------------------------------------------------

    def _start_etcd(self) -> None:
        assert self.control_bin is not None
        client, peer = ports.free_port(), ports.free_port()
        self._etcd_url = f"http://127.0.0.1:{client}"
        peer_url = f"http://127.0.0.1:{peer}"
        self._spawn(
            "etcd",
            [
                str(self.control_bin / "etcd"),
                "--name=finops-node",
                f"--data-dir={self.dir / 'etcd'}",
                f"--listen-client-urls={self._etcd_url}",
                f"--advertise-client-urls={self._etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=finops-node={peer_url}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )
        self._poll("etcd", lambda: httpx.get(f"{self._etcd_url}/health", timeout=2).is_success)

    def _start_apiserver(self) -> None:
        assert self.control_bin is not None
        pki = self.dir / "pki"
        self._spawn(
            "kube-apiserver",
            [
                str(self.control_bin / "kube-apiserver"),
                "--allow-privileged=true",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",
                f"--bind-address={NODE_IP}",
                f"--advertise-address={NODE_IP}",
                f"--secure-port={APISERVER_PORT}",
                f"--cert-dir={pki}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={self.ca_file}",
                f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
                f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
                f"--kubelet-certificate-authority={self.ca_file}",
                "--kubelet-preferred-address-types=InternalIP",
                f"--etcd-servers={self._etcd_url}",
                f"--service-account-issuer=https://kubernetes.default.svc.{CLUSTER_DOMAIN}",
                f"--service-account-key-file={pki / 'sa.crt'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--service-node-port-range=30000-32767",
                "--profiling=false",
            ],
        )
        self._poll("kube-apiserver", self._apiserver_ready)

    def _apiserver_ready(self) -> bool:
        with self.http(timeout=5) as client:
            return (
                client.get("/readyz").status_code == 200
                and client.get("/api/v1/namespaces/default").status_code == 200
            )

    def _start_controllers(self) -> None:
        assert self.node_bin is not None
        pki = self.dir / "pki"
        self._spawn(
            "kube-controller-manager",
            [
                str(self.node_bin / "kube-controller-manager"),
                f"--kubeconfig={pki / 'controller-manager.kubeconfig'}",
                f"--authentication-kubeconfig={pki / 'controller-manager.kubeconfig'}",
                f"--authorization-kubeconfig={pki / 'controller-manager.kubeconfig'}",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={self.ca_file}",
                f"--cluster-signing-cert-file={self.ca_file}",
                f"--cluster-signing-key-file={pki / 'ca.key'}",
                "--use-service-account-credentials=true",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={ports.free_port()}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--controllers=*",
                "--concurrent-cron-job-syncs=5",
                "--profiling=false",
            ],
        )
        self._spawn(
            "kube-scheduler",
            [
                str(self.node_bin / "kube-scheduler"),
                f"--kubeconfig={pki / 'scheduler.kubeconfig'}",
                f"--authentication-kubeconfig={pki / 'scheduler.kubeconfig'}",
                f"--authorization-kubeconfig={pki / 'scheduler.kubeconfig'}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={ports.free_port()}",
                "--profiling=false",
            ],
        )

    # -- node ---------------------------------------------------------------------------------

    @property
    def containerd_socket(self) -> pathlib.Path:
        return self.dir / "containerd" / "containerd.sock"

    def _start_containerd(self, pause_image: str) -> None:
        base = self.dir / "containerd"
        cni = self.dir / "cni"
        (cni / "net.d").mkdir(parents=True)
        base.mkdir()
        conflist = {
            "cniVersion": "0.4.0",
            "name": "finops-pods",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": BRIDGE,
                    "isGateway": True,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": POD_CIDR, "gateway": POD_GATEWAY}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": str(cni / "ipam"),
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }
        (cni / "net.d" / "10-finops.conflist").write_text(json.dumps(conflist, indent=2))
        self.pause_image = pause_image
        config = f"""version = 2
root = "{base / "root"}"
state = "{base / "state"}"
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.grpc.v1.cri.btrfs"]
[grpc]
  address = "{self.containerd_socket}"
[ttrpc]
  address = "{base / "containerd.sock.ttrpc"}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{self.pause_image}"
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{cni / "net.d"}"
"""
        (base / "config.toml").write_text(config)
        self._spawn("containerd", ["containerd", "--config", str(base / "config.toml")])
        self._poll("containerd", lambda: self._ctr("version").returncode == 0, timeout=30)

    def _ctr(self, *args: str) -> subprocess.CompletedProcess[str]:
        return _run(
            ["ctr", "--address", str(self.containerd_socket), "-n", "k8s.io", *args], check=False
        )

    def import_images(self, images: Sequence[Image]) -> None:
        """Import OCI archives into the node's containerd (pods use them without a pull)."""
        for image in images:
            done = self._ctr(
                "images", "import", "--base-name", image.repository, "--digests", str(image.archive)
            )
            if done.returncode != 0:
                raise RealNodeError(f"importing {image.ref} from {image.archive}: {done.stderr}")
            self._ctr("images", "tag", "--force", *self._imported_name(image), image.ref)

    def _imported_name(self, image: Image) -> list[str]:
        listing = self._ctr("images", "list", "-q").stdout.split()
        found = [n for n in listing if n.startswith(image.repository + "@")]
        return found[-1:] if found and image.ref not in listing else []

    def kill_container(self, container_id: str) -> None:
        """SIGKILL a container's process, as the kernel's OOM killer or a crash would."""
        cid = container_id.removeprefix("containerd://")
        done = self._ctr("tasks", "kill", "--signal", "SIGKILL", cid)
        if done.returncode != 0:
            raise RealNodeError(f"killing container {cid}: {done.stderr.strip()}")

    def images(self) -> list[str]:
        """Image references the node holds."""
        return self._ctr("images", "list", "-q").stdout.split()

    def _kubelet_config(self, pki: pathlib.Path, resolv: pathlib.Path) -> dict[str, object]:
        """The KubeletConfiguration for this machine: cgroup v1, cgroupfs, our own DNS."""
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "failSwapOn": False,
            "address": NODE_IP,
            "port": 10250,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": ports.free_port(),
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(self.ca_file)},
            },
            "authorization": {"mode": "Webhook"},
            "tlsCertFile": str(pki / "kubelet-serving.crt"),
            "tlsPrivateKeyFile": str(pki / "kubelet-serving.key"),
            "clusterDNS": [NODE_IP],
            "clusterDomain": CLUSTER_DOMAIN,
            "resolvConf": str(resolv),
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
                "nodefs.inodesFree": "1%",
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False,
            "maxPods": 110,
            "protectKernelDefaults": False,
            "syncFrequency": "10s",
            "fileCheckFrequency": "10s",
            "nodeStatusReportFrequency": "10s",
            "registerNode": True,
        }

    def _start_kubelet(self) -> None:
        assert self.node_bin is not None
        pki = self.dir / "pki"
        kubelet = self.dir / "kubelet"
        kubelet.mkdir()
        resolv = self.dir / "resolv.conf"
        # Pods with dnsPolicy Default get this, not the host's resolvers: no query leaves.
        resolv.write_text(f"nameserver {NODE_IP}\n")
        config = self._kubelet_config(pki, resolv)
        (kubelet / "config.yaml").write_text(yaml.safe_dump(config))
        self._spawn(
            "kubelet",
            [
                str(self.node_bin / "kubelet"),
                f"--config={kubelet / 'config.yaml'}",
                f"--kubeconfig={pki / 'kubelet.kubeconfig'}",
                f"--root-dir={kubelet / 'root'}",
                f"--cert-dir={kubelet / 'pki'}",
                f"--hostname-override={NODE_NAME}",
                f"--node-ip={NODE_IP}",
                "--v=1",
            ],
        )

    def _start_proxy_and_dns(self) -> None:
        assert self.node_bin is not None
        pki = self.dir / "pki"
        proxy = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(pki / "kube-proxy.kubeconfig")},
            "mode": "iptables",
            "clusterCIDR": POD_CIDR,
            "hostnameOverride": NODE_NAME,
            "bindAddress": NODE_IP,
            "conntrack": {"maxPerCore": 0},
            "metricsBindAddress": f"127.0.0.1:{ports.free_port()}",
            "healthzBindAddress": f"127.0.0.1:{ports.free_port()}",
            "nodePortAddresses": [f"{NODE_IP}/32"],
        }
        (self.dir / "kube-proxy.yaml").write_text(yaml.safe_dump(proxy))
        self._spawn(
            "kube-proxy",
            [str(self.node_bin / "kube-proxy"), f"--config={self.dir / 'kube-proxy.yaml'}"],
        )
        corefile = f"""{CLUSTER_DOMAIN}:53 in-addr.arpa:53 ip6.arpa:53 {{
    bind {NODE_IP}
    errors
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {pki / "coredns.kubeconfig"}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }}
    cache 5
}}
.:53 {{
    bind {NODE_IP}
    template ANY ANY {{
        rcode NXDOMAIN
    }}
}}
"""
        (self.dir / "Corefile").write_text(corefile)
        self._spawn(
            "coredns", [str(self.node_bin / "coredns"), "-conf", str(self.dir / "Corefile")]
        )

    def _wait_node_ready(self) -> None:
        def ready() -> bool:
            with self.http(timeout=5) as client:
                resp = client.get(f"/api/v1/nodes/{NODE_NAME}")
                if resp.status_code != 200:
                    return False
                conds = resp.json().get("status", {}).get("conditions") or []
                return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)

        self._poll("kubelet", ready)

    def _storage(self) -> None:
        """A default StorageClass with host-path volumes made ready for claims to bind."""
        sc = {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {
                "name": STORAGE_CLASS,
                "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
            },
            "provisioner": "kubernetes.io/no-provisioner",
            "volumeBindingMode": "Immediate",
            "reclaimPolicy": "Retain",
        }
        self.apply([sc])
        volumes = self.dir / "volumes"
        pvs = []
        for i in range(4):
            path = volumes / f"pv{i}"
            path.mkdir(parents=True)
            path.chmod(0o777)
            pvs.append(
                {
                    "apiVersion": "v1",
                    "kind": "PersistentVolume",
                    "metadata": {"name": f"finops-local-{i}"},
                    "spec": {
                        "capacity": {"storage": "20Gi"},
                        "accessModes": ["ReadWriteOnce"],
                        "persistentVolumeReclaimPolicy": "Retain",
                        "storageClassName": STORAGE_CLASS,
                        "hostPath": {"path": str(path), "type": "Directory"},
                    },
                }
            )
        self.apply(pvs)

    # -- clients ------------------------------------------------------------------------------

    def ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        pki = self.dir / "pki"
        ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        return ctx

    def http(self, timeout: float = 30.0) -> httpx.Client:
        """An HTTP client talking to the API server as `admin` (system:masters)."""
        return httpx.Client(base_url=self.server, verify=self.ssl_context(), timeout=timeout)

    def kubectl(
        self, *args: str, check: bool = True, input: str | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl as `admin` against this cluster."""
        assert self.node_bin is not None
        return _run(
            [str(self.node_bin / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args],
            check=check,
            input=input,
            timeout=timeout,
        )

    def apply(self, docs: Sequence[dict[str, Any]]) -> None:
        """Server-side apply of the given objects as `admin`."""
        self.kubectl(
            "apply", "--server-side", "--force-conflicts", "-f", "-", input=yaml.safe_dump_all(docs)
        )


@contextlib.contextmanager
def running(images: Sequence[Image] = (), **kw: Any) -> Iterator[RealNode]:
    """A started cluster with `images` imported, removed on exit."""
    node = RealNode(**kw)
    node.start(images)
    try:
        yield node
    finally:
        node.stop()
