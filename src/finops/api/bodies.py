"""The bodies of our kinds (the five and Budget) as the JSON the API server holds, for mypy.

`finops.api.models` validates; these TypedDicts (each named after its model, with `Body`
appended) only name the keys and value types of the raw bodies the rest of the package reads
and writes (camelCase, exactly as the contract spells
them), so a typo in a key or a wrong value type is a type error instead of a silent `None`.
Timestamps are RFC 3339 strings and enums their string values, as on the wire. Only keys the
pydantic models mark required are `Required`; `tests/unit/api/test_bodies.py` keeps both in
step (no `from __future__ import annotations` here: it would hide `Required` from
`__required_keys__` on Python 3.11).
"""

from collections.abc import Mapping
from typing import Any, Required, TypedDict, cast


class ObjectMetaBody(TypedDict, total=False):
    """The parts of metav1.ObjectMeta this package reads; the API server owns the schema."""

    name: str
    namespace: str
    uid: str
    generation: int
    resourceVersion: str
    creationTimestamp: str
    deletionTimestamp: str
    labels: dict[str, str]
    annotations: dict[str, str]
    finalizers: list[str]
    # Beyond the model: what the API server adds and the Subscription decisions read.
    managedFields: list[dict[str, Any]]
    ownerReferences: list[dict[str, Any]]


class CloudOptionsBody(TypedDict, total=False):
    """Options shared by the aws, gcp and azure blocks."""

    cloudIntegrationSecret: str
    pricingModelSource: str


class AWSOptionsBody(CloudOptionsBody, total=False):
    pass


class GCPOptionsBody(CloudOptionsBody, total=False):
    pass


class AzureOptionsBody(CloudOptionsBody, total=False):
    pass


class OnPremOptionsBody(TypedDict, total=False):
    pricingModelSource: str


class FinOpsProviderSpecBody(TypedDict, total=False):
    awsoptions: AWSOptionsBody
    gcpoptions: GCPOptionsBody
    azureoptions: AzureOptionsBody
    onpremoptions: OnPremOptionsBody


class ConditionBody(TypedDict, total=False):
    """metav1.Condition, with the schema controller-gen emits for it."""

    type: Required[str]
    status: Required[str]
    observedGeneration: int
    lastTransitionTime: Required[str]
    reason: Required[str]
    message: Required[str]


class FinOpsProviderStatusBody(TypedDict, total=False):
    observedGeneration: int
    conditions: list[ConditionBody]
    lastSyncTime: str


class Object(TypedDict, total=False):
    """What every object of the five kinds carries: apiVersion, kind, metadata."""

    apiVersion: str
    kind: str
    metadata: ObjectMetaBody


class FinOpsProviderBody(Object, total=False):
    spec: FinOpsProviderSpecBody
    status: FinOpsProviderStatusBody


class PriceRatesBody(TypedDict, total=False):
    """Decimal-string rates; empty means unset. Parsed to micros elsewhere, never to floats."""

    cpuHour: str
    spotCPUHour: str
    ramGbHour: str
    spotRAMGbHour: str
    pvGbHour: str
    gpuHour: str
    networkGiB: str


class PriceBookSpecBody(TypedDict, total=False):
    currency: Required[str]
    valuationMode: Required[str]
    rates: PriceRatesBody


class PriceBookStatusBody(TypedDict, total=False):
    active: bool
    ready: str
    observedGeneration: int
    conditions: list[ConditionBody]
    activePricing: dict[str, str]


class PriceBookBody(Object, total=False):
    spec: PriceBookSpecBody
    status: PriceBookStatusBody


class ResourceClaimBody(TypedDict, total=False):
    name: Required[str]
    request: str


class ResourceRequirementsBody(TypedDict, total=False):
    """core/v1 ResourceRequirements, for the generated CronJob's loader container."""

    claims: list[ResourceClaimBody]
    limits: dict[str, int | str]
    requests: dict[str, int | str]


class ShardingBody(TypedDict, total=False):
    """Split one hour's allocation query into namespace-filtered shards (concepts/costjob)."""

    namespacesPerShard: int
    concurrency: int


class CostJobSpecBody(TypedDict, total=False):
    type: str
    databaseInitTimeout: str
    kubernetesOperationTimeout: str
    openCostFetchTimeout: str
    databaseInsertTimeout: str
    databaseViewsRefreshTimeout: str
    statusUpdateTimeout: str
    httpClientTimeout: str
    interval: str
    resources: ResourceRequirementsBody
    sharding: ShardingBody


class ExecutionRecordBody(TypedDict, total=False):
    executionTime: str
    status: str
    duration: str
    error: str


class CostJobStatusBody(TypedDict, total=False):
    lastExecutionTime: str
    lastSuccessfulExecutionTime: str
    lastExecutionStatus: str
    executionHistory: list[ExecutionRecordBody]
    conditions: list[ConditionBody]


class CostJobBody(Object, total=False):
    spec: CostJobSpecBody
    status: CostJobStatusBody


class MarginsBody(TypedDict, total=False):
    """Either an additive margin in micros or a factor in milli-units, never both."""

    absoluteMicros: int
    factorMilli: int


class MeterBody(TypedDict, total=False):
    name: Required[str]
    margins: MarginsBody


