"""The built wheel works on its own: installed into a fresh virtualenv, away from the source.

Images cannot be built here, so this checks the path the Dockerfile takes (wheel, then a
virtualenv with its dependencies from PyPI): both console scripts start, the offline
validator carries its rule table, the SQL migrations ship inside the wheel, and the
allocation job mode runs against the test API server, PostgreSQL and OpenCost replay.
One wheel and one virtualenv serve the whole module.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import uuid
import venv
import zipfile
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from finops_devenv import controlplane
from finops_devenv import opencost_replay as replay

REPO = pathlib.Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "contract_corpus"
GROUP = "/apis/finops.stakater.com/v1alpha1"
MIGRATION = re.compile(r"^finops/store/migrations/(\d{4})_[^/]+\.sql$")


class Installed:
    """A virtualenv holding only the wheel and its dependencies."""

    def __init__(self, root: pathlib.Path, wheel: pathlib.Path, workdir: pathlib.Path) -> None:
        self.root, self.wheel, self.workdir = root, wheel, workdir

    def run(
        self, *args: str, env: dict[str, str] | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run a program of the venv from a folder outside the checkout."""
        program = str(self.root / "bin" / args[0])
        clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        clean.update(env or {})
        return subprocess.run(
            [program, *args[1:]],
            cwd=self.workdir,
            env=clean,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def _build_wheel(out: pathlib.Path) -> pathlib.Path:
    """`pip wheel` from a copy of what the Dockerfile copies, so the checkout stays clean."""
    src = out / "src-copy"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    shutil.copytree(
        REPO / "src",
        src / "src",
        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc"),
    )
    dist = out / "dist"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(src)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    [wheel] = dist.glob("finops_operator-*.whl")
    return wheel


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    base = tmp_path_factory.mktemp("wheel")
    wheel = _build_wheel(base)
    root = base / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(root)
    done = subprocess.run(
        [str(root / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    workdir = base / "work"
    workdir.mkdir()
    yield Installed(root, wheel, workdir)


def _shipped_migrations(wheel: pathlib.Path) -> list[int]:
    with zipfile.ZipFile(wheel) as archive:
        return sorted(int(m.group(1)) for n in archive.namelist() if (m := MIGRATION.match(n)))


class TestInstalledWheel:
    def test_the_package_is_imported_from_the_virtualenv_not_the_checkout(
        self, installed: Installed
    ) -> None:
        done = installed.run("python", "-c", "import finops; print(finops.__file__)")
        assert done.returncode == 0, done.stderr
        path = pathlib.Path(done.stdout.strip())
        assert path.is_relative_to(installed.root), path
        assert not path.is_relative_to(REPO)

    def test_both_console_scripts_answer_help(self, installed: Installed) -> None:
        operator = installed.run("finops-operator", "--help")
        cli = installed.run("finops", "--help")
        assert operator.returncode == 0, operator.stderr
        assert cli.returncode == 0, cli.stderr
        assert "--mode" in operator.stdout and "collectionjob" in operator.stdout
        assert "validate" in cli.stdout and "simulate" in cli.stdout

    def test_the_gateway_script_the_chart_runs_is_installed(self, installed: Installed) -> None:
        """The chart's gateway container runs `finops-gateway` from the image's virtualenv."""
        done = installed.run("finops-gateway", env={"PG_CONNECTION_STRING": ""})
        assert done.returncode == 1
        assert "PG_CONNECTION_STRING is not set" in done.stderr

    def test_validate_accepts_a_valid_manifest_and_refuses_an_invalid_one(
        self, installed: Installed
    ) -> None:
        valid = CORPUS / "valid" / "costjob-interval-30m.yaml"
        invalid = CORPUS / "invalid" / "costjob-interval-45s.yaml"
        ok = installed.run("finops", "validate", str(valid))
        bad = installed.run("finops", "validate", str(invalid))
        assert ok.returncode == 0, ok.stdout + ok.stderr
        assert bad.returncode == 1, bad.stdout + bad.stderr
        assert invalid.name in bad.stdout

    def test_the_wheel_ships_every_migration_of_the_source_tree(self, installed: Installed) -> None:
        in_source = sorted(
            int(p.name[:4]) for p in (REPO / "src/finops/store/migrations").glob("[0-9]*.sql")
        )
        assert in_source, "no migrations in the source tree"
        assert _shipped_migrations(installed.wheel) == in_source

    def test_the_wheel_ships_the_dashboard_page_and_its_vendored_chart_library(
        self, installed: Installed
    ) -> None:
        static = REPO / "src/finops/gateway/static"
        in_source = {
            f"finops/gateway/static/{p.relative_to(static).as_posix()}"
            for p in static.rglob("*")
            if p.is_file()
        }
        assert "finops/gateway/static/vendor/chart.umd.js" in in_source
        with zipfile.ZipFile(installed.wheel) as archive:
            shipped = {n for n in archive.namelist() if n.startswith("finops/gateway/static/")}
        assert shipped == in_source

    def test_the_wheel_holds_the_product_alone_not_its_development_tools(
        self, installed: Installed
    ) -> None:
        with zipfile.ZipFile(installed.wheel) as archive:
            packages = {n.split("/")[0] for n in archive.namelist() if n.endswith(".py")}
            modules = [n for n in archive.namelist() if n.endswith(".py")]
        assert packages == {"finops"}
        assert "finops/cli/validate.py" in modules
        assert not [n for n in modules if "devenv" in n or "sandbox" in n]
        cli = installed.run("finops", "--help")
        assert cli.returncode == 0, cli.stderr
        assert "validate" in cli.stdout and "sandbox" not in cli.stdout

    def test_the_installed_migrate_module_applies_the_shipped_migrations(
        self, installed: Installed, pg_dsn: str
    ) -> None:
        done = installed.run(
            "python", "-m", "finops.store.migrate", env={"POSTGRES_CONNECTION_STRING": pg_dsn}
        )
        assert done.returncode == 0, done.stderr
        shipped = _shipped_migrations(installed.wheel)
        assert json.loads(done.stdout.strip().splitlines()[-1]) == {"applied": shipped}
        with psycopg.connect(pg_dsn) as conn:
            versions = [
                r[0] for r in conn.execute("SELECT version FROM schema_migrations ORDER BY 1")
            ]
        assert versions == shipped
        again = installed.run(
            "python", "-m", "finops.store.migrate", env={"POSTGRES_CONNECTION_STRING": pg_dsn}
        )
        assert json.loads(again.stdout.strip().splitlines()[-1]) == {"applied": []}


class TestDockerfile:
    """Images are not built here; these keep the Dockerfile in step with the wheel build."""

    def _stages(self) -> list[list[str]]:
        stages: list[list[str]] = []
        text = (REPO / "Dockerfile").read_text().replace("\\\n", " ")
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if line.upper().startswith("FROM "):
                stages.append([])
            if stages:
                stages[-1].append(line)
        return stages

    def test_every_file_the_build_copies_exists_and_is_in_the_build_context(self) -> None:
        ignore = (REPO / ".dockerignore").read_text().splitlines()
        build = self._stages()[0]
        copied = [
            name
            for line in build
            if line.startswith("COPY ") and "--from" not in line
            for name in line.split()[1:-1]
        ]
        assert copied, "the build stage copies nothing"
        for name in copied:
            assert (REPO / name).exists(), name
            assert f"!{name.rstrip('/')}/" in ignore or f"!{name}" in ignore, name

    def test_the_final_stage_runs_the_operator_as_a_numeric_non_root_user(self) -> None:
        final = self._stages()[-1]
        assert final[0].startswith("FROM ${PYTHON_IMAGE}")
        assert "ARG PYTHON_IMAGE=python:3.11-slim" in (REPO / "Dockerfile").read_text()
        users = [line.split()[1] for line in final if line.startswith("USER ")]
        assert users == ["65532:65532"]
        assert final[-1] == 'ENTRYPOINT ["finops-operator"]'
        assert not [line for line in final if line.startswith("RUN ")], "no build steps"


def _create(kube: controlplane.ControlPlane, path: str, body: dict[str, Any]) -> dict[str, Any]:
    with kube.http() as client:
        resp = client.post(path, json=body)
    assert resp.status_code == 201, resp.text
    created: dict[str, Any] = resp.json()
    return created


@pytest.fixture
def active_book(kube: controlplane.ControlPlane) -> Iterator[None]:
    """One active, ready currency PriceBook, as the controller would leave it; removed after."""
    ns = f"books-{uuid.uuid4().hex[:8]}"
    kube.create_namespace(ns)
    body = {
        "apiVersion": "finops.stakater.com/v1alpha1",
        "kind": "PriceBook",
        "metadata": {
            "name": "wheel-book",
            "namespace": ns,
            "annotations": {"finops.stakater.com/active": "true"},
        },
        "spec": {"currency": "USD", "valuationMode": "currency", "rates": {"cpuHour": "0.031"}},
    }
    obj = _create(kube, f"{GROUP}/namespaces/{ns}/pricebooks", body)
    obj["status"] = {"active": True, "ready": "True"}
    url = f"{GROUP}/namespaces/{ns}/pricebooks/wheel-book"
    with kube.http() as client:
        put = client.put(f"{url}/status", json=obj)
        assert put.status_code == 200, put.text
    yield
    # Other tests elect among every book of the cluster: leave none behind.
    with kube.http() as client:
        client.delete(url)


def test_the_allocation_job_mode_runs_from_the_wheel_against_the_test_services(
    installed: Installed,
    kube: controlplane.ControlPlane,
    kube_namespace: str,
    active_book: None,
    pg_dsn: str,
    opencost_captures: replay.ReplayServer,
    opencost_captures_dir: pathlib.Path,
) -> None:
    costjob = {
        "apiVersion": "finops.stakater.com/v1alpha1",
        "kind": "CostJob",
        "metadata": {"name": "allocations", "namespace": kube_namespace},
        "spec": {"type": "ResourceCostCollection", "interval": "1h"},
    }
    _create(kube, f"{GROUP}/namespaces/{kube_namespace}/costjobs", costjob)
    env = {
        "KUBECONFIG": str(kube.kubeconfig),
        "COSTJOB_NAME": "allocations",
        "COSTJOB_NAMESPACE": kube_namespace,
        "POSTGRES_CONNECTION_STRING": pg_dsn,  # an empty database: the job migrates it
        "OPENCOST_CONNECTION_STRING": opencost_captures.url,
        "OPENCOST_AGGREGATE": "namespace,pod",
        "SCHEDULED_TIMESTAMP": "2026-10-03T10:20:00Z",
        "HOURS_LOOKBACK": "0",
        "CLUSTER_ID": "wheel-test",
    }
    done = installed.run("finops-operator", "--mode=cronjob", env=env)
    assert done.returncode == 0, done.stdout + done.stderr

    captured = json.loads((opencost_captures_dir / "allocation-pod-60m.json").read_text())
    expected = set(captured["data"][0])
    with psycopg.connect(pg_dsn) as conn:
        names = {
            r[0]
            for r in conn.execute(
                "SELECT name FROM provider_allocations WHERE cluster = %s",
                ("wheel-test",),
            )
        }
    assert names == expected
    with kube.http() as client:
        status = client.get(f"{GROUP}/namespaces/{kube_namespace}/costjobs/allocations").json()[
            "status"
        ]
    assert status["lastExecutionStatus"] == "Success"
