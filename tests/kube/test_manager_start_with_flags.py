"""The real manager process started with every documented flag, against the test API server.

It becomes ready, serves metrics with the certificate under `--metrics-cert-path` (and the
rotated one after a rotation, without a restart), and logs as the `--zap-*` flags say.
"""

from __future__ import annotations

import json
import pathlib
import ssl
import subprocess

import httpx
from tests import manager_flags
from tests.kube.test_controller_support import ControllerProcess, wait_for

from finops_devenv import controlplane, tls


def _issue(directory: pathlib.Path, authority: tls.TinyCA) -> None:
    """Write tls.crt/tls.key as a mounted Secret would (replace, never edit in place)."""
    pair = authority.serving(["127.0.0.1"])
    for name, data in (("tls.crt", pair.cert_pem), ("tls.key", pair.key_pem)):
        tmp = directory / f".{name}.new"
        tmp.write_bytes(data)
        tmp.replace(directory / name)


def _trusting(authority: tls.TinyCA) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.load_verify_locations(cadata=authority.cert_pem.decode())
    return ctx


def _verified_status(url: str, authority: tls.TinyCA) -> int | None:
    """The HTTP status when the endpoint's certificate chains to `authority`, else None."""
    try:
        return httpx.get(url, verify=_trusting(authority), timeout=5).status_code
    except httpx.ConnectError:
        return None


def test_every_documented_flag_is_accepted_and_the_manager_becomes_ready(
    kube: controlplane.ControlPlane, kube_namespace: str, tmp_path: pathlib.Path
) -> None:
    webhook_certs, metrics_certs = tmp_path / "webhook", tmp_path / "metrics"
    webhook_certs.mkdir()
    metrics_certs.mkdir()
    first, second = tls.TinyCA("metrics-ca-1"), tls.TinyCA("metrics-ca-2")
    _issue(webhook_certs, tls.TinyCA("webhook-ca"))
    _issue(metrics_certs, first)
    proc = ControllerProcess(kube, namespace=kube_namespace, env={"ENABLE_WEBHOOKS": "true"})
    proc.args.extend(
        manager_flags.argv(
            metrics_address=f"127.0.0.1:{proc.metrics_port}",
            probe_address=f"127.0.0.1:{proc.probe_port}",
            webhook_certs=str(webhook_certs),
            metrics_certs=str(metrics_certs),
        )
    )
    proc.start()
    try:
        readyz = f"http://127.0.0.1:{proc.probe_port}/readyz"
        wait_for(lambda: httpx.get(readyz, timeout=2).status_code == 200, what="/readyz 200")

        # The metrics endpoint presents the mounted certificate (no token: 401, after TLS).
        url = f"https://127.0.0.1:{proc.metrics_port}/metrics"
        assert _verified_status(url, first) == 401
        assert _verified_status(url, second) is None
        _issue(metrics_certs, second)
        wait_for(lambda: _verified_status(url, second) == 401, what="the rotated certificate")
        assert _verified_status(url, first) is None

        # --zap-log-level=debug and --zap-time-encoding=iso8601, in JSON lines.
        lines = [json.loads(line) for line in proc.logs().splitlines() if line.startswith("{")]
        assert any(line["level"] == "debug" for line in lines)
        assert all(str(line["ts"]).endswith("Z") and len(line["ts"]) == 24 for line in lines)
        assert any(line["msg"] == "metrics certificate reloaded" for line in lines)
    finally:
        code = proc.stop()
        print(proc.logs()[-4000:])
    assert code == 0


def test_a_metrics_certificate_that_cannot_be_loaded_stops_the_start_in_one_clear_line(
    kube: controlplane.ControlPlane, kube_namespace: str, tmp_path: pathlib.Path
) -> None:
    missing = tmp_path / "nothing-here"
    proc = ControllerProcess(kube, namespace=kube_namespace)
    proc.args.extend(["--metrics-secure", f"--metrics-cert-path={missing}"])
    done = subprocess.run(proc.args, env=proc.env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    [line] = [json.loads(x) for x in done.stderr.splitlines() if "cannot serve" in x]
    assert str(missing / "tls.crt") in line["error"] and str(missing / "tls.key") in line["error"]
