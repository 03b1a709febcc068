"""The bodies of our kinds (the five and Budget) as the JSON the API server holds, typed for mypy.

`finops.api.models` validates; these TypedDicts only name the keys and value types of the
raw bodies the rest of the package reads and writes (camelCase, exactly as the contract spells
them), so a typo in a key or a wrong value type is a type error instead of a silent `None`.
Timestamps are RFC 3339 strings and enums their string values, as on the wire. Only keys the
pydantic models mark required are `Required`; `tests/unit/api/test_bodies.py` keeps both in
step (no `from __future__ import annotations` here: it would hide `Required` from
`__required_keys__` on Python 3.11).
"""

from collections.abc import Mapping
from typing import Any, Required, TypedDict, cast


class ObjectMeta(TypedDict, total=False):
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


class CloudOptions(TypedDict, total=False):
    """Options shared by the aws, gcp and azure blocks."""

    cloudIntegrationSecret: str
    pricingModelSource: str


class AWSOptions(CloudOptions, total=False):
    pass


class GCPOptions(CloudOptions, total=False):
    pass


class AzureOptions(CloudOptions, total=False):
    pass


class OnPremOptions(TypedDict, total=False):
    pricingModelSource: str


class FinOpsProviderSpec(TypedDict, total=False):
    awsoptions: AWSOptions
    gcpoptions: GCPOptions
    azureoptions: AzureOptions
    onpremoptions: OnPremOptions


class Condition(TypedDict, total=False):
    """metav1.Condition, with the schema controller-gen emits for it."""

    type: Required[str]
    status: Required[str]
    observedGeneration: int
    lastTransitionTime: Required[str]
    reason: Required[str]
    message: Required[str]


class FinOpsProviderStatus(TypedDict, total=False):
    observedGeneration: int
    conditions: list[Condition]
    lastSyncTime: str


class Object(TypedDict, total=False):
    """What every object of the five kinds carries: apiVersion, kind, metadata."""

    apiVersion: str
    kind: str
    metadata: ObjectMeta


class FinOpsProvider(Object, total=False):
    spec: FinOpsProviderSpec
    status: FinOpsProviderStatus


class PriceRates(TypedDict, total=False):
    """Decimal-string rates; empty means unset. Parsed to micros elsewhere, never to floats."""

    cpuHour: str
    spotCPUHour: str
    ramGbHour: str
    spotRAMGbHour: str
    pvGbHour: str
    gpuHour: str
    networkGiB: str


class PriceBookSpec(TypedDict, total=False):
    currency: Required[str]
    valuationMode: Required[str]
    rates: PriceRates


class PriceBookStatus(TypedDict, total=False):
    active: bool
    ready: str
    observedGeneration: int
    conditions: list[Condition]
    activePricing: dict[str, str]


class PriceBook(Object, total=False):
    spec: PriceBookSpec
    status: PriceBookStatus


class ResourceClaim(TypedDict, total=False):
    name: Required[str]
    request: str


class ResourceRequirements(TypedDict, total=False):
    """core/v1 ResourceRequirements, for the generated CronJob's loader container."""

    claims: list[ResourceClaim]
    limits: dict[str, int | str]
    requests: dict[str, int | str]


class Sharding(TypedDict, total=False):
    """Split one hour's allocation query into namespace-filtered shards (concepts/costjob)."""

    namespacesPerShard: int
    concurrency: int


class CostJobSpec(TypedDict, total=False):
    type: str
    databaseInitTimeout: str
    kubernetesOperationTimeout: str
    openCostFetchTimeout: str
    databaseInsertTimeout: str
    databaseViewsRefreshTimeout: str
    statusUpdateTimeout: str
    httpClientTimeout: str
    interval: str
    resources: ResourceRequirements
    sharding: Sharding


class ExecutionRecord(TypedDict, total=False):
    executionTime: str
    status: str
    duration: str
    error: str


class CostJobStatus(TypedDict, total=False):
    lastExecutionTime: str
    lastSuccessfulExecutionTime: str
    lastExecutionStatus: str
    executionHistory: list[ExecutionRecord]
    conditions: list[Condition]


class CostJob(Object, total=False):
    spec: CostJobSpec
    status: CostJobStatus


class Margins(TypedDict, total=False):
    """Either an additive margin in micros or a factor in milli-units, never both."""

    absoluteMicros: int
    factorMilli: int


class Meter(TypedDict, total=False):
    name: Required[str]
    margins: Margins


class SubscriptionFee(TypedDict, total=False):
    """A recurring fee: `priceMicros` per tick of `period`, ticks placed by `tickAlignment`."""

    period: Required[str]
    tickAlignment: Required[str]
    minPeriods: int
    priceMicros: Required[int]


