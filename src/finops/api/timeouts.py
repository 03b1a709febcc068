"""The CostJob timeouts table: each field, the job variable that overrides it, and its default.

One table (docs: concepts/costjob.md "Timeouts") read by both sides: the CostJob reconciler
copies the fields a CostJob sets onto the job pod as these variables, and the jobs resolve
variable, then field, then default (`finops.opencost.config.Timeouts`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt


@dataclasses.dataclass(frozen=True, slots=True)
class Timeout:
    """One timeout: `attribute` names it in `Timeouts`, `spec_field` on the CostJob."""

    attribute: str
    spec_field: str
    env_var: str
    default: dt.timedelta


TABLE: tuple[Timeout, ...] = (
    Timeout(
        "database_init", "databaseInitTimeout", "DATABASE_INIT_TIMEOUT", dt.timedelta(minutes=2)
    ),
    Timeout(
        "kubernetes_operation",
        "kubernetesOperationTimeout",
        "K8S_OPERATION_TIMEOUT",
        dt.timedelta(minutes=1),
    ),
    Timeout(
        "opencost_fetch", "openCostFetchTimeout", "OPENCOST_FETCH_TIMEOUT", dt.timedelta(minutes=2)
    ),
    Timeout(
        "database_insert",
        "databaseInsertTimeout",
        "DATABASE_INSERT_TIMEOUT",
        dt.timedelta(minutes=3),
    ),
    Timeout(
        "status_update", "statusUpdateTimeout", "STATUS_UPDATE_TIMEOUT", dt.timedelta(minutes=1)
    ),
    Timeout("http_client", "httpClientTimeout", "HTTP_CLIENT_TIMEOUT", dt.timedelta(seconds=90)),
)
"""In the order the reference lists them (`databaseViewsRefreshTimeout` does nothing)."""

BY_ATTRIBUTE: dict[str, Timeout] = {t.attribute: t for t in TABLE}
