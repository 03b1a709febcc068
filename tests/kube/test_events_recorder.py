"""The background Event recorder posts every Event it was given, in spite of a full queue or a
failed POST, by the time it is closed."""

from __future__ import annotations

import asyncio
from typing import Any

import lightkube
from lightkube.config.kubeconfig import KubeConfig
from tests.kube.test_controller_support import events_for

from finops.kube import events
from finops_devenv import controlplane


def involved(ns: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}"},
    }


def test_every_recorded_event_is_posted_by_close_and_a_failure_stops_nothing(
    kube: controlplane.ControlPlane, kube_namespace: str
) -> None:
    ns = kube_namespace

    async def go() -> None:
        client = lightkube.AsyncClient(config=KubeConfig.from_file(str(kube.kubeconfig)))
        recorder = events.Recorder(client, senders=3, capacity=4)  # most records wait
        try:
            await recorder.record(involved("no-such-namespace", "x"), "Normal", "Lost", "404")
            for i in range(40):
                await recorder.record(involved(ns, "cm"), "Normal", "Activated", f"m{i}")
            await recorder.close()
        finally:
            await client.close()

    asyncio.run(go())
    posted = [e for e in events_for(kube, ns, "cm") if e["reason"] == "Activated"]
    assert sorted(e["message"] for e in posted) == sorted(f"m{i}" for i in range(40))
    assert {e["involvedObject"]["uid"] for e in posted} == {"uid-cm"}
