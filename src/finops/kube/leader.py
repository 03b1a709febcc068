"""Lease-based leader election (coordination.k8s.io/v1), as client-go does it.

Why not kopf peering: peering pauses by priority, it does not elect. Here exactly one replica
holds the Lease; the others keep trying and run nothing. Expiry is judged on the local
monotonic clock from the moment the lease record was last seen changing, so clock skew
between replicas cannot hand the lease over early. Every write carries the Lease's
`resourceVersion`, so two candidates can never both win one round.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import random
import time
from collections.abc import Callable, Mapping
from typing import Any

import lightkube
from lightkube.resources import coordination_v1

from finops.kube import client as kube_client

log = logging.getLogger(__name__)

ELECTION_ID = "4f7ee504.stakater.com"


class LostLeadershipError(RuntimeError):
    """The lease could not be renewed within the renew deadline."""


def micro_time(moment: dt.datetime) -> str:
    """metav1.MicroTime text."""
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Acquire, renew and release one Lease."""

    def __init__(
        self,
        client: lightkube.AsyncClient,
        *,
        namespace: str,
        identity: str,
        name: str = ELECTION_ID,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self._monotonic = monotonic
        self._observed_record: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._renewed_at: float | None = None
        self.is_leader = False

    def holds(self) -> bool:
        """Whether the last successful round began within the renew deadline: safe to act.

        Why: a process frozen past its Lease (SIGSTOP, a stalled VM) must not act on waking
        before its next round finds out that another replica leads now.
        """
        if self._renewed_at is None:
            return False
        return self._monotonic() - self._renewed_at < self.renew_deadline

    def _lease_body(
        self, spec: dict[str, Any], over: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """The whole Lease; `over`, the Lease as read, makes it a replace of that version."""
        meta: dict[str, str] = {"name": self.name, "namespace": self.namespace}
        if over is not None:
            meta["resourceVersion"] = over["metadata"]["resourceVersion"]
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": meta,
            "spec": spec,
        }

    async def try_acquire_or_renew(self) -> bool:
        """One round: True when this replica holds the lease afterwards."""
        started = self._monotonic()
        won = await self._contend()
        if won:
            self._renewed_at = started
        return won

    async def _contend(self) -> bool:
        now = dt.datetime.now(dt.UTC)
        lease = await kube_client.get_or_none(
            self.client, coordination_v1.Lease, self.name, self.namespace
        )
        if lease is None:
            spec: dict[str, Any] = {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": max(1, round(self.lease_duration)),
                "acquireTime": micro_time(now),
                "renewTime": micro_time(now),
                "leaseTransitions": 0,
            }
            try:
                await kube_client.create(self.client, coordination_v1.Lease, self._lease_body(spec))
            except lightkube.ApiError as exc:
                if kube_client.status_code(exc) == 409:
                    return False
                raise
            return True
        spec = dict(lease.get("spec") or {})
        record = (
            spec.get("holderIdentity"),
            str(spec.get("renewTime")),
            spec.get("leaseDurationSeconds"),
            spec.get("leaseTransitions"),
        )
        if record != self._observed_record:
            self._observed_record = record
            self._observed_at = self._monotonic()
        holder = spec.get("holderIdentity") or ""
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        if holder and holder != self.identity and self._observed_at + duration > self._monotonic():
            return False
        transitions = int(spec.get("leaseTransitions") or 0)
        new_spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.lease_duration)),
            "acquireTime": spec.get("acquireTime") if holder == self.identity else micro_time(now),
            "renewTime": micro_time(now),
            "leaseTransitions": transitions if holder == self.identity else transitions + 1,
        }
        try:
            await kube_client.replace(
                self.client, coordination_v1.Lease, self._lease_body(new_spec, lease)
            )
        except lightkube.ApiError as exc:
            if kube_client.status_code(exc) == 409:
                return False
            raise
        return True

    async def acquire(self, stop: asyncio.Event) -> bool:
        """Keep trying until this replica leads (True) or `stop` is set (False)."""
        while not stop.is_set():
            try:
                if await self.try_acquire_or_renew():
                    self.is_leader = True
                    log.info("became leader", extra={"lease": f"{self.namespace}/{self.name}"})
                    return True
            except Exception as exc:
                log.warning("leader election round failed", extra={"error": str(exc)})
            await _wait(stop, self.retry_period * (1 + random.random() * 0.2))
        return False

    async def keep_renewing(
        self,
        stop: asyncio.Event,
        on_pause: Callable[[], None] = lambda: None,
        on_resume: Callable[[], None] = lambda: None,
    ) -> None:
        """Renew every retry period; pause work past the renew deadline, resume on renewal.

        An unreachable API server is not a reason to restart: past the renew deadline this
        replica stops acting (`on_pause`) and keeps trying; once it renews the Lease again it
        resumes (`on_resume`) with the same identity. Only seeing another holder with a live
        Lease raises `LostLeadershipError`, so the process exits and comes back as a standby.
        Each round is bounded by the renew deadline, so a hung API server cannot stall it.
        """
        last_renew = self._monotonic()
        paused = False
        while not stop.is_set():
            await _wait(stop, self.retry_period)
            if stop.is_set():
                return
            renewed = False
            try:
                async with asyncio.timeout(self.renew_deadline):
                    renewed = await self.try_acquire_or_renew()
            except Exception as exc:
                log.warning("lease renewal failed", extra={"error": str(exc) or repr(exc)})
            if renewed:
                last_renew = self._monotonic()
                if paused:
                    paused, self.is_leader = False, True
                    log.info("lease renewed again; resuming work", extra=self._extra())
                    on_resume()
                continue
            holder = self._observed_record[0] if self._observed_record else None
            if holder and holder != self.identity:
                self.is_leader = False
                raise LostLeadershipError(
                    f"lease {self.namespace}/{self.name} is now held by {holder}"
                )
            if not paused and self._monotonic() - last_renew > self.renew_deadline:
                paused, self.is_leader = True, False
                log.warning("could not renew the lease in time; pausing work", extra=self._extra())
                on_pause()

    def _extra(self) -> dict[str, str]:
        return {"lease": f"{self.namespace}/{self.name}", "identity": self.identity}

    async def release(self) -> None:
        """Give the lease up on graceful shutdown so a standby takes over at once."""
        if not self.is_leader:
            return
        self.is_leader = False
        lease = await kube_client.get_or_none(
            self.client, coordination_v1.Lease, self.name, self.namespace
        )
        if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
            return
        now = micro_time(dt.datetime.now(dt.UTC))
        spec = dict(lease.get("spec") or {})
        spec.update({"holderIdentity": None, "leaseDurationSeconds": 1, "renewTime": now})
        spec = {k: v for k, v in spec.items() if v is not None}
        try:
            await kube_client.replace(
                self.client, coordination_v1.Lease, self._lease_body(spec, lease)
            )
            log.info("released leadership", extra={"lease": f"{self.namespace}/{self.name}"})
        except lightkube.ApiError as exc:
            log.warning("could not release lease", extra={"error": str(exc)})


async def _wait(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)
