"""Who is asking, and may they: TokenReview and SubjectAccessReview for `/metrics`.

Why: with `--metrics-secure` (the default, as in the reference) the metrics endpoint is only
for callers the cluster authorises to `get` the non-resource URL `/metrics`, e.g. a
Prometheus ServiceAccount bound to the chart's metrics-reader role.
"""

from __future__ import annotations

import hashlib
import logging
import time

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.authentication_v1 import TokenReviewSpec
from lightkube.models.authorization_v1 import NonResourceAttributes, SubjectAccessReviewSpec
from lightkube.resources.authentication_v1 import TokenReview
from lightkube.resources.authorization_v1 import SubjectAccessReview

log = logging.getLogger(__name__)


class MetricsAuthorizer:
    """Decide 200/401/403 for a bearer token, caching verdicts briefly (never the token)."""

    def __init__(self, client: AsyncClient, ttl_seconds: float = 60.0) -> None:
        self.client = client
        self.ttl = ttl_seconds
        self._verdicts: dict[str, tuple[float, int]] = {}

    async def check(self, authorization: str | None, path: str) -> int:
        """HTTP status for a request carrying this `Authorization` header value."""
        if not authorization or not authorization.lower().startswith("bearer "):
            return 401
        token = authorization[7:].strip()
        key = hashlib.sha256(f"{path}\0{token}".encode()).hexdigest()
        cached = self._verdicts.get(key)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        verdict = await self._review(token, path)
        if verdict != 500:
            self._verdicts[key] = (time.monotonic() + self.ttl, verdict)
        return verdict

    async def _review(self, token: str, path: str) -> int:
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
                        nonResourceAttributes=NonResourceAttributes(path=path, verb="get"),
                    )
                )
            )
        except ApiError as exc:
            log.error("cannot review a metrics request: %s", exc.status.message)
            return 500
        allowed = sar.status is not None and sar.status.allowed
        if not allowed:
            log.info("metrics request refused", extra={"user": status.user.username})
        return 200 if allowed else 403
