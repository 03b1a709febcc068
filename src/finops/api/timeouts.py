"""The CostJob timeouts table: each field, the job variable that overrides it, and its default.

One table (docs: concepts/costjob.md "Timeouts") read by both sides: the CostJob reconciler
copies the fields a CostJob sets onto the job pod as these variables, and the jobs resolve
variable, then field, then default (`finops.opencost.config.Timeouts`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from finops.api import environment


@dataclasses.dataclass(frozen=True, slots=True)
class Timeout:
    """One timeout: `attribute` names it in `Timeouts`, `spec_field` on the CostJob."""

    attribute: str
    spec_field: str
    env_var: str
    default: dt.timedelta


TABLE: tuple[Timeout, ...] = (
    Timeout(
        "database_init",
        "databaseInitTimeout",
        environment.Env.DATABASE_INIT_TIMEOUT,
        dt.timedelta(minutes=2),
    ),
    Timeout(
        "kubernetes_operation",
        "kubernetesOperationTimeout",
        environment.Env.K8S_OPERATION_TIMEOUT,
        dt.timedelta(minutes=1),
    ),
    Timeout(
        "opencost_fetch",
        "openCostFetchTimeout",
        environment.Env.OPENCOST_FETCH_TIMEOUT,
        dt.timedelta(minutes=2),
    ),
    Timeout(
        "database_insert",
        "databaseInsertTimeout",
        environment.Env.DATABASE_INSERT_TIMEOUT,
        dt.timedelta(minutes=3),
    ),
    Timeout(
        "status_update",
        "statusUpdateTimeout",
        environment.Env.STATUS_UPDATE_TIMEOUT,
        dt.timedelta(minutes=1),
    ),
    Timeout(
        "http_client",
        "httpClientTimeout",
        environment.Env.HTTP_CLIENT_TIMEOUT,
        dt.timedelta(seconds=90),
    ),
)
"""In the order the reference lists them (`databaseViewsRefreshTimeout` does nothing)."""

BY_ATTRIBUTE: dict[str, Timeout] = {t.attribute: t for t in TABLE}
