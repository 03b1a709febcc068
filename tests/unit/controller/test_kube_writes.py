"""The request bodies behind our writes: status merge patches, finalizer JSON patches, GETs."""

from __future__ import annotations

from finops.kube import finalizers, status, targets

F = "subscriptions.finops.stakater.com/finalizer"


class TestStatusPatch:
    def test_only_changed_keys_travel_and_dropped_keys_are_nulled(self) -> None:
        current = {"ready": "False", "costs": [1], "resolvedPricing": {"a": 1}}
        desired = {"ready": "True", "costs": [1], "activatedAt": "t"}
        body = status.patch_body(current, desired)
        assert body == {"ready": "True", "activatedAt": "t", "resolvedPricing": None}

    def test_a_guarded_change_leaves_the_status_when_its_guard_holds(self) -> None:
        guarded = status.unless(
            lambda obj: status.status_of(obj).get("costs") == ["ledger"],
            [status.set_fields({"costs": ["fees"]}), status.set_fields({"ready": "True"})],
        )
        kept = {"status": {"costs": ["ledger"], "ready": "False"}}
        assert guarded(kept) == kept["status"]
        replaced = {"status": {"costs": ["old"], "ready": "False"}}
        assert guarded(replaced) == {"costs": ["fees"], "ready": "True"}


class TestFinalizerPatches:
    def test_adding_tests_the_resource_version_and_creates_the_list_when_absent(self) -> None:
        ops = finalizers.add_ops({"metadata": {"resourceVersion": "7"}}, F)
        assert ops == [
            {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
            {"op": "add", "path": "/metadata/finalizers", "value": [F]},
        ]

    def test_adding_appends_to_someone_elses_list_and_is_a_no_op_when_present(self) -> None:
        obj = {"metadata": {"resourceVersion": "7", "finalizers": ["other"]}}
        assert finalizers.add_ops(obj, F)[1] == {  # type: ignore[index]
            "op": "add",
            "path": "/metadata/finalizers/-",
            "value": F,
        }
        assert finalizers.add_ops({"metadata": {"finalizers": [F]}}, F) is None

    def test_removing_tests_the_entry_at_its_index(self) -> None:
        obj = {"metadata": {"resourceVersion": "9", "finalizers": ["other", F]}}
        assert finalizers.remove_ops(obj, F) == [
            {"op": "test", "path": "/metadata/resourceVersion", "value": "9"},
            {"op": "test", "path": "/metadata/finalizers/1", "value": F},
            {"op": "remove", "path": "/metadata/finalizers/1"},
        ]
        assert finalizers.remove_ops({"metadata": {}}, F) is None


DISCOVERY = {
    "resources": [
        {"name": "pods/status", "kind": "Pod", "namespaced": True},
        {"name": "pods", "kind": "Pod", "namespaced": True},
        {"name": "namespaces", "kind": "Namespace", "namespaced": False},
    ]
}


class TestTargetPaths:
    def test_discovery_finds_the_top_level_resource_of_a_kind(self) -> None:
        assert targets.find_kind(DISCOVERY, "Pod") == targets.ResourceName("pods", True)
        assert targets.find_kind(DISCOVERY, "Secret") is None

    def test_paths_for_core_grouped_namespaced_and_cluster_scoped_kinds(self) -> None:
        pods = targets.ResourceName("pods", True)
        nss = targets.ResourceName("namespaces", False)
        assert targets.object_path("v1", pods, "p", "", "home") == (
            "/api/v1/namespaces/home/pods/p"
        )
        assert targets.object_path(
            "apps/v1", targets.ResourceName("deployments", True), "d", "x", "h"
        ) == ("/apis/apps/v1/namespaces/x/deployments/d")
        assert (
            targets.object_path("v1", nss, "team-a", "ignored", "h") == "/api/v1/namespaces/team-a"
        )
