"""Condition types and reasons written on Offerings and Subscriptions: one vocabulary.

The strings are the public API's (see the status-conditions reference); reconcilers, events and
tests use these members rather than spelling them again.
"""

from __future__ import annotations

import enum


class ConditionType(enum.StrEnum):
    READY = "Ready"
    ACTIVE = "Active"
    DELETING = "Deleting"
    PRICING_RESOLVED = "PricingResolved"


class Reason(enum.StrEnum):
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
