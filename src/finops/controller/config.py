"""The manager's environment, read and checked once at start.

Four variables are required (a missing or empty one stops the process with its name);
the rest have documented defaults. Only the exact string "true" turns MTO mode on.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
import re
from collections.abc import Mapping

from finops.api import environment
from finops.billing import periods
from finops.store import partitions

REQUIRED = (
    environment.Env.POSTGRES_CONNECTION_STRING,
    environment.Env.OPENCOST_CONNECTION_STRING,
    environment.Env.OPENCOST_DEPLOYMENT_NAME,
    environment.Env.OPENCOST_DEPLOYMENT_NAMESPACE,
)
DEFAULT_JOB_SERVICE_ACCOUNT = "finops-operator-job"
DEFAULT_WORKERS = 4
_SA_NAMESPACE_FILE = pathlib.Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class ConfigError(ValueError):
    """The environment cannot start a manager; the message names the variable."""


@dataclasses.dataclass(frozen=True, slots=True)
class ControllerSettings:
    """Everything the reconcilers need from the environment."""

    postgres_dsn: str
    opencost_url: str
    opencost_deployment_name: str
    opencost_namespace: str
    pod_namespace: str
    mto_enabled: bool = False
    cluster_id: str = "default"
    enable_webhooks: bool = True
    webhook_bind_address: str = ":9443"
    image_pull_secrets: str = ""
    operator_image: str = ""
    operator_image_pull_policy: str = ""
    """`OPERATOR_IMAGE_PULL_POLICY` (not a reference variable): the generated pods'
    `imagePullPolicy`; empty leaves it to Kubernetes (Always for `:latest`, else IfNotPresent)."""
    job_service_account: str = DEFAULT_JOB_SERVICE_ACCOUNT
    costjob_allowed_namespaces: frozenset[str] = frozenset()
    resync_seconds: float = 300.0
    lease_duration_seconds: float = 15.0
    billing_env: tuple[tuple[str, str], ...] = ()
    """The billing-period settings (`FINOPS_BILLING_TIME_ZONE`, `FINOPS_PERIOD_GRACE_HOURS`)
    and the ledger retention (`FINOPS_LEDGER_RETENTION_MONTHS`, `..._ACTION`) set on the
    manager, checked at start and handed to the charge CronJobs' pods, which close the
    periods and retire old months."""
    workers: int = DEFAULT_WORKERS
    """Reconciles in flight (`FINOPS_WORKERS`). Each one mostly waits on the API server, so a
    burst of creates converges faster with four than with two; eight was slower while the
    creates themselves were slow and about 5% faster once they were quick (benchmarks/README,
    Convergence), too mixed to move the default."""

    def costjob_namespace_allowed(self, namespace: str) -> bool:
        """Whether a CostJob's DSN Secret may be written into `namespace` ("*" allows all)."""
        return (
            "*" in self.costjob_allowed_namespaces or namespace in self.costjob_allowed_namespaces
        )


def _own_namespace(env: Mapping[str, str]) -> str:
    if env.get(environment.Env.POD_NAMESPACE):
        return env[environment.Env.POD_NAMESPACE]
    try:
        return _SA_NAMESPACE_FILE.read_text().strip() or "default"
    except OSError:
        return "default"


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    """A positive, finite number of seconds, or `default` when unset or blank.

    Zero, a negative or a non-finite value would make the resync loop spin or the lease
    never expire, so it is refused by name like text that is not a number.
    """
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(f"{name} must be a positive number of seconds, got {raw!r}")
    return value


def _workers(env: Mapping[str, str]) -> int:
    """`FINOPS_WORKERS`: a whole number of at least 1, or 4 when unset or blank.

    Zero, a negative count or a fraction is refused rather than quietly turned into some
    count, so a mistyped value stops the manager with the variable's name.
    """
    raw = env.get(environment.Env.FINOPS_WORKERS, "").strip()
    if not raw:
        return DEFAULT_WORKERS
    if not re.fullmatch(r"[0-9]+", raw) or int(raw) < 1:
        raise ConfigError(f"FINOPS_WORKERS must be a whole number of at least 1, got {raw!r}")
    return int(raw)


