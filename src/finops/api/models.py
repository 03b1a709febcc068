"""Typed models of the five kinds of `finops.stakater.com/v1alpha1`, and of `Budget`, our
extension to that group (it is not part of the reference product).

These classes are the single description of the API's shape: the CRD schemas in
`deploy/crds/` are generated from them (`finops.api.crds`), and the rest of the
package parses objects into them. Field names carry the camelCase spelling of the
public API as aliases; bounds, patterns, enums and defaults are declared here once.

OpenAPI details that pydantic has no word for (a `format`, a list type, an
int-or-string quantity) ride along in `json_schema_extra` or in an `OpenAPI`
marker inside `Annotated`, and only the CRD generator reads them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

GROUP = "finops.stakater.com"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

RATE_PATTERN = r"^([0-9]+(\.[0-9]+)?)?$"
CURRENCY_PATTERN = r"^[A-Z]{3}$"
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?"
    r"(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)


@dataclass(frozen=True)
class OpenAPI:
    """Extra OpenAPI keywords for a type used inside `Annotated` (read by the generator)."""

    keywords: tuple[tuple[str, Any], ...]

    @classmethod
    def of(cls, **keywords: Any) -> OpenAPI:
        return cls(tuple(sorted(keywords.items())))


# A Kubernetes quantity ("500m", "1Gi", 2): integer or string, as core/v1 declares it.
Quantity = Annotated[
    int | str, OpenAPI.of(pattern=QUANTITY_PATTERN, **{"x-kubernetes-int-or-string": True})
]
# metav1.Duration (the CostJob timeouts, `interval`) and metav1.ConditionStatus ("True",
# "False", "Unknown") are plain strings on the wire; the schema leaves them open strings.


class _Model(BaseModel):
    """Common configuration: camelCase on the wire, unknown fields dropped like the API server."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", use_enum_values=False
    )


# ---------------------------------------------------------------- enums


class MeterName(enum.StrEnum):
    SUBSCRIPTION = "subscription"
    CPU_HOUR = "cpuHour"
    GPU_HOUR = "gpuHour"
    RAM_GB_HOUR = "ramGbHour"
    PV_GB_HOUR = "pvGbHour"
    NETWORK_GB = "networkGb"


class TickAlignment(enum.StrEnum):
    ACTIVATED_AT = "ActivatedAt"
    HOUR_BOUNDARY = "HourBoundary"
    DAY_BOUNDARY = "DayBoundary"
    MONTH_BOUNDARY = "MonthBoundary"


class ParentDeactivateAction(enum.StrEnum):
    DEACTIVATE = "Deactivate"
    ORPHAN = "Orphan"


class CostJobType(enum.StrEnum):
    RESOURCE_COST_COLLECTION = "ResourceCostCollection"
    SUBSCRIPTION_CHARGE_COLLECTION = "SubscriptionChargeCollection"


class ExecutionStatus(enum.StrEnum):
    """Status of one execution record."""

    SUCCESS = "Success"
    FAILED = "Failed"
    ERROR = "Error"


class LastExecutionStatus(enum.StrEnum):
    """`status.lastExecutionStatus` additionally admits `Pending`."""

    SUCCESS = "Success"
    FAILED = "Failed"
    ERROR = "Error"
    PENDING = "Pending"


class ValuationMode(enum.StrEnum):
    CURRENCY = "currency"
    PERCENT = "percent"


class Granularity(enum.StrEnum):
    HOUR = "hour"
    DAY = "day"
    MONTH = "month"


class ResourceType(enum.StrEnum):
    DEPLOYMENT = "Deployment"
    STATEFUL_SET = "StatefulSet"
    POD = "Pod"
    DAEMON_SET = "DaemonSet"
    JOB = "Job"
    CRON_JOB = "CronJob"
    REPLICA_SET = "ReplicaSet"