class SubscriptionFeeBody(TypedDict, total=False):
    """A recurring fee: `priceMicros` per tick of `period`, ticks placed by `tickAlignment`."""

    period: Required[str]
    tickAlignment: Required[str]
    minPeriods: int
    priceMicros: Required[int]


class PricingBody(TypedDict, total=False):
    resourcePricing: list[MeterBody]
    subscriptionFee: SubscriptionFeeBody


class ObjectReferenceBody(TypedDict, total=False):
    """A reference by name and explicit namespace; never resolved against the referrer's."""

    name: Required[str]
    namespace: Required[str]


class CompatibilityBody(TypedDict, total=False):
    requiredOfferings: list[ObjectReferenceBody]


class LifecycleBody(TypedDict, total=False):
    onParentDeactivate: str
    allowOverride: bool


class OfferingSpecBody(TypedDict, total=False):
    pricing: Required[PricingBody]
    compatibility: CompatibilityBody
    lifecycle: LifecycleBody


class ResolvedIncludedUsageBody(TypedDict, total=False):
    value: int
    unit: str


class ResolvedMeterBody(TypedDict, total=False):
    name: Required[str]
    unitPriceMicros: int
    includedUsage: ResolvedIncludedUsageBody


class ResolvedPricingBody(TypedDict, total=False):
    resolvedAt: str
    meters: list[ResolvedMeterBody]
    subscriptionFee: SubscriptionFeeBody


class OfferingStatusBody(TypedDict, total=False):
    resolvedPricing: ResolvedPricingBody
    conditions: list[ConditionBody]
    ready: str


class OfferingBody(Object, total=False):
    spec: OfferingSpecBody
    status: OfferingStatusBody


class SubscriptionParentBody(TypedDict, total=False):
    subscriptionRef: Required[ObjectReferenceBody]


class UsageSourceBody(TypedDict, total=False):
    """Selects allocation rows; at least one field must be set (a CEL rule)."""

    resourceType: str
    name: str
    namespace: str


class TargetReferenceBody(TypedDict, total=False):
    apiVersion: str
    kind: str
    namespace: str
    name: str


class SubscriptionLifecycleBody(TypedDict, total=False):
    onParentDeactivate: str
    targetRef: TargetReferenceBody


class SubscriptionSpecBody(TypedDict, total=False):
    offeringRef: Required[ObjectReferenceBody]
    parent: SubscriptionParentBody
    usageSources: list[UsageSourceBody]
    lifecycle: SubscriptionLifecycleBody


class CostMetricBody(TypedDict, total=False):
    name: Required[str]
    current: int
    projected: int


class CostBucketBody(TypedDict, total=False):
    granularity: str
    start: str
    endExclusive: str
    current: int
    projected: int
    breakdown: list[CostMetricBody]


class SubscriptionStatusBody(TypedDict, total=False):
    ready: str
    activatedAt: str
    deactivatedAt: str
    compatibilityRoot: str
    costs: list[CostBucketBody]
    conditions: list[ConditionBody]


class SubscriptionBody(Object, total=False):
    spec: SubscriptionSpecBody
    status: SubscriptionStatusBody


# Budget: our extension to the group (not part of the reference product).


class LabelSelectorRequirementBody(TypedDict, total=False):
    key: Required[str]
    operator: Required[str]
    values: list[str]


class LabelSelectorBody(TypedDict, total=False):
    matchLabels: dict[str, str]
    matchExpressions: list[LabelSelectorRequirementBody]


class BudgetThresholdBody(TypedDict, total=False):
    percent: Required[int]
    basis: str


class BudgetSpecBody(TypedDict, total=False):
    amount: Required[str]
    currency: Required[str]
    period: str
    subscriptionSelector: LabelSelectorBody
    thresholds: list[BudgetThresholdBody]


class CrossedThresholdBody(TypedDict, total=False):
    percent: Required[int]
    basis: Required[str]
    crossedAt: Required[str]
    valueMicros: Required[int]


class BudgetForecastBody(TypedDict, total=False):
    spentMicros: int
    futureFeesMicros: int
    futureUsageMicros: int
    usageWindowHours: int


class BudgetStatusBody(TypedDict, total=False):
    observedGeneration: int
    periodStart: str
    periodEnd: str
    evaluatedHour: str
    subscriptions: int
    amountMicros: int
    spentMicros: int
    forecastMicros: int
    spent: str
    forecast: str
    state: str
    forecastDetail: BudgetForecastBody
    thresholds: list[CrossedThresholdBody]
    conditions: list[ConditionBody]


class BudgetBody(Object, total=False):
    spec: BudgetSpecBody
    status: BudgetStatusBody


# The body of each kind as the API server sends it, typed once where it enters (a watch store,
# a read): the server has validated it against the CRD schema these TypedDicts follow.


def as_finops_provider(body: Mapping[str, object]) -> FinOpsProviderBody:
    return cast(FinOpsProviderBody, body)


def as_pricebook(body: Mapping[str, object]) -> PriceBookBody:
    return cast(PriceBookBody, body)


def as_costjob(body: Mapping[str, object]) -> CostJobBody:
    return cast(CostJobBody, body)


def as_offering(body: Mapping[str, object]) -> OfferingBody:
    return cast(OfferingBody, body)


def as_subscription(body: Mapping[str, object]) -> SubscriptionBody:
    return cast(SubscriptionBody, body)


def as_budget(body: Mapping[str, object]) -> BudgetBody:
    return cast(BudgetBody, body)