def _billing(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The billing-period and ledger-retention variables that are set, after checking them as
    the charge job will (a bad time zone stops the manager here, not every charge run later)."""
    try:
        periods.Calendar.from_env(env)
        partitions.Retention.from_env(env)
    except (periods.SettingsError, partitions.RetentionSettingsError) as exc:
        raise ConfigError(str(exc)) from None
    names = (
        environment.Env.FINOPS_BILLING_TIME_ZONE,
        environment.Env.FINOPS_PERIOD_GRACE_HOURS,
        environment.Env.FINOPS_LEDGER_RETENTION_MONTHS,
        environment.Env.FINOPS_LEDGER_RETENTION_ACTION,
    )
    return tuple((n, env[n].strip()) for n in names if env.get(n, "").strip())


PULL_POLICIES = ("Always", "IfNotPresent", "Never")


def _pull_policy(env: Mapping[str, str]) -> str:
    """`OPERATOR_IMAGE_PULL_POLICY`: one of Kubernetes' three policies, or empty when unset."""
    raw = env.get(environment.Env.OPERATOR_IMAGE_PULL_POLICY, "").strip()
    if raw and raw not in PULL_POLICIES:
        raise ConfigError(
            f"OPERATOR_IMAGE_PULL_POLICY must be one of {', '.join(PULL_POLICIES)}, got {raw!r}"
        )
    return raw


def from_env(env: Mapping[str, str]) -> ControllerSettings:
    """Build settings or raise `ConfigError` naming the first missing required variable."""
    for name in REQUIRED:
        if not env.get(name, "").strip():
            raise ConfigError(f"required environment variable {name} is not set")
    own = _own_namespace(env)
    allowed_raw = env.get(environment.Env.COSTJOB_ALLOWED_NAMESPACES, "").strip()
    allowed = (
        frozenset(n.strip() for n in allowed_raw.split(",") if n.strip())
        if allowed_raw
        else frozenset({own})
    )
    resync = _seconds(env, environment.Env.FINOPS_RESYNC_SECONDS, 300.0)
    lease = _seconds(env, environment.Env.FINOPS_LEASE_DURATION_SECONDS, 15.0)
    workers = _workers(env)
    pull_policy = _pull_policy(env)
    billing = _billing(env)
    return ControllerSettings(
        postgres_dsn=env[environment.Env.POSTGRES_CONNECTION_STRING],
        opencost_url=env[environment.Env.OPENCOST_CONNECTION_STRING].strip(),
        opencost_deployment_name=env[environment.Env.OPENCOST_DEPLOYMENT_NAME].strip(),
        opencost_namespace=env[environment.Env.OPENCOST_DEPLOYMENT_NAMESPACE].strip(),
        pod_namespace=own,
        mto_enabled=env.get(environment.Env.MTO_ENABLED) == "true",
        cluster_id=env.get(environment.Env.CLUSTER_ID) or "default",
        enable_webhooks=env.get(environment.Env.ENABLE_WEBHOOKS) != "false",
        webhook_bind_address=env.get(environment.Env.WEBHOOK_BIND_ADDRESS) or ":9443",
        image_pull_secrets=env.get(environment.Env.IMAGE_PULL_SECRETS, ""),
        operator_image=env.get(environment.Env.OPERATOR_IMAGE, ""),
        operator_image_pull_policy=pull_policy,
        job_service_account=env.get(environment.Env.JOB_SERVICE_ACCOUNT)
        or DEFAULT_JOB_SERVICE_ACCOUNT,
        costjob_allowed_namespaces=allowed,
        resync_seconds=resync,
        lease_duration_seconds=lease,
        workers=workers,
        billing_env=billing,
    )