class Pricing(TypedDict, total=False):
    resourcePricing: list[Meter]
    subscriptionFee: SubscriptionFee


class ObjectReference(TypedDict, total=False):
    """A reference by name and explicit namespace; never resolved against the referrer's."""

    name: Required[str]
    namespace: Required[str]


class Compatibility(TypedDict, total=False):
    requiredOfferings: list[ObjectReference]


class Lifecycle(TypedDict, total=False):
    onParentDeactivate: str
    allowOverride: bool


class OfferingSpec(TypedDict, total=False):
    pricing: Required[Pricing]
    compatibility: Compatibility
    lifecycle: Lifecycle


class ResolvedIncludedUsage(TypedDict, total=False):
    value: int
    unit: str


class ResolvedMeter(TypedDict, total=False):
    name: Required[str]
    unitPriceMicros: int
    includedUsage: ResolvedIncludedUsage


class ResolvedPricing(TypedDict, total=False):
    resolvedAt: str
    meters: list[ResolvedMeter]
    subscriptionFee: SubscriptionFee


class OfferingStatus(TypedDict, total=False):
    resolvedPricing: ResolvedPricing
    conditions: list[Condition]
    ready: str


class Offering(Object, total=False):
    spec: OfferingSpec
    status: OfferingStatus


class SubscriptionParent(TypedDict, total=False):
    subscriptionRef: Required[ObjectReference]


class UsageSource(TypedDict, total=False):
    """Selects allocation rows; at least one field must be set (a CEL rule)."""

    resourceType: str
    name: str
    namespace: str


class TargetReference(TypedDict, total=False):
    apiVersion: str
    kind: str
    namespace: str
    name: str


class SubscriptionLifecycle(TypedDict, total=False):
    onParentDeactivate: str
    targetRef: TargetReference


class SubscriptionSpec(TypedDict, total=False):
    offeringRef: Required[ObjectReference]
    parent: SubscriptionParent
    usageSources: list[UsageSource]
    lifecycle: SubscriptionLifecycle


class CostMetric(TypedDict, total=False):
    name: Required[str]
    current: int
    projected: int


class CostBucket(TypedDict, total=False):
    granularity: str
    start: str
    endExclusive: str
    current: int
    projected: int
    breakdown: list[CostMetric]


class SubscriptionStatus(TypedDict, total=False):
    ready: str
    activatedAt: str
    deactivatedAt: str
    compatibilityRoot: str
    costs: list[CostBucket]
    conditions: list[Condition]


class Subscription(Object, total=False):
    spec: SubscriptionSpec
    status: SubscriptionStatus


# Budget: our extension to the group (not part of the reference product).


class LabelSelectorRequirement(TypedDict, total=False):
    key: Required[str]
    operator: Required[str]
    values: list[str]


class LabelSelector(TypedDict, total=False):
    matchLabels: dict[str, str]
    matchExpressions: list[LabelSelectorRequirement]


class BudgetThreshold(TypedDict, total=False):
    percent: Required[int]
    basis: str


class BudgetSpec(TypedDict, total=False):
    amount: Required[str]
    currency: Required[str]
    period: str
    subscriptionSelector: LabelSelector
    thresholds: list[BudgetThreshold]


class CrossedThreshold(TypedDict, total=False):
    percent: Required[int]
    basis: Required[str]
    crossedAt: Required[str]
    valueMicros: Required[int]


class BudgetForecast(TypedDict, total=False):
    spentMicros: int
    futureFeesMicros: int
    futureUsageMicros: int
    usageWindowHours: int


class BudgetStatus(TypedDict, total=False):
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
    forecastDetail: BudgetForecast
    thresholds: list[CrossedThreshold]
    conditions: list[Condition]


class Budget(Object, total=False):
    spec: BudgetSpec
    status: BudgetStatus


# The body of each kind as the API server sends it, typed once where it enters (a watch store,
# a read): the server has validated it against the CRD schema these TypedDicts follow.


def as_finops_provider(body: Mapping[str, object]) -> FinOpsProvider:
    return cast(FinOpsProvider, body)


def as_pricebook(body: Mapping[str, object]) -> PriceBook:
    return cast(PriceBook, body)


def as_costjob(body: Mapping[str, object]) -> CostJob:
    return cast(CostJob, body)


def as_offering(body: Mapping[str, object]) -> Offering:
    return cast(Offering, body)


def as_subscription(body: Mapping[str, object]) -> Subscription:
    return cast(Subscription, body)


def as_budget(body: Mapping[str, object]) -> Budget:
    return cast(Budget, body)
