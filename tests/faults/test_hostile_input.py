"""Hostile input (issue #16, case 6): generated manifests and gateway requests.

Manifests: hypothesis mutates the valid contract corpus (a value replaced by a hostile one,
a key dropped, an unknown key added, a whole subtree swapped) and sends each result to both
`finops validate` (in process, through a manifest file) and the real API server (server-side
dry-run create). Invariant: neither crashes (the validator raises nothing, the server answers
201 or 4xx, never 5xx), and both give the same verdict, accepted or refused.

Gateway: hypothesis builds raw requests (path segments with SQL metacharacters, traversal and
encodings; windows from year 1 to 9999, offsets, garbage; good, foreign, malformed and huge
bearer tokens) and sends the bytes as they are over a socket. Invariant: never a 5xx, and a
200 only ever carries rows of the one namespace the token may read.

Both run a bounded number of examples with a fixed seed (`derandomize=True`).
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.contract_corpus import corpus
from tests.e2e import test_gateway as support
from tests.kube import _contract as api

from finops.cli import validate
from finops_devenv import controlplane, ports

MANIFEST_EXAMPLES = 300
GATEWAY_EXAMPLES = 400
FIGURES: dict[str, int] = {}

# ------------------------------------------------------------------------------ manifests

SEEDS = [c for c in corpus.cases("valid") if not c.is_update]

HOSTILE_STRINGS = [
    "",
    " ",
    "0",
    "-1",
    "1h",
    "0s",
    "-1h",
    "25h",
    "1.5h",
    "1e3",
    "NaN",
    "Infinity",
    "null",
    "true",
    "USD",
    "usd",
    "0.0000001",
    "-0.01",
    "99999999999999999999999999.999999",
    "' OR '1'='1",
    "x'); DROP TABLE provider_allocations; --",
    "../../etc/passwd",
    "${jndi:ldap://x}",
    "\x00",
    "\u202e\u0000\ud7ff",
    "a" * 300,
    "2026-02-30T00:00:00Z",
    "2026-10-03T10:00:00Z",
    "Deactivate",
    "Orphan",
    "namespace",
    "cpuHour",
]
_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.sampled_from([0, 1, -1, 2**31, 2**53 + 1, 10**30]),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.sampled_from(HOSTILE_STRINGS),
    st.text(max_size=40),
)
HOSTILE_VALUES = st.recursive(
    _leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=8,
)

Path = tuple[str | int, ...]


def _paths(value: Any, prefix: Path = ()) -> Iterator[Path]:
    """Every path under `value` (maps and lists), the value itself included."""
    yield prefix
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from _paths(child, (*prefix, i))


def _at(root: Any, path: Path) -> Any:
    for part in path:
        root = root[part]
    return root


@st.composite
def mutated_manifests(draw: st.DrawFn) -> dict[str, Any]:
    """A valid corpus object with one to three hostile edits in its spec."""
    obj = copy.deepcopy(draw(st.sampled_from(SEEDS)).final)
    obj.setdefault("spec", {})
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        paths = list(_paths(obj["spec"], ("spec",)))
        path = draw(st.sampled_from(paths))
        parent = _at(obj, path[:-1])
        edit = draw(st.sampled_from(["replace", "drop", "add"]))
        if edit == "add" and isinstance(_at(obj, path), dict):
            _at(obj, path)[draw(st.text(min_size=1, max_size=12))] = draw(HOSTILE_VALUES)
        elif edit == "drop" and len(path) > 1:
            del parent[path[-1]]
        elif len(path) > 1:
            parent[path[-1]] = draw(HOSTILE_VALUES)
        else:
            obj["spec"] = draw(HOSTILE_VALUES)
    return obj


def _offline(obj: dict[str, Any], folder: pathlib.Path) -> list[str]:
    """`finops validate` on a manifest file (JSON, so the file holds exactly what was sent)."""
    path = folder / "manifest.json"
    path.write_text(json.dumps(obj))
    return validate.check_file(path)


# cel-python raises the recursion limit while hypothesis runs; harmless, and not ours.
@pytest.mark.filterwarnings("ignore:The recursion limit will not be reset")
def test_generated_manifests_get_the_same_verdict_offline_and_from_the_api_server(
    kube: controlplane.ControlPlane, kube_namespace: str, tmp_path: pathlib.Path
) -> None:
    counts = {"examples": 0, "refused": 0, "same_messages": 0}

    @settings(
        derandomize=True,
        max_examples=MANIFEST_EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(mutated_manifests())
    def check(obj: dict[str, Any]) -> None:
        placed = api.placed(obj, kube_namespace)
        offline = _offline(placed, tmp_path)
        with kube.http() as client:
            try:
                resp = api.create(client, placed, dry_run=True)
            finally:
                api.delete_if_cluster_scoped(client, placed)
        assert resp.status_code < 500, f"API server {resp.status_code}: {resp.text}"
        accepted = resp.status_code == 201
        counts["examples"] += 1
        assert accepted == (not offline), (
            f"API server {resp.status_code} {resp.text[:1500]}\noffline: {offline}\n"
            f"object: {json.dumps(placed)[:1500]}"
        )
        if not accepted:
            counts["refused"] += 1
            if resp.status_code == 422:
                prefix = f"{tmp_path / 'manifest.json'}: "
                mine = sorted(line.split(": ", 2)[2] for line in offline if line.startswith(prefix))
                counts["same_messages"] += mine == sorted(api.causes(resp))

    check()
    FIGURES.update({f"manifests_{k}": v for k, v in counts.items()})
    print(f"manifests: {counts}")
    assert counts["examples"] == MANIFEST_EXAMPLES
    assert 0 < counts["refused"] < counts["examples"], "the generator must produce both verdicts"


# -------------------------------------------------------------------------------- gateway

WINDOW = ("2026-04-01T00:00:00Z", "2026-04-02T00:00:00Z")
INSTANTS = [
    *WINDOW,
    "0001-01-01T00:00:00Z",
    "0001-01-01T00:00:00+01:00",
    "0001-01-01T00:30:00+14:00",
    "9999-12-31T23:59:59Z",
    "9999-12-31T23:59:59-23:59",
    "2026-04-01T00:00:00+14:00",
    "2026-04-01",
    "2026-04-01T00:00:00",
    "2026-02-30T00:00:00Z",
    "2026-04-01T24:00:00Z",
    "1e309",
    "NaN",
    "",
    " ",
    "' OR '1'='1",
    "2026-04-01T00:00:00Z'; DROP TABLE charges; --",
    "2026-04-01T00:00:00Z\x00",
    "2026-04-01T00:00:00.999999999999Z",
    "x" * 5000,
]
SEGMENTS = [
    "..",
    ".",
    "%2e%2e",
    "..%2f..",
    "%2F",
    "a%2Fb",
    "%00",
    "%ff%fe",
    "*",
    "%25",
    "'%20OR%20'1'='1",
    "x';DROP%20TABLE%20charges;--",
    "default",
    "kube-system",
    "A" * 300,
    "%E2%80%AE",
    "web",
]
_URL_SAFE = st.text(
    alphabet=st.sampled_from("abcxyz019-._~%'\";:*()!$&+,=@[]|\\^`{}<>"), max_size=30
)


TOKENS = [
    "Bearer {stranger}",
    "bearer   {reader}  ",
    "Basic {reader}",
    "Bearer ",
    "Bearer not-a-token",
    "Bearer ' OR 1=1 --",
    "Bearer " + "A" * 16000,
    "Bearer {reader}x",
    "Bearer {reader}\tX",
    None,
]
# Fixed requests every run makes first (the reader's token, the honest window).
NASTY_PATHS = [
    "{a}/subscriptions/%00/charges",
    "{a}/subscriptions/web%00/charges",
    "{a}%00/focus",
    "{a}%22%0D%0AX-Injected:%201/focus",
    "{a}/subscriptions/%ff%fe/charges",
    "{a}/subscriptions/%E2%80%AE/charges",
    "{a}/subscriptions/" + "w" * 5000 + "/charges",
    "{a}/subscriptions/web';%20DELETE%20FROM%20charges;--/charges",
    "{a}%00/costs",
    "{a}/../{b}/costs",
    "{a}%2F..%2F{b}/costs",
    "{b}/costs",
    "%2A/costs",
]
PARTS = ("namespace", "name", "tail", "format", "scope", "from", "to", "extra", "token")
TAILS = ["costs", "subscriptions/{name}/charges", "focus", "focus?format=json"]


@st.composite
def gateway_requests(draw: st.DrawFn, tenants: dict[str, Any]) -> tuple[str, str | None]:
    """A raw request target and an Authorization header value (None: no header).

    An honest request (the reader asking for its own namespace and window) with zero to
    three of its parts made hostile, so that allowed requests are generated too.
    """
    own, other = tenants["a"], tenants["b"]
    hostile = draw(st.sets(st.sampled_from(PARTS), max_size=3))
    ns, name, tail = own, "web", draw(st.sampled_from(TAILS))
    start, end, extra = WINDOW[0], WINDOW[1], list[tuple[str, str]]()
    token: str | None = f"Bearer {tenants['reader']}"
    if "namespace" in hostile:
        ns = draw(st.one_of(st.sampled_from([other, *SEGMENTS]), _URL_SAFE.filter(bool)))
        if draw(st.booleans()):
            ns = f"{own}/../{ns}" if draw(st.booleans()) else f"{ns}/../{other}"
    if "name" in hostile:
        name = draw(st.one_of(st.sampled_from(SEGMENTS), _URL_SAFE.filter(bool)))
    if "tail" in hostile:
        tail = draw(st.sampled_from(["costs/../costs", "costs/", "subscriptions//charges", ""]))
    if "format" in hostile:
        extra.append(("format", draw(st.sampled_from(["json", "csv", "xml", "", "JSON"]))))
    if "from" in hostile:
        start = draw(st.one_of(st.sampled_from(INSTANTS), st.text(max_size=20)))
    if "to" in hostile:
        end = draw(st.one_of(st.sampled_from(INSTANTS), st.text(max_size=20)))
    if "extra" in hostile:
        keys = st.sampled_from(["from", "to", "limit", "namespace", "from[]"])
        values = st.one_of(st.sampled_from(INSTANTS + SEGMENTS), st.text(max_size=20))
        extra = draw(st.lists(st.tuples(keys, values), min_size=1, max_size=3))
    if "token" in hostile:
        choice = draw(st.sampled_from(TOKENS))
        token = None if choice is None else choice.format(**tenants)
    query = urllib.parse.urlencode(
        [("from", start), ("to", end), *extra], quote_via=urllib.parse.quote
    )
    path = f"/api/v1/namespaces/{ns}/{tail.format(name=name)}"
    if "scope" in hostile:  # every namespace at once: the reader may not
        path = draw(st.sampled_from(["/api/v1/focus", "/api/v1/focus?format=json"]))
    return f"{path}{'&' if '?' in path else '?'}{query}", token


def assert_rows_of(target: str, body: bytes, ns: str, uids: set[str]) -> None:
    """A 200 carries only rows of namespace `ns` (Subscription uids `uids`), whatever its shape."""
    if b"/focus" in target.encode() and not body.startswith(b"["):
        lines = body.decode().splitlines()  # FOCUS CSV: a header, then one row a line
        assert all(ns in line for line in lines[1:]), target
        return
    doc = json.loads(body)
    if isinstance(doc, list):  # FOCUS JSON
        assert {row["SubAccountId"] for row in doc} <= {ns}, target
        assert {row["ResourceId"] for row in doc} <= uids, target
        return
    assert doc["namespace"] == ns, target
    found = {item["subscriptionUid"] for item in doc["items"]}
    assert found <= uids, f"{target!r} leaked {found}"


def _dechunk(body: bytes) -> bytes:
    """The payload of a `Transfer-Encoding: chunked` body (streamed FOCUS exports)."""
    out = bytearray()
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out += rest[:size]
        body = rest[size + 2 :]
    return bytes(out)


def raw_get(port: int, target: str, authorization: str | None) -> tuple[int, bytes]:
    """Send the request line byte for byte (no client-side normalisation of `..` or `%`)."""
    lines = [f"GET {target} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Connection: close"]
    if authorization is not None:
        lines.append(f"Authorization: {authorization}")
    data = ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", "surrogateescape")
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    response = b"".join(chunks)
    head, _, body = response.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    if b"transfer-encoding: chunked" in head.lower():
        body = _dechunk(body)
    return status, body


@contextlib.contextmanager
def gateway(kube: controlplane.ControlPlane, dsn: str, *, auth: str) -> Iterator[int]:
    """The real `finops-gateway` process on a free port, authentication "on" or "off"."""
    port = ports.free_port()
    env = {k: v for k, v in os.environ.items() if k != "ENABLE_AUTH"}
    env.update(KUBECONFIG=str(kube.kubeconfig), PG_CONNECTION_STRING=dsn, PORT=str(port))
    if auth == "off":
        env["ENABLE_AUTH"] = "false"
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "finops.gateway.app"], env=env, stdout=log, stderr=log
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                assert proc.poll() is None, "gateway exited"
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).is_success:
                        break
                assert time.monotonic() < deadline, "gateway did not become healthy"
                time.sleep(0.2)
            yield port
            assert proc.poll() is None, "the gateway died under hostile requests"
        finally:
            proc.terminate()
            proc.wait(timeout=15)
            log.seek(0)
            print(log.read().decode(errors="replace")[-3000:])


def _tenants(kube: controlplane.ControlPlane, dsn: str) -> dict[str, Any]:
    ns_a, ns_b = f"t-{uuid.uuid4().hex[:10]}", f"t-{uuid.uuid4().hex[:10]}"
    for ns in (ns_a, ns_b):
        kube.create_namespace(ns)
    support._write_ledger(dsn, ns_a, "uid-a")
    support._write_ledger(dsn, ns_b, "uid-b")
    reader = support._token_for(kube, ns_a, "tenant-a")
    stranger = support._token_for(kube, ns_a, "stranger")
    support._grant_subscription_reader(kube, ns_a, ns_a)
    return {"a": ns_a, "b": ns_b, "reader": reader, "stranger": stranger}


def asked_namespace(target: str) -> str | None:
    """The namespace a request names, as the server decodes it (None: cluster-wide)."""
    path = target.split("?", 1)[0]
    prefix = "/api/v1/namespaces/"
    if not path.startswith(prefix):
        return None
    return urllib.parse.unquote(path[len(prefix) :].split("/", 1)[0])


@pytest.mark.parametrize(("auth", "examples"), [("on", GATEWAY_EXAMPLES), ("off", 150)])
def test_hostile_gateway_requests_never_fail_the_server_nor_cross_tenants(
    kube: controlplane.ControlPlane, ledger_dsn: str, auth: str, examples: int
) -> None:
    """With authentication on, a 200 only ever holds the reader's namespace; with it off
    (`ENABLE_AUTH=false`, local use) every namespace is readable, but a 200 still holds only
    the namespace the path names."""
    tenants = _tenants(kube, ledger_dsn)
    uids = {tenants["a"]: {"uid-a"}, tenants["b"]: {"uid-b"}}
    statuses: dict[int, int] = {}
    with gateway(kube, ledger_dsn, auth=auth) as port:
        # The oracle first: the honest request is answered with the tenant's own rows.
        target = f"/api/v1/namespaces/{tenants['a']}/costs?from={WINDOW[0]}&to={WINDOW[1]}"
        reader = f"Bearer {tenants['reader']}"
        status, body = raw_get(port, target, reader)
        assert status == 200 and json.loads(body)["items"], body
        status, body = raw_get(port, target.replace("/costs?", "/focus?format=json&"), reader)
        assert status == 200 and json.loads(body), body

        def verify(target: str, authorization: str | None) -> None:
            status, body = raw_get(port, target, authorization)
            statuses[status] = statuses.get(status, 0) + 1
            assert status < 500, f"{status} for {target!r}: {body[:500]!r}"
            if status != 200:
                return
            if auth == "on":
                assert authorization is not None and tenants["reader"] in authorization
                assert tenants["b"].encode() not in body and b"uid-b" not in body, target
                assert_rows_of(target, body, tenants["a"], uids[tenants["a"]])
            elif (ns := asked_namespace(target)) is not None:
                assert_rows_of(target, body, ns, uids.get(ns, set()))

        window = f"from={WINDOW[0]}&to={WINDOW[1]}"
        for nasty in NASTY_PATHS:
            verify(f"/api/v1/namespaces/{nasty.format(**tenants)}?{window}", reader)

        @settings(
            derandomize=True,
            max_examples=examples,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow],
        )
        @given(gateway_requests(tenants))
        def check(request: tuple[str, str | None]) -> None:
            verify(*request)

        check()
    FIGURES[f"gateway_auth_{auth}_requests"] = sum(statuses.values())
    print(
        f"gateway (auth {auth}): {sum(statuses.values())} requests, "
        f"statuses {dict(sorted(statuses.items()))}"
    )
    assert sum(statuses.values()) == examples + len(NASTY_PATHS)
    assert statuses.get(200, 0) > 0, "the generator must also produce allowed requests"


DASHBOARD_ROUTES = ["/api/v1/namespaces", "/api/v1/cost-series", "/api/v1/cost-breakdown"]


@st.composite
def dashboard_requests(draw: st.DrawFn, tenants: dict[str, Any]) -> tuple[str, str | None]:
    """A dashboard JSON request with hostile parameters, as the reader of tenant A or worse."""
    route = draw(st.sampled_from(DASHBOARD_ROUTES))
    names = st.sampled_from([tenants["a"], tenants["b"], *SEGMENTS])
    values = {
        "from": st.one_of(st.sampled_from(INSTANTS), st.text(max_size=20)),
        "to": st.one_of(st.sampled_from(INSTANTS), st.text(max_size=20)),
        "step": st.sampled_from(["hour", "day", "week", "", "HOUR"]),
        "groupBy": st.sampled_from(["source", "subscription", "namespace", ""]),
        "namespace": st.one_of(names, st.text(max_size=20)),
    }
    keys = draw(st.lists(st.sampled_from(sorted(values)), max_size=6))
    query = urllib.parse.urlencode(
        [(k, draw(values[k])) for k in keys], quote_via=urllib.parse.quote
    )
    choice = draw(st.sampled_from([*TOKENS, "Bearer {reader}", "Bearer {reader}"]))
    token = None if choice is None else choice.format(**tenants)
    return f"{route}?{query}", token


def test_hostile_dashboard_requests_never_fail_the_server_nor_show_another_tenant(
    kube: controlplane.ControlPlane, ledger_dsn: str
) -> None:
    """The dashboard's routes hold the same line as the read API: never a 5xx, and nothing of a
    namespace the caller may not read (tenant B's name and uid never appear in any answer)."""
    tenants = _tenants(kube, ledger_dsn)
    statuses: dict[int, int] = {}
    with gateway(kube, ledger_dsn, auth="on") as port:
        reader = f"Bearer {tenants['reader']}"
        status, body = raw_get(port, "/api/v1/namespaces", reader)
        assert status == 200 and tenants["a"].encode() in body, body  # the oracle: A is listed

        @settings(
            derandomize=True,
            max_examples=150,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow],
        )
        @given(dashboard_requests(tenants))
        def check(request: tuple[str, str | None]) -> None:
            status, body = raw_get(port, *request)
            statuses[status] = statuses.get(status, 0) + 1
            assert status < 500, f"{status} for {request[0]!r}: {body[:500]!r}"
            assert tenants["b"].encode() not in body and b"uid-b" not in body, request[0]

        check()
    FIGURES["dashboard_requests"] = sum(statuses.values())
    counts = dict(sorted(statuses.items()))
    print(f"dashboard: {sum(statuses.values())} requests, statuses {counts}")
    assert statuses.get(200, 0) > 0, "the generator must also produce allowed requests"
