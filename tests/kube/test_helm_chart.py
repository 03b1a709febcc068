"""The Helm chart lints, renders and is accepted by the real API server.

Every variant the acceptance names (defaults, cert-manager off, OpenShift, MTO, starter
resources on) is linted with `helm lint --strict`, rendered with `helm template`, and each
rendered object is server-side applied with `dryRun=All` and strict field validation, so an
unknown or misspelt field (the reference chart's `k8sOperationTimeout`) is an error.
"""

from __future__ import annotations

import copy
import filecmp
import pathlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from tests.kube import _helm

from finops import operator
from finops.api import environment
from finops.controller import config
from finops.opencost import config as opencost_config
from finops.provisioning import costjobs
from finops_devenv import controlplane

CRDS = _helm.REPO / "deploy" / "crds"
MANAGER = "finops-operator-controller-manager"
CHART_CRDS = _helm.CHART / "crds"

STARTERS: dict[str, Any] = {
    "costJob": {"enabled": True, "k8sOperationTimeout": "2m", "httpClientTimeout": "45s"},
    "chargeCollectionJob": {
        "enabled": True,
        "interval": "30m",
        "kubernetesOperationTimeout": "90s",
        "databaseViewsRefreshTimeout": "",
    },
    "priceBook": {
        "enabled": True,
        "rates": {"cpuHour": "0.031", "ramGbHour": "0.004", "gpuHour": "1.80"},
    },
}
VARIANTS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "cert-manager-off": {"certManager": {"enabled": False}},
    "openshift": {"certManager": {"enabled": False}, "openshift": {"enabled": True}},
    "mto": {"controllerManager": {"manager": {"env": {"mtoEnabled": "true"}}}},
    "starter-resources": STARTERS,
    "webhooks-off": {"webhook": {"enabled": False}},
    "workers": {"controllerManager": {"manager": {"env": {"finopsWorkers": 8}}}},
    "gateway-off": {"finopsGatewayGateway": {"enabled": False}},
    "gateway-open-with-ingress": {
        "finopsGatewayGateway": {"finopsGatewayContainer": {"env": {"enableAuth": "false"}}},
        "finopsGatewayIngress": {
            "enabled": True,
            "className": "nginx",
            "rules": [
                {
                    "host": "costs.example.com",
                    "http": {
                        "paths": [
                            {
                                "path": "/",
                                "pathType": "Prefix",
                                "backend": {
                                    "service": {
                                        "name": "finops-operator-finops-gateway-service",
                                        "port": {"name": "http"},
                                    }
                                },
                            }
                        ]
                    },
                }
            ],
        },
    },
    "mdo-dependencies": {"mdoDependencies": {"enabled": True}},
    "starter-costjob-tuning": {
        "costJob": {
            "enabled": True,
            "resources": {
                "requests": {"cpu": "200m", "memory": "256Mi"},
                "limits": {"cpu": "1", "memory": "1Gi"},
            },
            "sharding": {"namespacesPerShard": 10, "concurrency": 3},
        },
        "chargeCollectionJob": {
            "enabled": True,
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
        },
    },
}

CERT_MANAGER_CRDS = [
    _helm.permissive_crd("cert-manager.io", "v1", kind, plural)
    for kind, plural in (("Issuer", "issuers"), ("Certificate", "certificates"))
]


def _with_opencost_namespace(values: dict[str, Any], namespace: str) -> dict[str, Any]:
    """Point the OpenCost Role at a namespace that exists on the test server."""
    out: dict[str, Any] = copy.deepcopy(values)
    env = out.setdefault("controllerManager", {}).setdefault("manager", {}).setdefault("env", {})
    env["opencostDeploymentNamespace"] = namespace
    return out


