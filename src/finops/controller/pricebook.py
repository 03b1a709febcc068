"""PriceBook reconciler: readiness per book, one cluster-wide election, OpenCost's document.

Checklist per pass (one queue key for the whole cluster, because the election is global):
1. observe every PriceBook (from the watch cache);
2. decide (pure, `plan`): each book's readiness, the winner, each book's status, the document;
3. write: status patches only where something changed (with resourceVersion preconditions),
   Events on activation/demotion, the ConfigMap create-or-patch, and a restart of OpenCost
   only when the document's content changed. An unready winner leaves the last good
   document in place.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections.abc import Iterable, Mapping
from typing import Any

import lightkube

from finops.api import conditions, reasons
from finops.billing import money
from finops.controller import config, opencost_restart
from finops.kube import client as kube_client
from finops.kube import events, resources, status
from finops.pricing import election, opencost_document

log = logging.getLogger(__name__)

CONTROLLER = "pricebook-controller"
KEY = ("PriceBook", "", "*")
"""The single work-queue key: every PriceBook event enqueues the whole election."""

READY = reasons.ConditionType.READY
ACTIVE = reasons.ConditionType.ACTIVE
R = reasons.PriceBookReason
MANAGED_BY = {"app.kubernetes.io/managed-by": "finops-operator"}


def readiness(book: Mapping[str, Any]) -> conditions.Condition:
    """Ready=True unless a `currency` book has a rate that does not parse to micros."""
    spec = book.get("spec") or {}
    if spec.get("valuationMode") != "currency":
        return conditions.Condition(
            READY, "True", R.VALIDATION_SUCCEEDED, "Not a currency book: no rates to parse"
        )
    try:
        money.parse_rates(spec.get("rates"))
    except money.RateParseError as exc:
        return conditions.Condition(READY, "False", R.PRICEBOOK_PARSE_FAILED, str(exc))
    return conditions.Condition(READY, "True", R.VALIDATION_SUCCEEDED, "Every rate parsed")


@dataclasses.dataclass(frozen=True, slots=True)
class BookPlan:
    """What one book's status should become and which Events its transition deserves."""

    namespace: str
    name: str
    status: dict[str, Any]
    changed: bool
    events: tuple[tuple[str, str, str], ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Plan:
    """The decision of one pass over every PriceBook."""

    winner: tuple[str, str] | None
    books: tuple[BookPlan, ...]
    document: dict[str, str] | None
    """The rendered pricing document, or None to leave the stored one alone."""


def _key(book: Mapping[str, Any]) -> tuple[str, str]:
    meta = book.get("metadata") or {}
    return (str(meta.get("namespace", "")), str(meta.get("name", "")))


def plan_book(
    book: Mapping[str, Any],
    *,
    winner: tuple[str, str] | None,
    now: dt.datetime,
) -> BookPlan:
    """Desired status of one book given the cluster's winner."""
    meta = book.get("metadata") or {}
    namespace, name = _key(book)
    generation = meta.get("generation")
    current: dict[str, Any] = dict(book.get("status") or {})
    status = dict(current)
    ready = readiness(book)
    conds = conditions.set_condition(
        current.get("conditions"), ready, generation=generation, now=now
    )
    is_active = winner == (namespace, name)
    was_active = current.get("active") is True
    found: list[tuple[str, str, str]] = []
    if is_active != was_active:
        if is_active:
            message = (
                "Holds the active slot; its rates were rendered into OpenCost's pricing document"
                if ready.status == "True"
                else "Holds the active slot, but its rates do not parse; "
                "OpenCost keeps the last good document"
            )
            change = conditions.Condition(ACTIVE, "True", R.ACTIVATED, message)
            found.append((events.NORMAL, R.ACTIVATED, message))
        else:
            holder = f"{winner[0]}/{winner[1]}" if winner else "no book"
            message = f"Demoted: PriceBook {holder} holds the active slot"
            change = conditions.Condition(ACTIVE, "False", R.DEMOTED, message)
            found.append((events.NORMAL, R.DEMOTED, message))
        conds = conditions.set_condition(conds, change, generation=generation, now=now)
    status["conditions"] = conds
    status["ready"] = ready.status
    status["active"] = is_active
    if generation is not None:
        status["observedGeneration"] = generation
    if is_active and ready.status == "True":
        status["activePricing"] = opencost_document.render(
            name, (book.get("spec") or {}).get("rates")
        )
    elif not is_active:
        status.pop("activePricing", None)
    return BookPlan(namespace, name, status, status != current, tuple(found))


def plan(books: Iterable[Mapping[str, Any]], now: dt.datetime) -> Plan:
    """Elect, then plan every book and the document (None when the winner is not ready)."""
    pool = list(books)
    won = election.elect(election.Candidate.from_object(b) for b in pool)
    winner = won.key if won is not None else None
    plans = tuple(plan_book(b, winner=winner, now=now) for b in pool)
    document = None
    for book in pool:
        if _key(book) == winner and readiness(book).status == "True":
            document = opencost_document.render(winner[1], (book.get("spec") or {}).get("rates"))
    return Plan(winner, plans, document)


status_patch = status.patch_body
"""The merge-patch `status` body `status.write` sends: changed keys, null for dropped ones."""


class Reconciler:
    """Owns the election key; remembers a restart still owed after a failed attempt."""

    controller = CONTROLLER

    def __init__(
        self,
        client: lightkube.AsyncClient,
        settings: config.Settings,
        books: Mapping[Any, dict[str, Any]],
    ) -> None:
        self.client = client
        self.settings = settings
        self.books = books
        self._restart_owed = False

    async def reconcile(self, key: tuple[str, str, str]) -> float | None:
        del key
        now = dt.datetime.now(dt.UTC)
        pool = list(self.books.values())
        decided = plan(pool, now)
        by_key = {_key(b): b for b in pool}
        for bp in decided.books:
            if not bp.changed:
                continue
            book = by_key[(bp.namespace, bp.name)]
            await status.write(self.client, resources.PriceBook, book, bp.status)
            for type_, reason, message in bp.events:
                await events.record(self.client, book, type_, reason, message)
        if decided.document is None or decided.winner is None:
            return None
        if await self._write_document(decided.document):
            self._restart_owed = True
        if self._restart_owed:
            restarted = await opencost_restart.restart(self.client, self.settings, "pricebook")
            self._restart_owed = False
            if restarted:
                winner_book = by_key[decided.winner]
                await events.record(
                    self.client,
                    winner_book,
                    events.NORMAL,
                    reasons.EventReason.OPENCOST_RESTARTED,
                    f"Pricing document changed; restarted deployment "
                    f"{self.settings.opencost_namespace}/{self.settings.opencost_deployment_name}",
                )
        return None

    async def _write_document(self, document: Mapping[str, str]) -> bool:
        """Create-or-patch the ConfigMap; True when its content changed."""
        text = opencost_document.serialize(document)
        ns = self.settings.opencost_namespace
        name = opencost_document.CONFIGMAP_NAME
        current = await kube_client.get_or_none(self.client, kube_client.ConfigMap, name, ns)
        if current is None:
            await kube_client.create(
                self.client,
                kube_client.ConfigMap,
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": ns, "labels": dict(MANAGED_BY)},
                    "data": {opencost_document.DOCUMENT_KEY: text},
                },
            )
            log.info("created pricing ConfigMap", extra={"configmap": f"{ns}/{name}"})
            return True
        if (current.get("data") or {}).get(opencost_document.DOCUMENT_KEY) == text:
            return False
        await kube_client.merge_patch(
            self.client,
            kube_client.ConfigMap,
            name,
            {
                "metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
                "data": {opencost_document.DOCUMENT_KEY: text},
            },
            namespace=ns,
        )
        log.info("updated pricing ConfigMap", extra={"configmap": f"{ns}/{name}"})
        return True
