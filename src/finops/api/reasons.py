"""Condition types, reasons and Event reasons of every kind: one vocabulary.

The strings are the public API's (see the status-conditions reference); the pure core,
reconcilers, jobs, Events and tests use these members rather than spelling them again.
"""

from __future__ import annotations

import enum


class ConditionType(enum.StrEnum):
    READY = "Ready"
    ACTIVE = "Active"
    DELETING = "Deleting"
    PRICING_RESOLVED = "PricingResolved"
    SCHEDULED = "Scheduled"
    COSTS_RESOLVED = "CostsResolved"


class Reason(enum.StrEnum):
    """Offering and Subscription condition reasons."""

    # Both kinds.
    VALIDATION_SUCCEEDED = "ValidationSucceeded"
    VALIDATION_ERROR = "ValidationError"
    CIRCULAR_DEPENDENCY_DETECTED = "CircularDependencyDetected"
    # Offering readiness and pricing.
    PRICING_RESOLVED = "PricingResolved"
    REQUIRED_OFFERING_NOT_FOUND = "RequiredOfferingNotFound"
    REQUIRED_OFFERING_NOT_READY = "RequiredOfferingNotReady"
    NO_ACTIVE_PRICEBOOK = "NoActivePricebook"
    PRICEBOOK_PARSE_FAILED = "PricebookParseFailed"
    # Offering deletion.
    DEPENDENT_SUBSCRIPTIONS_EXIST = "DependentSubscriptionsExist"
    DEPENDENT_OFFERINGS_EXIST = "DependentOfferingsExist"
    DELETION_ALLOWED = "DeletionAllowed"
    # Subscription gates (Ready=False while holding).
    OFFERING_NOT_FOUND = "OfferingNotFound"
    OFFERING_NOT_READY = "OfferingNotReady"
    PARENT_SUBSCRIPTION_NOT_FOUND = "ParentSubscriptionNotFound"
    PARENT_SUBSCRIPTION_NOT_READY = "ParentSubscriptionNotReady"
    PARENT_SUBSCRIPTION_DEACTIVATED = "ParentSubscriptionDeactivated"
    COMPATIBILITY_REQUIREMENT_NOT_MET = "CompatibilityRequirementNotMet"
    TARGET_NOT_FOUND = "TargetNotFound"
    TARGET_IS_SELF_REFERENCE = "TargetIsSelfReference"
    # Subscription activation (Ready=True and Active=True).
    ACTIVATION_SUCCEEDED = "ActivationSucceeded"
    ORPHANED = "Orphaned"
    # Subscription deactivation (Active=False; Ready=False carries ValidationSucceeded).
    PARENT_DEACTIVATED = "ParentDeactivated"
    MARKED_FOR_DELETION = "MarkedForDeletion"
    # Subscription deletion.
    WAITING_FOR_COLLECTION_JOB = "WaitingForCollectionJob"


class EventType(enum.StrEnum):
    NORMAL = "Normal"
    WARNING = "Warning"


class PriceBookReason(enum.StrEnum):
    """PriceBook `Ready` (rates parsed) and `Active` (the elected book) reasons; the `Active`
    ones double as the Events' reasons."""

    VALIDATION_SUCCEEDED = "ValidationSucceeded"
    PRICEBOOK_PARSE_FAILED = "PricebookParseFailed"
    ACTIVATED = "Activated"
    DEMOTED = "Demoted"


class ProviderReason(enum.StrEnum):
    """FinOpsProvider `Ready` reasons: what the last reconcile did to OpenCost."""

    PROVIDER_APPLIED = "ProviderApplied"
    BRING_YOUR_OWN_OPENCOST = "BringYourOwnOpenCost"
    NO_VALID_PROVIDER_OPTION = "NoValidProviderOption"
    OPENCOST_PATCH_FAILED = "OpenCostPatchFailed"


class CostJobReason(enum.StrEnum):
    """CostJob `Scheduled` reasons."""

    CRON_JOB_READY = "CronJobReady"
    NAMESPACE_NOT_ALLOWED = "NamespaceNotAllowed"


class CostsReason(enum.StrEnum):
    """Subscription `CostsResolved` reasons: where a bucket's `current` came from."""

    FROM_DB = "FromDB"
    FROM_CALCULATOR = "FromCalculator"


class EventReason(enum.StrEnum):
    """Reasons of Events that are not also a condition's reason."""

    ACTIVATED = "Activated"
    DEACTIVATED = "Deactivated"
    ORPHANED = "Orphaned"
    DELETION_BLOCKED = "DeletionBlocked"
    CRON_JOB_CREATED = "CronJobCreated"
    CRON_JOB_UPDATED = "CronJobUpdated"
    OPENCOST_RESTARTED = "OpenCostRestarted"


class BudgetCondition(enum.StrEnum):
    """Budget condition types (our extension): has the period's spend, or its forecast, gone
    over the amount."""

    EXCEEDED = "Exceeded"
    FORECAST_EXCEEDED = "ForecastExceeded"


class BudgetReason(enum.StrEnum):
    """Budget condition reasons and the reasons of its threshold Events."""

    SPENT_OVER_AMOUNT = "SpentOverAmount"
    SPENT_WITHIN_AMOUNT = "SpentWithinAmount"
    FORECAST_OVER_AMOUNT = "ForecastOverAmount"
    FORECAST_WITHIN_AMOUNT = "ForecastWithinAmount"
    CURRENCY_MISMATCH = "CurrencyMismatch"
    ACTUAL_THRESHOLD_CROSSED = "ActualThresholdCrossed"
    FORECAST_THRESHOLD_CROSSED = "ForecastThresholdCrossed"
