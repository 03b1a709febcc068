"""lightkube resource classes for our kinds (the five and Budget) and the MTO `OpenCost` resource.

Generic resources keep objects as plain dicts, which is what the pure core consumes.
"""

from __future__ import annotations

from typing import Any

from lightkube.generic_resource import create_global_resource, create_namespaced_resource

from finops.api import models

GROUP, VERSION = models.GROUP, models.VERSION

FinOpsProvider: Any = create_global_resource(GROUP, VERSION, "FinOpsProvider", "finopsproviders")
PriceBook: Any = create_namespaced_resource(GROUP, VERSION, "PriceBook", "pricebooks")
CostJob: Any = create_namespaced_resource(GROUP, VERSION, "CostJob", "costjobs")
Offering: Any = create_namespaced_resource(GROUP, VERSION, "Offering", "offerings")
Subscription: Any = create_namespaced_resource(GROUP, VERSION, "Subscription", "subscriptions")
Budget: Any = create_namespaced_resource(GROUP, VERSION, "Budget", "budgets")

# Multi Tenant Operator's bundled OpenCost (patched by the FinOpsProvider reconciler in MTO mode).
OpenCost: Any = create_namespaced_resource(
    "dependencies.tenantoperator.stakater.com", "v1alpha1", "OpenCost", "opencosts"
)
