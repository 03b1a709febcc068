"""PriceBook reconciler: readiness per book, one cluster-wide election, OpenCost's document.

Checklist per pass (one queue key for the whole cluster, because the election is global):
1. observe every PriceBook (from the watch cache);
2. decide (pure, `finops.provisioning.pricebooks.plan`): each book's readiness, the winner,
   each book's status, the document;
3. write: status patches only where something changed (with resourceVersion preconditions),
   Events on activation/demotion, the ConfigMap create-or-patch, and a restart of OpenCost
   only when the document's content changed. An unready winner leaves the last good
   document in place.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping

import lightkube
from lightkube.resources import core_v1

from finops.api import bodies, reasons
from finops.controller import config, opencost_restart
from finops.kube import client as kube_client
from finops.kube import events, resources, status, watch
from finops.pricing import opencost_document
from finops.provisioning import pricebooks

log = logging.getLogger(__name__)

CONTROLLER = "pricebook-controller"
KEY = ("PriceBook", "", "*")
"""The single work-queue key: every PriceBook event enqueues the whole election."""

MANAGED_BY = {"app.kubernetes.io/managed-by": "finops-operator"}


class PriceBookReconciler:
    """Owns the election key; remembers a restart still owed after a failed attempt."""

    controller = CONTROLLER

    def __init__(
        self,
        client: lightkube.AsyncClient,
        settings: config.ControllerSettings,
        books: Mapping[tuple[str, str], bodies.PriceBookBody],
    ) -> None:
        self.client = client
        self.settings = settings
        self.books = books
        self._restart_owed = False

    async def reconcile(self, key: tuple[str, str, str]) -> float | None:
        del key
        now = dt.datetime.now(dt.UTC)
        pool = list(self.books.values())
        decided = pricebooks.plan(pool, now)
        by_key = {watch.object_key(b): b for b in pool}
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
        current = await kube_client.get_or_none(self.client, core_v1.ConfigMap, name, ns)
        if current is None:
            await kube_client.create(
                self.client,
                core_v1.ConfigMap,
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
            core_v1.ConfigMap,
            name,
            {
                "metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
                "data": {opencost_document.DOCUMENT_KEY: text},
            },
            namespace=ns,
        )
        log.info("updated pricing ConfigMap", extra={"configmap": f"{ns}/{name}"})
        return True