@pytest.fixture(scope="module")
def cert_manager_crds(
    kube: controlplane.ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """Minimal, permissive cert-manager CRDs so Issuer and Certificate can be dry-run."""
    path = tmp_path_factory.mktemp("cert-manager") / "crds.yaml"
    path.write_text(yaml.safe_dump_all(CERT_MANAGER_CRDS))
    kube.install_crds([path])
    yield


def render(
    variant: dict[str, Any], tmp_path: pathlib.Path, namespace: str = "finops-operator-system"
) -> list[dict[str, Any]]:
    return _helm.template("finops-operator", namespace, variant, tmp_path)


class TestLintAndApply:
    @pytest.mark.parametrize("name", sorted(VARIANTS))
    def test_chart_lints_strictly(self, name: str, tmp_path: pathlib.Path) -> None:
        done = _helm.lint(VARIANTS[name], tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "0 chart(s) failed" in done.stdout

    @pytest.mark.parametrize("name", sorted(VARIANTS))
    def test_every_rendered_object_is_accepted_by_a_server_side_dry_run(
        self,
        name: str,
        kube: controlplane.ControlPlane,
        kube_namespace: str,
        cert_manager_crds: None,
        tmp_path: pathlib.Path,
    ) -> None:
        # A unique release keeps cluster-scoped names (ClusterRoles, webhooks) apart.
        release = f"fo-{uuid.uuid4().hex[:6]}"
        values = _with_opencost_namespace(VARIANTS[name], kube_namespace)
        objects = _helm.template(release, kube_namespace, values, tmp_path)
        assert objects, "nothing rendered"
        refused = []
        with kube.http() as client:
            api = _helm.Api(client)
            for obj in objects:
                resp = api.apply(obj, dry_run=True)
                if resp.status_code not in (200, 201):
                    refused.append(f"{obj['kind']}/{obj['metadata']['name']}: {resp.text}")
            # Nothing was stored: a dry run must leave no trace.
            first_cluster_role = _helm.of_kind(objects, "ClusterRole")[0]
            assert client.get(api.url(first_cluster_role)).status_code == 404
        assert refused == []

    def test_helm_install_dry_run_against_the_real_api_server_succeeds(
        self,
        kube: controlplane.ControlPlane,
        kube_namespace: str,
        cert_manager_crds: None,
        tmp_path: pathlib.Path,
    ) -> None:
        """Helm's own install path (CRD check, discovery, NOTES) against the real server."""
        values = _with_opencost_namespace(STARTERS, kube_namespace)
        done = _helm.install_dry_run(values, tmp_path, kube_namespace, kube.kubeconfig)
        assert done.returncode == 0, done.stderr
        assert "STATUS: pending-install" in done.stdout
        assert f"CostJobs are scheduled only in: {kube_namespace}" in done.stdout

    def test_certmanager_and_openshift_together_are_refused(self, tmp_path: pathlib.Path) -> None:
        with pytest.raises(_helm.RenderError, match="alternatives"):
            render({"openshift": {"enabled": True}}, tmp_path)


class TestWebhookCertificates:
    def test_defaults_use_cert_manager_and_inject_the_serving_certificate_ca(
        self, tmp_path: pathlib.Path
    ) -> None:
        objects = render({}, tmp_path)
        vwc = _helm.find(objects, "ValidatingWebhookConfiguration")
        cert = _helm.find(objects, "Certificate", "finops-operator-serving-cert")
        issuer = _helm.find(objects, "Issuer")
        service = _helm.find(objects, "Service", "finops-operator-webhook-service")
        inject = vwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
        assert inject == f"{cert['metadata']['namespace']}/{cert['metadata']['name']}"
        assert cert["spec"]["issuerRef"]["name"] == issuer["metadata"]["name"]
        assert cert["spec"]["secretName"] == "webhook-server-cert"
        svc = service["metadata"]["name"]
        assert set(cert["spec"]["dnsNames"]) == {
            f"{svc}.finops-operator-system.svc",
            f"{svc}.finops-operator-system.svc.cluster.local",
        }

    def test_webhooks_point_at_the_webhook_service_and_fail_closed(
        self, tmp_path: pathlib.Path
    ) -> None:
        objects = render({}, tmp_path)
        vwc = _helm.find(objects, "ValidatingWebhookConfiguration")
        service = _helm.find(objects, "Service", "finops-operator-webhook-service")
        by_name = {w["name"]: w for w in vwc["webhooks"]}
        assert set(by_name) == {"voffering-v1alpha1.kb.io", "vsubscription-v1alpha1.kb.io"}
        expected = {
            "voffering-v1alpha1.kb.io": (
                "/validate-finops-stakater-com-v1alpha1-offering",
                ["offerings"],
                ["CREATE", "DELETE"],
            ),
            "vsubscription-v1alpha1.kb.io": (
                "/validate-finops-stakater-com-v1alpha1-subscription",
                ["subscriptions"],
                ["CREATE"],
            ),
        }
        for name, (path, resources, operations) in expected.items():
            hook = by_name[name]
            ref = hook["clientConfig"]["service"]
            assert (ref["name"], ref["namespace"], ref["path"]) == (
                service["metadata"]["name"],
                service["metadata"]["namespace"],
                path,
            )
            assert ref["port"] in {p["port"] for p in service["spec"]["ports"]}
            assert hook["failurePolicy"] == "Fail"
            assert hook["sideEffects"] == "None"
            assert hook["admissionReviewVersions"] == ["v1"]
            [rule] = hook["rules"]
            assert (rule["resources"], rule["operations"]) == (resources, operations)
        target_ports = {p["targetPort"] for p in service["spec"]["ports"]}
        deployment = _helm.find(objects, "Deployment", MANAGER)
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        assert target_ports <= {p["containerPort"] for p in container["ports"]}

    def test_cert_manager_off_renders_no_certificate_objects_or_injection(
        self, tmp_path: pathlib.Path
    ) -> None:
        objects = render(VARIANTS["cert-manager-off"], tmp_path)
        assert not _helm.of_kind(objects, "Issuer")
        assert not _helm.of_kind(objects, "Certificate")
        vwc = _helm.find(objects, "ValidatingWebhookConfiguration")
        assert not vwc["metadata"].get("annotations")

    def test_openshift_uses_service_serving_certificates(self, tmp_path: pathlib.Path) -> None:
        objects = render(VARIANTS["openshift"], tmp_path)
        service = _helm.find(objects, "Service", "finops-operator-webhook-service")
        vwc = _helm.find(objects, "ValidatingWebhookConfiguration")
        assert service["metadata"]["annotations"] == {
            "service.beta.openshift.io/serving-cert-secret-name": "webhook-server-cert"
        }
        assert vwc["metadata"]["annotations"] == {
            "service.beta.openshift.io/inject-cabundle": "true"
        }
        assert not _helm.of_kind(objects, "Certificate")

    def test_webhooks_off_disables_them_in_the_manager_and_drops_the_configuration(
        self, tmp_path: pathlib.Path
    ) -> None:
        objects = render(VARIANTS["webhooks-off"], tmp_path)
        assert not _helm.of_kind(objects, "ValidatingWebhookConfiguration")
        secrets = [c["spec"]["secretName"] for c in _helm.of_kind(objects, "Certificate")]
        assert secrets == ["metrics-server-cert"], "only the metrics certificate is left"
        env = _manager_env(objects)
        assert env[environment.Env.ENABLE_WEBHOOKS] == {
            "name": environment.Env.ENABLE_WEBHOOKS,
            "value": "false",
        }


class TestMetricsCertificate:
    def test_cert_manager_issues_the_metrics_certificate_for_the_metrics_service(
        self, tmp_path: pathlib.Path
    ) -> None:
        objects = render({}, tmp_path)
        cert = _helm.find(objects, "Certificate", "finops-operator-metrics-certs")
        issuer = _helm.find(objects, "Issuer")
        metrics = _helm.find(
            objects, "Service", "finops-operator-controller-manager-metrics-service"
        )
        svc = metrics["metadata"]["name"]
        assert cert["spec"]["secretName"] == "metrics-server-cert"
        assert cert["spec"]["issuerRef"] == {"kind": "Issuer", "name": issuer["metadata"]["name"]}
        assert set(cert["spec"]["dnsNames"]) == {
            f"{svc}.finops-operator-system.svc",
            f"{svc}.finops-operator-system.svc.cluster.local",
        }

    def test_the_manager_mounts_the_metrics_certificate_secret(
        self, tmp_path: pathlib.Path
    ) -> None:
        objects = render({}, tmp_path)
        container = _manager_container(objects)
        pod = _helm.find(objects, "Deployment", MANAGER)["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        [mount] = [m for m in container["volumeMounts"] if m["name"] == "metrics-certs"]
        assert mount == {
            "name": "metrics-certs",
            "mountPath": "/tmp/k8s-metrics-server/metrics-certs",
            "readOnly": True,
        }
        assert volumes["metrics-certs"]["secret"]["secretName"] == "metrics-server-cert"

    def test_args_that_set_a_metrics_cert_path_are_left_as_given(
        self, tmp_path: pathlib.Path
    ) -> None:
        args = ["--leader-elect", "--metrics-cert-path=/certs", "--metrics-cert-name=c.pem"]
        values = {"controllerManager": {"manager": {"args": args}}}
        assert _manager_container(render(values, tmp_path))["args"] == args

    def test_without_cert_manager_nothing_is_mounted_for_metrics(
        self, tmp_path: pathlib.Path
    ) -> None:
        container = _manager_container(render(VARIANTS["cert-manager-off"], tmp_path))
        assert "metrics-certs" not in {m["name"] for m in container["volumeMounts"]}
        assert not [a for a in container["args"] if a.startswith("--metrics-cert-path")]


def _manager_container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    deployment = _helm.find(objects, "Deployment", MANAGER)
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    return dict(container)


_CONFIG_REQUIRED = {name: "x" for name in config.REQUIRED}


def _manager_env(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in _manager_container(objects)["env"]}


def _container_env_names(objects: list[dict[str, Any]]) -> set[str]:
    """Every environment variable name any container of the rendered chart is given."""
    names: set[str] = set()
    for obj in objects:
        spec = obj.get("spec") or {}
        pod = (spec.get("template") or {}).get("spec") or {}
        for container in [*(pod.get("containers") or ()), *(pod.get("initContainers") or ())]:
            names.update(str(e["name"]) for e in container.get("env") or ())
    return names


class TestEnvironmentNames:
    @pytest.mark.parametrize("name", sorted(VARIANTS))
    def test_every_variable_the_chart_sets_for_our_image_is_a_product_constant(
        self, name: str, tmp_path: pathlib.Path
    ) -> None:
        """The chart and the processes spell each variable once: `finops.api.environment`."""
        ours = {MANAGER, "finops-operator-finops-gateway-gateway"}
        objects = [
            o
            for o in render(VARIANTS[name], tmp_path)
            if o.get("kind") == "Deployment" and o.get("metadata", {}).get("name") in ours
        ]
        assert objects, "the chart renders the manager and the gateway"
        names = _container_env_names(objects)
        assert environment.Env.POSTGRES_CONNECTION_STRING in names
        assert names <= {e.value for e in environment.Env}, names - {
            e.value for e in environment.Env
        }


class TestManagerDeployment:
    def test_manager_environment_follows_the_values(self, tmp_path: pathlib.Path) -> None:
        objects = render(
            {"imagePullSecrets": [{"name": "registry"}], "secrets": {"postgres": "pg"}},
            tmp_path,
            namespace="ops",
        )
        env = _manager_env(objects)
        assert env[environment.Env.POSTGRES_CONNECTION_STRING]["valueFrom"]["secretKeyRef"] == {
            "name": "pg",
            "key": environment.Env.POSTGRES_CONNECTION_STRING,
        }
        assert env[environment.Env.OPENCOST_CONNECTION_STRING]["valueFrom"]["secretKeyRef"] == {
            "name": "finops-operator-opencost-config",
            "key": environment.Env.OPENCOST_CONNECTION_STRING,
        }
        assert (
            env[environment.Env.POD_NAMESPACE]["valueFrom"]["fieldRef"]["fieldPath"]
            == "metadata.namespace"
        )
        assert env[environment.Env.COSTJOB_ALLOWED_NAMESPACES]["value"] == "ops"
        assert env[environment.Env.MTO_ENABLED]["value"] == "false"
        assert yaml.safe_load(env[environment.Env.IMAGE_PULL_SECRETS]["value"]) == [
            {"name": "registry"}
        ]
        job_sa = _helm.find(objects, "ServiceAccount", "finops-operator-job")
        assert env[environment.Env.JOB_SERVICE_ACCOUNT]["value"] == job_sa["metadata"]["name"]
        container = _manager_container(objects)
        assert env[environment.Env.OPERATOR_IMAGE]["value"] == container["image"]

    def test_every_image_and_pull_policy_follows_the_values(self, tmp_path: pathlib.Path) -> None:
        """The manager, the generated CronJob pods (OPERATOR_IMAGE and its pull policy, as the
        reconciler reads them) and the gateway each take their image from the values."""
        image = {"repository": "registry.example/finops", "tag": "1.2.3", "pullPolicy": "Never"}
        gateway = {"repository": "registry.example/gw", "tag": "9", "pullPolicy": "Always"}
        values = {
            "controllerManager": {"manager": {"image": image}},
            "finopsGatewayGateway": {"finopsGatewayContainer": {"image": gateway}},
        }
        objects = render(values, tmp_path)
        manager = _manager_container(objects)
        assert (manager["image"], manager["imagePullPolicy"]) == (
            "registry.example/finops:1.2.3",
            "Never",
        )
        env = {k: e["value"] for k, e in _manager_env(objects).items() if "value" in e}
        settings = config.from_env({**_CONFIG_REQUIRED, **env})
        job = {"metadata": {"name": "c", "namespace": "n", "uid": "u"}, "spec": {}}
        pod = costjobs.desired_cronjob(job, settings)["spec"]["jobTemplate"]["spec"]["template"]
        [loader] = pod["spec"]["containers"]
        assert (loader["image"], loader["imagePullPolicy"]) == (manager["image"], "Never")
        gw = _helm.find(objects, "Deployment", "finops-operator-finops-gateway-gateway")
        [gw_container] = gw["spec"]["template"]["spec"]["containers"]
        assert (gw_container["image"], gw_container["imagePullPolicy"]) == (
            "registry.example/gw:9",
            "Always",
        )
        # Without a gateway image of its own, the gateway runs the manager image, pulled alike.
        objects = render({"controllerManager": {"manager": {"image": image}}}, tmp_path)
        gw = _helm.find(objects, "Deployment", "finops-operator-finops-gateway-gateway")
        [gw_container] = gw["spec"]["template"]["spec"]["containers"]
        assert (gw_container["image"], gw_container["imagePullPolicy"]) == (
            manager["image"],
            "Never",
        )

    def test_workers_reach_the_manager_only_when_set(self, tmp_path: pathlib.Path) -> None:
        """Unset, the manager's own default applies; set (a YAML number or a string), the
        value reaches FINOPS_WORKERS as the manager reads it; 0 is passed on, not dropped,
        so the manager refuses it by name instead of quietly running its default."""
        assert environment.Env.FINOPS_WORKERS not in _manager_env(render({}, tmp_path))

        def workers(value: object) -> dict[str, Any]:
            values = {"controllerManager": {"manager": {"env": {"finopsWorkers": value}}}}
            return _manager_env(render(values, tmp_path)).get(environment.Env.FINOPS_WORKERS, {})

        assert workers("") == {}
        assert workers(None) == {}
        for value, expected in ((8, "8"), ("6", "6"), (1, "1")):
            entry = workers(value)
            assert entry == {"name": environment.Env.FINOPS_WORKERS, "value": expected}
            env = {**_CONFIG_REQUIRED, environment.Env.FINOPS_WORKERS: entry["value"]}
            assert config.from_env(env).workers == int(expected)
        zero = workers(0)
        assert zero == {"name": environment.Env.FINOPS_WORKERS, "value": "0"}
        with pytest.raises(config.ConfigError, match=environment.Env.FINOPS_WORKERS):
            config.from_env({**_CONFIG_REQUIRED, environment.Env.FINOPS_WORKERS: zero["value"]})

    def test_mto_mode_sets_the_flag_and_grants_the_opencost_resource(
        self, tmp_path: pathlib.Path
    ) -> None:
        def opencost_grants(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
            role = _helm.find(objects, "Role", "finops-operator-opencost-role")
            return [r for r in role["rules"] if "opencosts" in r["resources"]]

        mto = render(VARIANTS["mto"], tmp_path)
        assert _manager_env(mto)[environment.Env.MTO_ENABLED]["value"] == "true"
        assert opencost_grants(mto) and opencost_grants(mto)[0]["verbs"] == ["get", "list", "patch"]
        assert opencost_grants(render({}, tmp_path)) == []

    def test_probes_leader_election_and_metrics_port(self, tmp_path: pathlib.Path) -> None:
        objects = render({}, tmp_path)
        container = _manager_container(objects)
        assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": 8081}
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": 8081}
        assert "--leader-elect" in container["args"]
        assert "--health-probe-bind-address=:8081" in container["args"]
        metrics = _helm.find(
            objects, "Service", "finops-operator-controller-manager-metrics-service"
        )
        [port] = metrics["spec"]["ports"]
        assert (port["name"], port["port"]) == ("https", 8443)
        assert f"--metrics-bind-address=:{port['targetPort']}" in container["args"]
        deployment = _helm.find(objects, "Deployment", MANAGER)
        selector = deployment["spec"]["selector"]["matchLabels"]
        assert metrics["spec"]["selector"] == selector
        assert metrics["metadata"]["labels"]["control-plane"] == "controller-manager"

    @pytest.mark.parametrize("flag", ["--health-probe-bind-address", "-health-probe-bind-address"])
    def test_probes_follow_a_probe_address_set_in_the_args(
        self, flag: str, tmp_path: pathlib.Path
    ) -> None:
        args = ["--leader-elect", f"{flag}=:9090"]
        container = _manager_container(
            render({"controllerManager": {"manager": {"args": args}}}, tmp_path)
        )
        parsed = operator.build_parser().parse_args(container["args"])
        port = int(parsed.health_probe_bind_address.rpartition(":")[2])
        assert port == 9090
        assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": port}
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": port}
        probes = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert probes["probes"] == port

    @pytest.mark.parametrize(
        ("address", "message"),
        [("0", "turn the health probe server off"), ("127.0.0.1:8081", "cannot reach")],
    )
    def test_probe_addresses_the_kubelet_cannot_reach_are_refused(
        self, address: str, message: str, tmp_path: pathlib.Path
    ) -> None:
        args = [f"--health-probe-bind-address={address}"]
        with pytest.raises(_helm.RenderError, match=message):
            render({"controllerManager": {"manager": {"args": args}}}, tmp_path)

    def test_manager_args_are_understood_by_the_operator_binary(
        self, tmp_path: pathlib.Path
    ) -> None:
        container = _manager_container(render({}, tmp_path))
        args = operator.build_parser().parse_args(container["args"])
        assert args.mode == "controller"
        assert args.leader_elect
        assert args.health_probe_bind_address == ":8081"
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert args.webhook_cert_path == mounts["webhook-certs"]
        assert args.metrics_cert_path == mounts["metrics-certs"]
        assert (args.metrics_cert_name, args.metrics_cert_key) == ("tls.crt", "tls.key")

    def test_manager_pod_passes_the_restricted_pod_security_standard(
        self, kube: controlplane.ControlPlane, tmp_path: pathlib.Path
    ) -> None:
        namespace = f"psa-{uuid.uuid4().hex[:8]}"
        kube.create_namespace(namespace, {"pod-security.kubernetes.io/enforce": "restricted"})
        deployment = _helm.find(render({}, tmp_path, namespace=namespace), "Deployment", MANAGER)
        pod_spec = deployment["spec"]["template"]["spec"]

        def pod(spec: dict[str, Any]) -> dict[str, Any]:
            meta = {"name": "manager", "namespace": namespace}
            return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}

        url = f"/api/v1/namespaces/{namespace}/pods"
        bare = {"containers": [{"name": "manager", "image": "finops-operator:0.1.0"}]}
        with kube.http() as client:
            refused = client.post(url, json=pod(bare), params={"dryRun": "All"})
            accepted = client.post(url, json=pod(pod_spec), params={"dryRun": "All"})
        assert refused.status_code == 403, "the namespace does not enforce the standard"
        assert accepted.status_code == 201, accepted.text


class TestJobServiceAccount:
    """Generated CronJobs run in their CostJob's namespace, and a pod can only run as a
    ServiceAccount of its own namespace: the job account must exist wherever CostJobs may run."""

    def test_the_job_account_exists_in_every_allowed_namespace_and_is_bound(
        self, tmp_path: pathlib.Path
    ) -> None:
        env = {"costJobAllowedNamespaces": "team-a, ops,*,team-b"}
        values = {"controllerManager": {"manager": {"env": env}}}
        objects = render(values, tmp_path, namespace="ops")
        accounts = [
            o["metadata"]["namespace"]
            for o in _helm.of_kind(objects, "ServiceAccount")
            if o["metadata"]["name"] == "finops-operator-job"
        ]
        assert accounts == ["ops", "team-a", "team-b"]
        binding = _helm.find(objects, "ClusterRoleBinding", "finops-operator-job-rolebinding")
        assert [(s["name"], s["namespace"]) for s in binding["subjects"]] == [
            ("finops-operator-job", ns) for ns in accounts
        ]
        assert (
            _manager_env(objects)[environment.Env.JOB_SERVICE_ACCOUNT]["value"]
            == "finops-operator-job"
        )

    def test_by_default_only_the_release_namespace_gets_it(self, tmp_path: pathlib.Path) -> None:
        objects = render({}, tmp_path, namespace="ops")
        [account] = [
            o
            for o in _helm.of_kind(objects, "ServiceAccount")
            if o["metadata"]["name"].endswith("-job")
        ]
        assert account["metadata"]["namespace"] == "ops"

    def test_install_notes_say_where_the_account_is_and_warn_about_the_wildcard(
        self,
        kube: controlplane.ControlPlane,
        kube_namespace: str,
        cert_manager_crds: None,
        tmp_path: pathlib.Path,
    ) -> None:
        env = {"costJobAllowedNamespaces": "*", "opencostDeploymentNamespace": kube_namespace}
        values = {"controllerManager": {"manager": {"env": env}}}
        done = _helm.install_dry_run(values, tmp_path, kube_namespace, kube.kubeconfig)
        assert done.returncode == 0, done.stderr
        assert f"created here in: {kube_namespace})" in done.stdout
        assert '"*" allows every namespace' in done.stdout


class TestStarterResources:
    def test_starter_resources_are_off_by_default(self, tmp_path: pathlib.Path) -> None:
        objects = render({}, tmp_path)
        assert not _helm.of_kind(objects, "CostJob")
        assert not _helm.of_kind(objects, "PriceBook")

    def test_starter_pricebook_is_pinned_by_the_annotation_and_omits_empty_rates(
        self, tmp_path: pathlib.Path
    ) -> None:
        objects = render(STARTERS, tmp_path)
        book = _helm.find(objects, "PriceBook", "finops-operator-default-pricing")
        assert book["metadata"]["annotations"] == {"finops.stakater.com/active": "true"}
        assert "finops.stakater.com/active" not in book["metadata"]["labels"]
        assert book["spec"]["rates"] == STARTERS["priceBook"]["rates"]
        assert (book["spec"]["currency"], book["spec"]["valuationMode"]) == ("USD", "currency")

    def test_starter_costjobs_render_kubernetes_operation_timeout_and_omit_empty_ones(
        self, tmp_path: pathlib.Path
    ) -> None:
        objects = render(STARTERS, tmp_path)
        scraping = _helm.find(objects, "CostJob", "finops-operator-daily-scraping-job")
        charges = _helm.find(objects, "CostJob", "finops-operator-charge-collection-job")
        assert scraping["spec"] == {
            "type": "ResourceCostCollection",
            "interval": "1h",
            "kubernetesOperationTimeout": "2m",
            "httpClientTimeout": "45s",
        }
        assert charges["spec"] == {
            "type": "SubscriptionChargeCollection",
            "interval": "30m",
            "kubernetesOperationTimeout": "90s",
        }


class TestStarterCostJobResourcesAndSharding:
    """`costJob.resources`/`costJob.sharding` (and `chargeCollectionJob.resources`) become the
    CostJob's spec.resources and spec.sharding (concepts/costjob.md), and from there the
    loader container's resources and the allocation run's shards."""

    TUNED = VARIANTS["starter-costjob-tuning"]

    def _costjobs(self, values: dict[str, Any], tmp_path: pathlib.Path) -> tuple[Any, Any]:
        objects = render(values, tmp_path)
        return (
            _helm.find(objects, "CostJob", "finops-operator-daily-scraping-job"),
            _helm.find(objects, "CostJob", "finops-operator-charge-collection-job"),
        )

    def test_values_reach_the_costjob_specs(self, tmp_path: pathlib.Path) -> None:
        scraping, charges = self._costjobs(self.TUNED, tmp_path)
        assert scraping["spec"]["resources"] == self.TUNED["costJob"]["resources"]
        assert scraping["spec"]["sharding"] == {"namespacesPerShard": 10, "concurrency": 3}
        assert charges["spec"]["resources"] == self.TUNED["chargeCollectionJob"]["resources"]
        assert "sharding" not in charges["spec"]

    def test_empty_values_leave_both_fields_out(self, tmp_path: pathlib.Path) -> None:
        for job in self._costjobs(STARTERS, tmp_path):
            assert "resources" not in job["spec"]
            assert "sharding" not in job["spec"]

    def test_the_rendered_costjob_drives_the_loader_container_and_the_shards(
        self, tmp_path: pathlib.Path
    ) -> None:
        """What the reconciler and the allocation run make of the rendered objects."""
        settings = config.from_env(_CONFIG_REQUIRED)
        scraping, charges = self._costjobs(self.TUNED, tmp_path)
        for job, values in ((scraping, "costJob"), (charges, "chargeCollectionJob")):
            job["metadata"]["uid"] = str(uuid.uuid4())
            cron = costjobs.desired_cronjob(job, settings)
            [container] = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
            # Replaced whole, not merged: the charge job's requests-only value has no limits.
            assert container["resources"] == self.TUNED[values]["resources"]
        env = {"OPENCOST_CONNECTION_STRING": "http://opencost:9003"}
        sharded = opencost_config.OpenCostConfig.from_sources(scraping["spec"], env)
        assert sharded.sharding == opencost_config.ShardPlan(namespaces_per_shard=10, concurrency=3)
        [plain, _] = self._costjobs(STARTERS, tmp_path)
        assert opencost_config.OpenCostConfig.from_sources(plain["spec"], env).sharding is None

    def test_one_key_shards_and_the_api_server_defaults_the_other(
        self,
        kube: controlplane.ControlPlane,
        kube_namespace: str,
        tmp_path: pathlib.Path,
    ) -> None:
        """The CRD keeps both fields (nothing pruned) and fills the documented defaults."""
        values = {
            "costJob": {
                "enabled": True,
                "sharding": {"namespacesPerShard": 40},
                "resources": {"limits": {"memory": "2Gi"}},
            }
        }
        objects = _helm.template("finops-operator", kube_namespace, values, tmp_path)
        job = _helm.find(objects, "CostJob")
        assert job["spec"]["sharding"] == {"namespacesPerShard": 40}
        with kube.http() as client:
            resp = _helm.Api(client).apply(job, dry_run=True)
        assert resp.status_code in (200, 201), resp.text
        stored = resp.json()["spec"]
        assert stored["sharding"] == {"namespacesPerShard": 40, "concurrency": 4}
        assert stored["resources"] == {"limits": {"memory": "2Gi"}}

    def test_large_whole_numbers_from_a_values_file_render_as_integers(
        self, tmp_path: pathlib.Path
    ) -> None:
        values = {"costJob": {"enabled": True, "sharding": {"namespacesPerShard": 100000000}}}
        [scraping] = _helm.of_kind(render(values, tmp_path), "CostJob")
        assert scraping["spec"]["sharding"] == {"namespacesPerShard": 100000000}

    @pytest.mark.parametrize(
        ("values", "message"),
        [
            (
                {"costJob": {"sharding": {"concurrency": 0}}},
                "costJob.sharding.concurrency must be a whole number of at least 1, got 0",
            ),
            (
                {"costJob": {"sharding": {"namespacesPerShard": 2.5}}},
                "costJob.sharding.namespacesPerShard must be a whole number of at least 1",
            ),
            (
                {"costJob": {"sharding": {"shards": 3}}},
                "costJob.sharding.shards is not a sharding setting",
            ),
            (
                {"chargeCollectionJob": {"sharding": {"concurrency": 2}}},
                "chargeCollectionJob.sharding does nothing",
            ),
        ],
        ids=["zero", "fraction", "unknown-key", "charge-job"],
    )
    def test_sharding_values_that_would_not_work_are_refused(
        self, values: dict[str, Any], message: str, tmp_path: pathlib.Path
    ) -> None:
        enabled = {key: {"enabled": True, **job} for key, job in values.items()}
        with pytest.raises(_helm.RenderError, match=message):
            render(enabled, tmp_path)


class TestChartCrds:
    def test_chart_crds_are_copies_of_the_generated_crds(self) -> None:
        generated = sorted(p.name for p in CRDS.glob("*.yaml"))
        shipped = sorted(p.name for p in CHART_CRDS.glob("*.yaml"))
        assert shipped == generated, "run tools/sync-chart-crds.sh"
        _, mismatch, errors = filecmp.cmpfiles(CRDS, CHART_CRDS, generated, shallow=False)
        assert (mismatch, errors) == ([], []), "run tools/sync-chart-crds.sh"
        assert not any(p.is_symlink() for p in CHART_CRDS.iterdir())
