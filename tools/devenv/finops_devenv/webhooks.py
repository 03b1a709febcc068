"""Register the operator's admission webhooks with a local API server.

In a cluster the chart registers them through the webhook Service; a local control plane has
no Service routing, so tests and the sandbox point the API server straight at the manager on
127.0.0.1 (as controller-runtime's envtest does), trusting a local CA.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from finops.controller import webhooks as server

OFFERING_HOOK = "voffering-v1alpha1.kb.io"
SUBSCRIPTION_HOOK = "vsubscription-v1alpha1.kb.io"
API = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"


def local_configuration(
    name: str, port: int, ca_pem: bytes, selector: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Both webhooks as the chart registers them (names, rules, `failurePolicy: Fail`), but
    by URL; `selector` limits them to namespaces carrying those labels."""

    def hook(hook_name: str, path: str, resource: str, operations: list[str]) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "name": hook_name,
            "clientConfig": {
                "url": f"https://127.0.0.1:{port}{path}",
                "caBundle": base64.b64encode(ca_pem).decode(),
            },
            "rules": [
                {
                    "apiGroups": ["finops.stakater.com"],
                    "apiVersions": ["v1alpha1"],
                    "operations": operations,
                    "resources": [resource],
                    "scope": "Namespaced",
                }
            ],
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 10,
        }
        if selector is not None:
            spec["namespaceSelector"] = {"matchLabels": dict(selector)}
        return spec

    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            hook(OFFERING_HOOK, server.OFFERING_PATH, "offerings", ["CREATE", "DELETE"]),
            hook(SUBSCRIPTION_HOOK, server.SUBSCRIPTION_PATH, "subscriptions", ["CREATE"]),
        ],
    }
