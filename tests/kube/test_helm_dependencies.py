"""`mdoDependencies.enabled=true`: PostgreSQL, OpenCost, Prometheus and the dependency Secrets.

The chart is rendered with helm and its objects checked for wiring: every `secretKeyRef` of
every pod resolves to a rendered Secret and key, the DSN names the PostgreSQL Service, the
OpenCost URL names the Deployment the manager restarts. The API server accepts them in a
server-side dry run (tests/kube/test_helm_chart.py, variant "mdo-dependencies"; no kubelet
runs, so no pod starts). Then the database the StatefulSet would create is created on the
harness's PostgreSQL by the chart's own init script, and the real controller process starts
with the environment the rendered Deployment gives it, against the DSN the Secret holds.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import pathlib
import re
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import conninfo, sql
from tests.kube import _helm
from tests.kube import test_controller_support as support

from finops.api import environment
from finops.pricing import opencost_document
from finops.store import migrate
from finops_devenv import controlplane, postgres

NAMESPACE = "finops-operator-system"
# Characters a URI would misread unless the chart escapes them.
AWKWARD_PASSWORD = "p@ss w:rd/%+?#1"


def _values(namespace: str, **postgres_values: str) -> dict[str, Any]:
    return {
        "mdoDependencies": {"enabled": True, "postgres": postgres_values},
        "controllerManager": {"manager": {"env": {"opencostDeploymentNamespace": namespace}}},
    }


def _render(tmp_path: pathlib.Path, **postgres_values: str) -> list[dict[str, Any]]:
    return _helm.template(
        "finops-operator", NAMESPACE, _values(NAMESPACE, **postgres_values), tmp_path
    )


def _pod_specs(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """kind/name -> pod spec of every workload rendered."""
    return {
        f"{o['kind']}/{o['metadata']['name']}": o["spec"]["template"]["spec"]
        for o in objects
        if o["kind"] in ("Deployment", "StatefulSet")
    }


def _env(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


class TestRendering:
    def test_off_by_default_and_on_renders_the_documented_objects(
        self, tmp_path: pathlib.Path
    ) -> None:
        default = _helm.template("finops-operator", NAMESPACE, {}, tmp_path)
        assert not _helm.of_kind(default, "StatefulSet")
        assert not _helm.of_kind(default, "Secret")
        objects = _render(tmp_path)
        names = {(o["kind"], o["metadata"]["name"]) for o in objects}
        assert {
            ("StatefulSet", "finops-operator-postgres"),
            ("Service", "finops-operator-postgres"),
            ("Deployment", "finops-operator-opencost"),
            ("Service", "finops-operator-opencost"),
            ("Deployment", "finops-operator-prometheus"),
            ("Service", "finops-operator-prometheus"),
            ("Secret", "finops-operator-postgres-config"),
            ("Secret", "finops-operator-opencost-config"),
            ("Secret", "finops-operator-prometheus-config"),
            ("Secret", "finops-operator-postgres-credentials"),
        } <= names

    def test_every_secret_key_reference_resolves_to_a_rendered_secret(
        self, tmp_path: pathlib.Path
    ) -> None:
        """A missing Secret or key would leave the pod in CreateContainerConfigError."""
        objects = _render(tmp_path)
        refs = [
            (workload, e["name"], e["valueFrom"]["secretKeyRef"])
            for workload, spec in _pod_specs(objects).items()
            for container in spec["containers"]
            for e in container.get("env", [])
            if "secretKeyRef" in e.get("valueFrom", {})
        ]
        assert {w for w, _, _ in refs} >= {
            "Deployment/finops-operator-controller-manager",
            "StatefulSet/finops-operator-postgres",
        }
        for workload, var, ref in refs:
            data = _helm.secret_data(objects, ref["name"])
            assert data.get(ref["key"]), f"{workload} {var}: {ref} is not in a rendered Secret"
            assert not ref.get("optional")

    def test_the_dsn_uses_the_documented_keys_and_the_postgres_service(
        self, tmp_path: pathlib.Path
    ) -> None:
        objects = _render(
            tmp_path,
            database="ledger",
            username="accountant",
            password=AWKWARD_PASSWORD,
            postgresPassword="root-secret",
        )
        dsn = _helm.secret_data(objects, "finops-operator-postgres-config")[
            environment.Env.POSTGRES_CONNECTION_STRING
        ]
        assert dsn.startswith("postgresql://") and dsn.endswith("?sslmode=disable")
        parts = conninfo.conninfo_to_dict(dsn)
        service = _helm.find(objects, "Service", "finops-operator-postgres")
        assert parts == {
            "user": "accountant",
            "password": AWKWARD_PASSWORD,
            "host": f"finops-operator-postgres.{NAMESPACE}.svc.cluster.local",
            "port": str(service["spec"]["ports"][0]["port"]),
            "dbname": "ledger",
            "sslmode": "disable",
        }
        credentials = _helm.secret_data(objects, "finops-operator-postgres-credentials")
        assert credentials == {
            "POSTGRES_PASSWORD": "root-secret",
            "FINOPS_DB_NAME": "ledger",
            "FINOPS_DB_USER": "accountant",
            "FINOPS_DB_PASSWORD": AWKWARD_PASSWORD,
        }

    def test_postgres_is_a_statefulset_of_the_official_image_with_a_volume_claim(
        self, tmp_path: pathlib.Path
    ) -> None:
        objects = _render(tmp_path)
        sts = _helm.find(objects, "StatefulSet", "finops-operator-postgres")
        service = _helm.find(objects, "Service", "finops-operator-postgres")
        [container] = sts["spec"]["template"]["spec"]["containers"]
        assert container["image"].rsplit(":", 1)[0] == "docker.io/library/postgres"
        [claim] = sts["spec"]["volumeClaimTemplates"]
        assert claim["spec"]["resources"]["requests"]["storage"] == "8Gi"
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert mounts[claim["metadata"]["name"]] == "/var/lib/postgresql/data"
        assert _env(container)["PGDATA"]["value"].startswith("/var/lib/postgresql/data/")
        assert _env(container)["POSTGRES_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
            "name": "finops-operator-postgres-credentials",
            "key": "POSTGRES_PASSWORD",
        }
        assert sts["spec"]["serviceName"] == service["metadata"]["name"]
        pod_labels = sts["spec"]["template"]["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= pod_labels.items()
        init = _helm.find(objects, "ConfigMap", "finops-operator-postgres-init")
        volumes = {v["name"]: v for v in sts["spec"]["template"]["spec"]["volumes"]}
        assert volumes["init"]["configMap"]["name"] == init["metadata"]["name"]
        assert mounts["init"] == "/docker-entrypoint-initdb.d"
        credentials = _helm.find(objects, "Secret", "finops-operator-postgres-credentials")
        assert credentials["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}

    def test_postgres_settings_become_server_options_in_name_order(
        self, tmp_path: pathlib.Path
    ) -> None:
        def container(settings: dict[str, Any] | None) -> dict[str, Any]:
            values = _values(NAMESPACE)
            if settings is not None:
                values["mdoDependencies"]["postgres"]["settings"] = settings
            objects = _helm.template("finops-operator", NAMESPACE, values, tmp_path)
            sts = _helm.find(objects, "StatefulSet", "finops-operator-postgres")
            [found] = sts["spec"]["template"]["spec"]["containers"]
            return dict(found)

        assert "args" not in container(None), "the image's defaults unless settings are given"
        given = {
            "shared_buffers": "1GB",
            "max_connections": 300,
            "auto_explain.log_min_duration": "1s",
        }
        assert container(given)["args"] == [
            "-c", "auto_explain.log_min_duration=1s",
            "-c", "max_connections=300",
            "-c", "shared_buffers=1GB",
        ]  # fmt: skip
        with pytest.raises(_helm.RenderError, match='"shared buffers" is not a PostgreSQL setting'):
            container({"shared buffers": "1GB"})

    def test_opencost_is_the_deployment_the_manager_restarts_and_reads_prometheus(
        self, tmp_path: pathlib.Path
    ) -> None:
        objects = _render(tmp_path)
        manager = _env(
            _pod_specs(objects)["Deployment/finops-operator-controller-manager"]["containers"][0]
        )
        name = manager[environment.Env.OPENCOST_DEPLOYMENT_NAME]["value"]
        opencost = _helm.find(objects, "Deployment", name)
        assert (
            opencost["metadata"]["namespace"]
            == manager[environment.Env.OPENCOST_DEPLOYMENT_NAMESPACE]["value"]
        )
        url = _helm.secret_data(objects, "finops-operator-opencost-config")[
            environment.Env.OPENCOST_CONNECTION_STRING
        ]
        assert url == f"http://finops-operator-opencost.{NAMESPACE}.svc.cluster.local:9003"
        service = _helm.find(objects, "Service", name)
        assert service["spec"]["ports"][0]["port"] == 9003
        pod = opencost["spec"]["template"]
        assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
        [container] = pod["spec"]["containers"]
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        pricing = volumes["custom-pricing"]["configMap"]
        assert pricing == {"name": opencost_document.CONFIGMAP_NAME, "optional": True}
        mount = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}["custom-pricing"]
        assert _env(container)["CONFIG_PATH"]["value"].rstrip("/") == mount

        prometheus_url = _helm.secret_data(objects, "finops-operator-prometheus-config")[
            "PROMETHEUS_URL"
        ]
        assert _env(container)["PROMETHEUS_SERVER_ENDPOINT"]["value"] == prometheus_url
        assert (
            prometheus_url
            == f"http://finops-operator-prometheus.{NAMESPACE}.svc.cluster.local:9090"
        )
        scrape = _helm.find(objects, "ConfigMap", "finops-operator-prometheus")["data"]
        assert (
            f"finops-operator-opencost.{NAMESPACE}.svc.cluster.local:9003"
            in scrape["prometheus.yml"]
        )

    def test_empty_passwords_are_generated_per_install(self, tmp_path: pathlib.Path) -> None:
        first = _helm.secret_data(_render(tmp_path), "finops-operator-postgres-credentials")
        second = _helm.secret_data(_render(tmp_path), "finops-operator-postgres-credentials")
        for key in ("POSTGRES_PASSWORD", "FINOPS_DB_PASSWORD"):
            assert re.fullmatch(r"[A-Za-z0-9]{32}", first[key]), key
            assert first[key] != second[key]
        assert first["FINOPS_DB_PASSWORD"] != first["POSTGRES_PASSWORD"]
        assert (first["FINOPS_DB_NAME"], first["FINOPS_DB_USER"]) == ("finopsdb", "finopsuser")

    def test_opencost_outside_the_release_namespace_is_refused(
        self, tmp_path: pathlib.Path
    ) -> None:
        values = _values("elsewhere")
        with pytest.raises(_helm.RenderError, match="opencostDeploymentNamespace"):
            _helm.template("finops-operator", NAMESPACE, values, tmp_path)


def test_helm_install_dry_run_with_the_dependencies_against_the_real_api_server(
    kube: controlplane.ControlPlane, kube_namespace: str, tmp_path: pathlib.Path
) -> None:
    values = _values(kube_namespace)
    values["certManager"] = {"enabled": False}  # no cert-manager CRDs on this server
    done = _helm.install_dry_run(values, tmp_path, kube_namespace, kube.kubeconfig)
    assert done.returncode == 0, done.stderr
    assert "STATUS: pending-install" in done.stdout
    assert "Bundled dependencies are on" in done.stdout
    assert "kind: StatefulSet" in done.stdout


def test_an_upgrade_keeps_the_passwords_of_the_existing_secret(
    kube: controlplane.ControlPlane, kube_namespace: str, tmp_path: pathlib.Path
) -> None:
    """Rendered against the cluster (`lookup` sees it), as `helm upgrade` renders."""
    kept = {"POSTGRES_PASSWORD": "superuser-from-install", "FINOPS_DB_PASSWORD": "app-from-install"}
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "finops-operator-postgres-credentials", "namespace": kube_namespace},
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in kept.items()},
    }
    with kube.http() as client:
        resp = client.post(f"/api/v1/namespaces/{kube_namespace}/secrets", json=secret)
        assert resp.status_code == 201, resp.text
    objects = _helm.template(
        "finops-operator", kube_namespace, _values(kube_namespace), tmp_path, kube.kubeconfig
    )
    credentials = _helm.secret_data(objects, "finops-operator-postgres-credentials")
    assert {k: credentials[k] for k in kept} == kept
    dsn = _helm.secret_data(objects, "finops-operator-postgres-config")[
        environment.Env.POSTGRES_CONNECTION_STRING
    ]
    assert conninfo.conninfo_to_dict(dsn)["password"] == "app-from-install"
    # A password given in the values wins over the stored one.
    given = _helm.template(
        "finops-operator",
        kube_namespace,
        _values(kube_namespace, password="given-now"),
        tmp_path,
        kube.kubeconfig,
    )
    assert (
        _helm.secret_data(given, "finops-operator-postgres-credentials")["FINOPS_DB_PASSWORD"]
        == "given-now"
    )


def test_dependency_pods_pass_the_restricted_pod_security_standard(
    kube: controlplane.ControlPlane, tmp_path: pathlib.Path
) -> None:
    namespace = f"psa-{uuid.uuid4().hex[:8]}"
    kube.create_namespace(namespace, {"pod-security.kubernetes.io/enforce": "restricted"})
    objects = _helm.template("finops-operator", namespace, _values(namespace), tmp_path)
    specs = _pod_specs(objects)
    sts = _helm.find(objects, "StatefulSet", "finops-operator-postgres")
    # The StatefulSet controller adds a volume per claim template; a bare Pod needs it spelled out.
    claim = sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"]
    postgres_pod = specs["StatefulSet/finops-operator-postgres"]
    postgres_pod["volumes"].append(
        {
            "name": claim,
            "persistentVolumeClaim": {"claimName": f"{claim}-finops-operator-postgres-0"},
        }
    )
    refused = []
    with kube.http() as client:
        bare = {"containers": [{"name": "postgres", "image": "postgres:17"}]}
        resp = client.post(
            f"/api/v1/namespaces/{namespace}/pods",
            json={"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bare"}, "spec": bare},
            params={"dryRun": "All"},
        )
        assert resp.status_code == 403, "the namespace does not enforce the standard"
        for workload in (
            "StatefulSet/finops-operator-postgres",
            "Deployment/finops-operator-opencost",
            "Deployment/finops-operator-prometheus",
        ):
            name = workload.split("/")[1]
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace},
                "spec": specs[workload],
            }
            resp = client.post(
                f"/api/v1/namespaces/{namespace}/pods", json=pod, params={"dryRun": "All"}
            )
            if resp.status_code != 201:
                refused.append(f"{workload}: {resp.text}")
    assert refused == []


def _scram_matches(verifier: str, password: str) -> bool:
    """Whether a stored SCRAM-SHA-256 verifier was made from `password` (RFC 5802)."""
    _method, iterations_salt, keys = verifier.split("$")
    iterations, salt = iterations_salt.split(":")
    stored_key = keys.split(":")[0]
    salted = hashlib.pbkdf2_hmac(
        "sha256", password.encode(), base64.b64decode(salt), int(iterations)
    )
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    return base64.b64encode(hashlib.sha256(client_key).digest()).decode() == stored_key


@pytest.fixture
def chart_database(pg_server: postgres.PostgresCluster) -> Iterator[dict[str, str]]:
    """Given credentials for one test; the role and database are dropped afterwards."""
    suffix = uuid.uuid4().hex[:8]
    given = {
        "database": f"finops_{suffix}",
        "username": f"finops_user_{suffix}",
        "password": AWKWARD_PASSWORD,
        "postgresPassword": "superuser-" + suffix,
    }
    yield given
    with psycopg.connect(pg_server.admin_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(given["database"])
            )
        )
        conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(given["username"])))


def _run_init_script(objects: list[dict[str, Any]], pg_server: postgres.PostgresCluster) -> None:
    """The chart's init script, with the rendered credentials, as the image would run it."""
    script = _helm.find(objects, "ConfigMap", "finops-operator-postgres-init")["data"][
        "10-finops-database.sh"
    ]
    env = {
        "PATH": f"{pg_server.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "PGHOST": "127.0.0.1",
        "PGPORT": str(pg_server.port),
        "POSTGRES_USER": postgres.SUPERUSER,
        **_helm.secret_data(objects, "finops-operator-postgres-credentials"),
    }
    done = subprocess.run(
        ["sh", "-e", "-c", script], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr


def _resolved_env(
    objects: list[dict[str, Any]], namespace: str, secrets: dict[str, dict[str, str]]
) -> dict[str, str]:
    """The manager container's env as the kubelet would resolve it."""
    deployment = _helm.find(objects, "Deployment", "finops-operator-controller-manager")
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    env: dict[str, str] = {}
    for entry in container["env"]:
        source = entry.get("valueFrom", {})
        if "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            env[entry["name"]] = secrets[ref["name"]][ref["key"]]
        elif "fieldRef" in source:
            assert source["fieldRef"]["fieldPath"] == "metadata.namespace"
            env[entry["name"]] = namespace
        else:
            env[entry["name"]] = entry["value"]
    return env


def test_the_controller_starts_against_the_dsn_the_rendered_secret_holds(
    kube: controlplane.ControlPlane,
    kube_namespace: str,
    pg_server: postgres.PostgresCluster,
    chart_database: dict[str, str],
    tmp_path: pathlib.Path,
) -> None:
    objects = _helm.template(
        "finops-operator", kube_namespace, _values(kube_namespace, **chart_database), tmp_path
    )
    _run_init_script(objects, pg_server)
    with psycopg.connect(pg_server.admin_dsn) as conn:
        row = conn.execute(
            "SELECT rolpassword FROM pg_authid WHERE rolname = %s", (chart_database["username"],)
        ).fetchone()
        owner = conn.execute(
            "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = %s",
            (chart_database["database"],),
        ).fetchone()
    assert row is not None and _scram_matches(row[0], chart_database["password"])
    assert owner == (chart_database["username"],)

    # The rendered DSN, pointed at the harness's server instead of the in-cluster Service.
    names = ("finops-operator-postgres-config", "finops-operator-opencost-config")
    secrets = {name: _helm.secret_data(objects, name) for name in names}
    parts = conninfo.conninfo_to_dict(
        secrets["finops-operator-postgres-config"][environment.Env.POSTGRES_CONNECTION_STRING]
    )
    assert (parts["user"], parts["password"], parts["dbname"]) == (
        chart_database["username"],
        chart_database["password"],
        chart_database["database"],
    )
    parts.update(host="127.0.0.1", port=str(pg_server.port))
    dsn = conninfo.make_conninfo("", **parts)
    secrets["finops-operator-postgres-config"][environment.Env.POSTGRES_CONNECTION_STRING] = dsn

    env = _resolved_env(objects, kube_namespace, secrets)
    with (
        support.running_controller(kube, kube_namespace, env=env, skip_db=False) as proc,
        psycopg.connect(dsn) as conn,
    ):
        versions = [r[0] for r in conn.execute("SELECT version FROM schema_migrations ORDER BY 1")]
        table_owner = conn.execute(
            "SELECT tableowner FROM pg_tables WHERE tablename = 'schema_migrations'"
        ).fetchone()
    assert versions == [m.version for m in migrate.load()]
    assert table_owner == (chart_database["username"],)
    assert "database migrations applied" in proc.logs()
