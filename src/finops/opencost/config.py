"""Settings of one allocation run, from the CostJob spec plus the pod's environment.

The reconciler copies each timeout the CostJob sets onto the pod as a variable, and the pod
template supplies `OPENCOST_AGGREGATE`/`OPENCOST_STEP`/`OPENCOST_RESOLUTION`. A variable that
is set wins over the spec (a hand-run pod can override), the spec wins over the default, and a
value that does not parse is logged and replaced by the default, so a typo never fails a run.
`spec.sharding` has no variable; it is read from the spec alone.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections.abc import Mapping

from finops.api import environment, timeouts
from finops.collection import durations

log = logging.getLogger(__name__)

DEFAULT_AGGREGATE = "namespace,pod,container"
DEFAULT_STEP = "1h"
DEFAULT_RESOLUTION = "1m"
DEFAULT_NAMESPACES_PER_SHARD = 25
DEFAULT_CONCURRENCY = 4
# A whole hour of a 10,000-container cluster is about 20 MiB; past this, shard the CostJob.
DEFAULT_MAX_RESPONSE_BYTES = 64 * 1024 * 1024


def _duration_setting(
    field: timeouts.Timeout, spec: Mapping[str, object], env: Mapping[str, str]
) -> dt.timedelta:
    raw: object = env.get(field.env_var) or spec.get(field.spec_field)
    if raw is None or raw == "":
        return field.default
    source = field.env_var if env.get(field.env_var) else f"spec.{field.spec_field}"
    try:
        if not isinstance(raw, str):
            raise ValueError(f"not a string: {raw!r}")
        value = durations.parse(raw)
        if value <= dt.timedelta(0):
            raise ValueError("not positive")
    except ValueError as exc:
        log.warning(
            "%s=%r does not parse as a duration (%s); keeping the default %s",
            source,
            raw,
            exc,
            durations.format_seconds(field.default),
        )
        return field.default
    return value


@dataclasses.dataclass(frozen=True, slots=True)
class Timeouts:
    """The six CostJob timeouts (docs: concepts/costjob.md "Timeouts"), defaults included.

    `opencost_fetch` bounds every OpenCost request and each hour's fetch-and-stream;
    `http_client` is carried for compatibility and bounds nothing, as in the reference.
    """

    database_init: dt.timedelta = timeouts.BY_ATTRIBUTE["database_init"].default
    kubernetes_operation: dt.timedelta = timeouts.BY_ATTRIBUTE["kubernetes_operation"].default
    opencost_fetch: dt.timedelta = timeouts.BY_ATTRIBUTE["opencost_fetch"].default
    database_insert: dt.timedelta = timeouts.BY_ATTRIBUTE["database_insert"].default
    status_update: dt.timedelta = timeouts.BY_ATTRIBUTE["status_update"].default
    http_client: dt.timedelta = timeouts.BY_ATTRIBUTE["http_client"].default

    @classmethod
    def from_sources(cls, spec: Mapping[str, object], env: Mapping[str, str]) -> Timeouts:
        """Variable if set, else CostJob field, else default; unparsable → logged default."""
        return cls(
            **{name: _duration_setting(f, spec, env) for name, f in timeouts.BY_ATTRIBUTE.items()}
        )


def _positive_int(spec: Mapping[str, object], key: str, default: int) -> int:
    raw = spec.get(key)
    if raw is None:
        return default
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
        log.warning("spec.sharding.%s=%r is not a positive integer; using %d", key, raw, default)
        return default
    return raw


@dataclasses.dataclass(frozen=True, slots=True)
class ShardPlan:
    """`spec.sharding`: up to `namespaces_per_shard` namespaces a query, `concurrency` at once."""

    namespaces_per_shard: int = DEFAULT_NAMESPACES_PER_SHARD
    concurrency: int = DEFAULT_CONCURRENCY

    def __post_init__(self) -> None:
        if self.namespaces_per_shard < 1 or self.concurrency < 1:
            raise ValueError("namespacesPerShard and concurrency must be at least 1")

    @classmethod
    def from_spec(cls, spec: Mapping[str, object]) -> ShardPlan | None:
        """None when the CostJob does not opt in (one unfiltered query per hour)."""
        raw = spec.get("sharding")
        if raw is None:
            return None
        if not isinstance(raw, Mapping):
            log.warning("spec.sharding=%r is not an object; running unsharded", raw)
            return None
        return cls(
            namespaces_per_shard=_positive_int(
                raw, "namespacesPerShard", DEFAULT_NAMESPACES_PER_SHARD
            ),
            concurrency=_positive_int(raw, "concurrency", DEFAULT_CONCURRENCY),
        )


def _text_setting(env: Mapping[str, str], name: str, default: str) -> str:
    value = env.get(name, "").strip()
    return value or default


@dataclasses.dataclass(frozen=True, slots=True)
class OpenCostConfig:
    """Everything the OpenCost client needs for one run."""

    base_url: str
    aggregate: str = DEFAULT_AGGREGATE
    step: str = DEFAULT_STEP
    resolution: str = DEFAULT_RESOLUTION
    fetch_timeout: dt.timedelta = timeouts.BY_ATTRIBUTE["opencost_fetch"].default
    sharding: ShardPlan | None = None
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES

    @classmethod
    def from_sources(cls, spec: Mapping[str, object], env: Mapping[str, str]) -> OpenCostConfig:
        """Build from the CostJob `spec` dict and the environment (`os.environ`).

        Raises ValueError when `OPENCOST_CONNECTION_STRING` is missing: the docs make it a
        required variable of the allocation pod.
        """
        base_url = env.get(environment.Env.OPENCOST_CONNECTION_STRING, "").strip().rstrip("/")
        if not base_url:
            raise ValueError("OPENCOST_CONNECTION_STRING is not set")
        return cls(
            base_url=base_url,
            aggregate=_text_setting(env, environment.Env.OPENCOST_AGGREGATE, DEFAULT_AGGREGATE),
            step=_text_setting(env, environment.Env.OPENCOST_STEP, DEFAULT_STEP),
            resolution=_text_setting(env, environment.Env.OPENCOST_RESOLUTION, DEFAULT_RESOLUTION),
            fetch_timeout=Timeouts.from_sources(spec, env).opencost_fetch,
            sharding=ShardPlan.from_spec(spec),
        )
