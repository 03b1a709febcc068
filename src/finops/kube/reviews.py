"""Who is asking, and may they: TokenReview then SubjectAccessReview for a bearer token.

Why: with `--metrics-secure` (the default, as in the reference) the metrics endpoint is only
for callers the cluster authorises to `get` the non-resource URL `/metrics`, e.g. a
Prometheus ServiceAccount bound to the chart's metrics-reader role. The FinOps gateway asks
the same question about a resource in one namespace, so one tenant cannot read another's
charges: both share the review and the short verdict cache here.
"""

from __future__ import annotations

import hashlib
import logging
import time

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.authentication_v1 import TokenReviewSpec
from lightkube.models.authorization_v1 import (
    NonResourceAttributes,
    ResourceAttributes,
    SubjectAccessReviewSpec,
)
from lightkube.resources.authentication_v1 import TokenReview
from lightkube.resources.authorization_v1 import SubjectAccessReview

log = logging.getLogger(__name__)


class _Reviewer:
    """200/401/403 (500 when the API cannot answer) per token and question, cached briefly.

    The cache key is a digest of the question and the token; the token itself is never kept.
    """

    def __init__(self, client: AsyncClient, ttl_seconds: float = 60.0) -> None:
        self.client = client
        self.ttl = ttl_seconds
        self._verdicts: dict[str, tuple[float, int]] = {}

    async def _verdict(
        self,
        authorization: str | None,
        question: str,
        resource: ResourceAttributes | None = None,
        non_resource: NonResourceAttributes | None = None,
    ) -> int:
        if not authorization or not authorization.lower().startswith("bearer "):
            return 401
        token = authorization[7:].strip()
        if not token:
            return 401
        key = hashlib.sha256(f"{question}\0{token}".encode()).hexdigest()
        cached = self._verdicts.get(key)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        verdict = await self._review(token, question, resource, non_resource)
        if verdict != 500:
            self._verdicts[key] = (time.monotonic() + self.ttl, verdict)
        return verdict

    async def _review(
        self,
        token: str,
        question: str,
        resource: ResourceAttributes | None,
        non_resource: NonResourceAttributes | None,
    ) -> int:
        try:
            review = await self.client.create(TokenReview(spec=TokenReviewSpec(token=token)))
            status = review.status
            if status is None or not status.authenticated or status.user is None:
                return 401
            sar = await self.client.create(
                SubjectAccessReview(
                    spec=SubjectAccessReviewSpec(
                        user=status.user.username,
                        groups=status.user.groups,
                        uid=status.user.uid,
                        resourceAttributes=resource,
                        nonResourceAttributes=non_resource,
                    )
                )
            )
        except ApiError as exc:
            log.error("cannot review a request for %s: %s", question, exc.status.message)
            return 500
        allowed = sar.status is not None and sar.status.allowed
        if not allowed:
            log.info("request for %s refused", question, extra={"user": status.user.username})
        return 200 if allowed else 403


class MetricsAuthorizer(_Reviewer):
    """May this bearer token `get` a non-resource URL such as `/metrics`?"""

    async def check(self, authorization: str | None, path: str) -> int:
        """HTTP status for a request carrying this `Authorization` header value."""
        return await self._verdict(
            authorization, path, non_resource=NonResourceAttributes(path=path, verb="get")
        )


class ResourceAuthorizer(_Reviewer):
    """May this bearer token perform `verb` on `resource.group` in one namespace?"""

    async def check(
        self,
        authorization: str | None,
        *,
        namespace: str,
        verb: str,
        group: str,
        resource: str,
        name: str | None = None,
    ) -> int:
        """HTTP status for a request carrying this `Authorization` header value."""
        question = f"{verb} {resource}.{group} {namespace}/{name or ''}"
        attributes = ResourceAttributes(
            namespace=namespace, verb=verb, group=group, resource=resource, name=name
        )
        return await self._verdict(authorization, question, resource=attributes)
