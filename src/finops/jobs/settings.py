"""A job pod's environment, read once when the run starts.

The CronJobs the CostJob reconciler generates set these variables (`finops.api.environment`):
which CostJob the run belongs to, the ledger, the cluster id, the pinned hour, the lookback,
and the variables that override the CostJob's own spec (its timeouts, OpenCost's address and
query shape). Those overrides are kept as given: what they override is only known once the
CostJob has been read, so they are combined with its spec there (`finops.opencost.config`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping

from finops.api import environment, timeouts
from finops.billing import periods
from finops.collection import plan
from finops.opencost import config as opencost_config
from finops.store import partitions, pool

OVERRIDES: tuple[str, ...] = (
    environment.Env.OPENCOST_CONNECTION_STRING,
    environment.Env.OPENCOST_AGGREGATE,
    environment.Env.OPENCOST_STEP,
    environment.Env.OPENCOST_RESOLUTION,
    *(t.env_var for t in timeouts.TABLE),
)
"""The variables that override a CostJob's spec (or OpenCost's defaults) for one run."""
BILLING: tuple[str, ...] = (
    environment.Env.FINOPS_BILLING_TIME_ZONE,
    environment.Env.FINOPS_PERIOD_GRACE_HOURS,
    environment.Env.FINOPS_LEDGER_RETENTION_MONTHS,
    environment.Env.FINOPS_LEDGER_RETENTION_ACTION,
)
"""The billing-period and ledger-retention variables (the manager hands them to charge runs)."""


@dataclasses.dataclass(frozen=True)
class JobSettings:
    """What the environment of one job run says."""

    costjob_name: str
    costjob_namespace: str
    dsn: str
    """The ledger's DSN; empty when the variable is not set."""
    cluster: str
    scheduled_timestamp: str | None
    hours_lookback: str | None
    overrides: Mapping[str, str]
    billing: Mapping[str, str]
    """The billing-period and retention variables as given (checked by `calendar` and
    `retention`)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> JobSettings:
        return cls(
            costjob_name=env.get(environment.Env.COSTJOB_NAME, "").strip(),
            costjob_namespace=env.get(environment.Env.COSTJOB_NAMESPACE, "").strip(),
            dsn=env.get(environment.Env.POSTGRES_CONNECTION_STRING, "").strip(),
            cluster=pool.cluster_id(env),
            scheduled_timestamp=env.get(environment.Env.SCHEDULED_TIMESTAMP),
            hours_lookback=env.get(environment.Env.HOURS_LOOKBACK),
            overrides={name: env[name] for name in OVERRIDES if name in env},
            billing={name: env[name] for name in BILLING if name in env},
        )

    def calendar(self) -> periods.Calendar:
        """The billing periods these settings describe; `periods.SettingsError` names the bad
        variable."""
        return periods.Calendar.from_env(self.billing)

    def retention(self) -> partitions.Retention:
        """How many closed months the ledger keeps; `partitions.RetentionSettingsError` names
        the bad variable."""
        return partitions.Retention.from_env(self.billing)

    def scheduled_hour(self, now: dt.datetime) -> dt.datetime:
        """The hour this run is pinned to (`SCHEDULED_TIMESTAMP`, else `now`'s hour)."""
        return plan.scheduled_hour(self.scheduled_timestamp, now)

    def timeouts(self, spec: Mapping[str, object]) -> opencost_config.Timeouts:
        """The CostJob's timeouts with the variables over them."""
        return opencost_config.Timeouts.from_sources(spec, self.overrides)

    def opencost(self, spec: Mapping[str, object]) -> opencost_config.OpenCostConfig:
        """How to ask OpenCost: the CostJob's spec with the variables over it."""
        return opencost_config.OpenCostConfig.from_sources(spec, self.overrides)