class ConditionStatusValue(enum.StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


# ---------------------------------------------------------------- shared pieces


class ObjectMeta(_Model):
    """The parts of metav1.ObjectMeta this package reads; the API server owns the schema."""

    name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    generation: int | None = None
    resource_version: str | None = None
    creation_timestamp: datetime | None = None
    deletion_timestamp: datetime | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    finalizers: list[str] = Field(default_factory=list)


class Condition(_Model):
    """metav1.Condition, with the schema controller-gen emits for it."""

    type: Annotated[
        str,
        Field(
            max_length=316,
            pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
            r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
        ),
    ]
    status: ConditionStatusValue
    observed_generation: Annotated[int | None, Field(ge=0)] = None
    last_transition_time: datetime
    reason: Annotated[
        str,
        Field(min_length=1, max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"),
    ]
    message: Annotated[str, Field(max_length=32768)]


_CONDITIONS_LIST = {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]}


class ObjectReference(_Model):
    """A reference by name and explicit namespace; never resolved against the referrer's."""

    name: str
    namespace: Annotated[str, Field(min_length=1)]


class ResourceClaim(_Model):
    name: str
    request: str | None = None


class ResourceRequirements(_Model):
    """core/v1 ResourceRequirements, for the generated CronJob's loader container."""

    claims: Annotated[
        list[ResourceClaim] | None,
        Field(
            json_schema_extra={
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
            }
        ),
    ] = None
    limits: dict[str, Quantity] | None = None
    requests: dict[str, Quantity] | None = None


# ---------------------------------------------------------------- FinOpsProvider


class CloudOptions(_Model):
    """Options shared by the aws, gcp and azure blocks."""

    cloud_integration_secret: str | None = None
    pricing_model_source: str | None = None


class AWSOptions(CloudOptions):
    pass


class GCPOptions(CloudOptions):
    pass


class AzureOptions(CloudOptions):
    pass


class OnPremOptions(_Model):
    pricing_model_source: str | None = None


class FinOpsProviderSpec(_Model):
    awsoptions: AWSOptions | None = None
    gcpoptions: GCPOptions | None = None
    azureoptions: AzureOptions | None = None
    onpremoptions: OnPremOptions | None = None


class FinOpsProviderStatus(_Model):
    observed_generation: int | None = None
    conditions: Annotated[list[Condition] | None, Field(json_schema_extra=_CONDITIONS_LIST)] = None
    last_sync_time: datetime | None = None


# ---------------------------------------------------------------- PriceBook


_Rate = Annotated[str | None, Field(pattern=RATE_PATTERN)]


class PriceRates(_Model):
    """Decimal-string rates; empty means unset. Parsed to micros elsewhere, never to floats."""

    cpu_hour: _Rate = None
    spot_cpu_hour: Annotated[str | None, Field(pattern=RATE_PATTERN, alias="spotCPUHour")] = None
    ram_gb_hour: _Rate = None
    spot_ram_gb_hour: Annotated[str | None, Field(pattern=RATE_PATTERN, alias="spotRAMGbHour")] = (
        None
    )
    pv_gb_hour: _Rate = None
    gpu_hour: _Rate = None
    network_gib: Annotated[str | None, Field(pattern=RATE_PATTERN, alias="networkGiB")] = None


class PriceBookSpec(_Model):
    currency: Annotated[str, Field(pattern=CURRENCY_PATTERN)]
    valuation_mode: ValuationMode
    rates: PriceRates | None = None


class PriceBookStatus(_Model):
    active: bool | None = None
    ready: str | None = None
    observed_generation: int | None = None
    conditions: Annotated[list[Condition] | None, Field(json_schema_extra=_CONDITIONS_LIST)] = None
    active_pricing: dict[str, str] | None = None


# ---------------------------------------------------------------- CostJob


class Sharding(_Model):
    """Split one hour's allocation query into namespace-filtered shards (concepts/costjob)."""

    namespaces_per_shard: Annotated[int, Field(ge=1)] = 25
    concurrency: Annotated[int, Field(ge=1)] = 4


class CostJobSpec(_Model):
    type: CostJobType = CostJobType.RESOURCE_COST_COLLECTION
    database_init_timeout: str = "2m"
    kubernetes_operation_timeout: str = "1m"
    open_cost_fetch_timeout: str = "2m"
    database_insert_timeout: str = "3m"
    # Kept for compatibility; it has no effect and carries no default.
    database_views_refresh_timeout: str | None = None
    status_update_timeout: str = "1m"
    http_client_timeout: str = "90s"
    interval: str = "24h"
    resources: ResourceRequirements | None = None
    sharding: Sharding | None = None


class ExecutionRecord(_Model):
    execution_time: datetime | None = None
    status: ExecutionStatus | None = None
    duration: str | None = None
    error: str | None = None


class CostJobStatus(_Model):
    last_execution_time: datetime | None = None
    last_successful_execution_time: datetime | None = None
    last_execution_status: LastExecutionStatus | None = None
    execution_history: list[ExecutionRecord] | None = None
    # Beyond the reference (DESIGN §2.7): `Scheduled` says why a CostJob has no CronJob.
    conditions: Annotated[list[Condition] | None, Field(json_schema_extra=_CONDITIONS_LIST)] = None


# ---------------------------------------------------------------- Offering


class Margins(_Model):
    """Either an additive margin in micros or a factor in milli-units, never both."""

    absolute_micros: int | None = None
    factor_milli: int | None = None


class Meter(_Model):
    name: MeterName
    margins: Margins | None = None


class SubscriptionFee(_Model):
    """A recurring fee: `priceMicros` per tick of `period`, ticks placed by `tickAlignment`."""

    period: str
    tick_alignment: TickAlignment
    min_periods: Annotated[int | None, Field(ge=1)] = None
    price_micros: Annotated[int, Field(ge=1)]


class Pricing(_Model):
    resource_pricing: list[Meter] | None = None
    subscription_fee: SubscriptionFee | None = None


class Compatibility(_Model):
    required_offerings: list[ObjectReference] | None = None


class Lifecycle(_Model):
    on_parent_deactivate: ParentDeactivateAction = ParentDeactivateAction.DEACTIVATE
    allow_override: bool | None = None


class OfferingSpec(_Model):
    pricing: Pricing
    compatibility: Compatibility | None = None
    lifecycle: Lifecycle | None = None


class ResolvedIncludedUsage(_Model):
    value: int | None = None
    unit: str | None = None


class ResolvedMeter(_Model):
    name: MeterName
    unit_price_micros: int | None = None
    included_usage: ResolvedIncludedUsage | None = None


class ResolvedPricing(_Model):
    resolved_at: datetime | None = None
    meters: list[ResolvedMeter] | None = None
    subscription_fee: SubscriptionFee | None = None


class OfferingStatus(_Model):
    resolved_pricing: ResolvedPricing | None = None
    conditions: Annotated[list[Condition] | None, Field(json_schema_extra=_CONDITIONS_LIST)] = None
    ready: str | None = None


# ---------------------------------------------------------------- Subscription


class SubscriptionParent(_Model):
    subscription_ref: ObjectReference


class UsageSource(_Model):
    """Selects allocation rows; at least one field must be set (a CEL rule)."""

    resource_type: ResourceType | None = None
    name: str | None = None
    namespace: str | None = None


class TargetReference(_Model):
    api_version: str | None = None
    kind: str | None = None
    namespace: str | None = None
    name: str | None = None


class SubscriptionLifecycle(_Model):
    on_parent_deactivate: ParentDeactivateAction = ParentDeactivateAction.DEACTIVATE
    target_ref: TargetReference | None = None


class SubscriptionSpec(_Model):
    offering_ref: ObjectReference
    parent: SubscriptionParent | None = None
    usage_sources: list[UsageSource] | None = None
    lifecycle: SubscriptionLifecycle | None = None


class CostMetric(_Model):
    name: MeterName
    current: int | None = None
    projected: int | None = None


class CostBucket(_Model):
    granularity: Granularity | None = None
    start: datetime | None = None
    end_exclusive: datetime | None = None
    current: int | None = None
    projected: int | None = None
    breakdown: list[CostMetric] | None = None


class SubscriptionStatus(_Model):
    ready: str | None = None
    activated_at: datetime | None = None
    deactivated_at: datetime | None = None
    compatibility_root: str | None = None
    costs: list[CostBucket] | None = None
    conditions: Annotated[list[Condition] | None, Field(json_schema_extra=_CONDITIONS_LIST)] = None


# ---------------------------------------------------------------- Budget (our extension)


class BudgetPeriod(enum.StrEnum):
    """The calendar a Budget's amount applies to (UTC; weeks start on Monday)."""

    MONTHLY = "Monthly"
    WEEKLY = "Weekly"
    QUARTERLY = "Quarterly"


class ThresholdBasis(enum.StrEnum):
    """What a threshold compares with the amount: money spent so far, or the period's forecast."""

    ACTUAL = "Actual"
    FORECAST = "Forecast"


class BudgetState(enum.StrEnum):
    """`status.state`: the worst thing that is true of the period right now."""

    ON_TRACK = "OnTrack"
    FORECAST_EXCEEDED = "ForecastExceeded"
    EXCEEDED = "Exceeded"
    UNKNOWN = "Unknown"


class LabelSelectorOperator(enum.StrEnum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


class LabelSelectorRequirement(_Model):
    key: Annotated[str, Field(min_length=1)]
    operator: LabelSelectorOperator
    values: list[str] | None = None


class LabelSelector(_Model):
    """metav1.LabelSelector: every `matchLabels` pair and every expression must hold."""

    match_labels: dict[str, str] | None = None
    match_expressions: list[LabelSelectorRequirement] | None = None


class BudgetThreshold(_Model):
    percent: int
    basis: ThresholdBasis = ThresholdBasis.ACTUAL


MAX_BUDGET_THRESHOLDS = 16


class BudgetSpec(_Model):
    """A limit on what the selected Subscriptions of the namespace may cost per period."""

    amount: str
    currency: str
    period: BudgetPeriod = BudgetPeriod.MONTHLY
    subscription_selector: LabelSelector | None = None
    thresholds: Annotated[list[BudgetThreshold] | None, Field(max_length=MAX_BUDGET_THRESHOLDS)] = (
        None
    )


class CrossedThreshold(_Model):
    """A threshold the current period reached, and the charge run that first saw it."""

    percent: int
    basis: ThresholdBasis
    crossed_at: datetime
    value_micros: int


class BudgetForecast(_Model):
    """How `forecastMicros` was made: the ledger so far, exact future fees, estimated usage."""

    spent_micros: int | None = None
    future_fees_micros: int | None = None
    future_usage_micros: int | None = None
    usage_window_hours: int | None = None


class BudgetStatus(_Model):
    observed_generation: int | None = None
    period_start: datetime | None = None
    period_end: datetime | None = None
    evaluated_hour: datetime | None = None
    subscriptions: int | None = None
    amount_micros: int | None = None
    spent_micros: int | None = None
    forecast_micros: int | None = None
    spent: str | None = None
    forecast: str | None = None
    state: BudgetState | None = None
    forecast_detail: BudgetForecast | None = None
    thresholds: list[CrossedThreshold] | None = None
    conditions: Annotated[list[Condition] | None, Field(json_schema_extra=_CONDITIONS_LIST)] = None


# ---------------------------------------------------------------- the kinds


class _Object(_Model):
    """A top-level object: apiVersion, kind, metadata, spec, status."""

    kind_name: ClassVar[str]
    plural: ClassVar[str]
    namespaced: ClassVar[bool] = True
    # Short names only where they collide with nothing common: `cj` is CronJob's and
    # `sub` is OLM's Subscription, so CostJob and Subscription have none.
    short_names: ClassVar[tuple[str, ...]] = ()

    api_version: str = API_VERSION
    kind: str
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)


class FinOpsProvider(_Object):
    kind_name: ClassVar[str] = "FinOpsProvider"
    plural: ClassVar[str] = "finopsproviders"
    namespaced: ClassVar[bool] = False
    short_names: ClassVar[tuple[str, ...]] = ("fop",)

    kind: str = "FinOpsProvider"
    spec: FinOpsProviderSpec | None = None
    status: FinOpsProviderStatus | None = None


class PriceBook(_Object):
    kind_name: ClassVar[str] = "PriceBook"
    plural: ClassVar[str] = "pricebooks"
    short_names: ClassVar[tuple[str, ...]] = ("pb",)

    kind: str = "PriceBook"
    spec: PriceBookSpec | None = None
    status: PriceBookStatus | None = None


class CostJob(_Object):
    kind_name: ClassVar[str] = "CostJob"
    plural: ClassVar[str] = "costjobs"

    kind: str = "CostJob"
    spec: CostJobSpec | None = None
    status: CostJobStatus | None = None


class Offering(_Object):
    kind_name: ClassVar[str] = "Offering"
    plural: ClassVar[str] = "offerings"
    short_names: ClassVar[tuple[str, ...]] = ("offer",)

    kind: str = "Offering"
    spec: OfferingSpec | None = None
    status: OfferingStatus | None = None


class Subscription(_Object):
    kind_name: ClassVar[str] = "Subscription"
    plural: ClassVar[str] = "subscriptions"

    kind: str = "Subscription"
    spec: SubscriptionSpec | None = None
    status: SubscriptionStatus | None = None


class Budget(_Object):
    """Our extension to the API: not part of the reference product."""

    kind_name: ClassVar[str] = "Budget"
    plural: ClassVar[str] = "budgets"

    kind: str = "Budget"
    spec: BudgetSpec | None = None
    status: BudgetStatus | None = None


KINDS: tuple[type[_Object], ...] = (
    FinOpsProvider,
    PriceBook,
    CostJob,
    Offering,
    Subscription,
    Budget,
)
BY_KIND: dict[str, type[_Object]] = {k.kind_name: k for k in KINDS}
