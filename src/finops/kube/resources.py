"""lightkube resource classes for our kinds (the five and Budget) and the MTO `OpenCost` resource.

Generic resources keep objects as plain dicts, which is what the pure core consumes.
"""

from __future__ import annotations

from typing import Any

from lightkube.generic_resource import create_global_resource, create_namespaced_resource

from finops.api import models

FinOpsProvider: Any = create_global_resource(
    models.GROUP, models.VERSION, "FinOpsProvider", "finopsproviders"
)
PriceBook: Any = create_namespaced_resource(models.GROUP, models.VERSION, "PriceBook", "pricebooks")
CostJob: Any = create_namespaced_resource(models.GROUP, models.VERSION, "CostJob", "costjobs")
Offering: Any = create_namespaced_resource(models.GROUP, models.VERSION, "Offering", "offerings")
Subscription: Any = create_namespaced_resource(
    models.GROUP, models.VERSION, "Subscription", "subscriptions"
)
Budget: Any = create_namespaced_resource(models.GROUP, models.VERSION, "Budget", "budgets")

# Multi Tenant Operator's bundled OpenCost (patched by the FinOpsProvider reconciler in MTO mode).
OpenCost: Any = create_namespaced_resource(
    "dependencies.tenantoperator.stakater.com", "v1alpha1", "OpenCost", "opencosts"
)
