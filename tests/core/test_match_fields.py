"""Required node affinity by ``matchFields metadata.name``, the form kube's daemon
controller gives every DaemonSet pod (pkg/controller/daemon/util/daemonset_util.go,
ReplaceDaemonSetPodNodeNameNodeAffinity): the pod fits its own node only, whether the
node arrives before or after the pod; ``NotIn`` keeps it off the named nodes; any other
field matches no node (kube's NodeSelectorRequirement for fields allows only
metadata.name)."""

from __future__ import annotations

from pathlib import Path

import pytest

from esched.core import ClusterState, Placer
from esched.core.schedule import PassConfig, SchedulingPass, Target
from esched.schemas.manifests import events_from_documents, load_documents
from support.fold import EV, Log, node, pod

CORPUS = Path(__file__).parents[1] / "schemas" / "manifests"


def by_field(op: str, *names: str, key: str = "metadata.name") -> dict:
    term = {"matchFields": [{"key": key, "operator": op, "values": list(names)}]}
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    }


def placed(st: ClusterState, *keys: str) -> dict[str, str | None]:
    out = SchedulingPass(st, Placer(st), PassConfig(preemption=False)).run(
        [Target("pod", k) for k in keys]
    )
    got: dict[str, str | None] = dict.fromkeys(keys)
    for p in out.placements:
        for key, node_name, _dev in p.bindings:
            got[key] = node_name
    return got


@pytest.mark.parametrize("node_first", [True, False])
def test_a_pod_fits_only_the_node_its_match_fields_name(node_first: bool) -> None:
    st = ClusterState()
    log = Log(st)
    if node_first:
        log(EV.NODE_ADDED, node("a"))
        log(EV.NODE_ADDED, node("b"))
    log(EV.POD_SUBMITTED, pod("on-b", affinity=by_field("In", "b")))
    log(EV.POD_SUBMITTED, pod("not-a", affinity=by_field("NotIn", "a")))
    log(EV.POD_SUBMITTED, pod("gone", affinity=by_field("In", "c")))
    log(EV.POD_SUBMITTED, pod("other", affinity=by_field("In", "a", key="spec.nodeName")))
    if not node_first:
        log(EV.NODE_ADDED, node("a"))
        log(EV.NODE_ADDED, node("b"))
    assert placed(st, "ns/on-b", "ns/not-a", "ns/gone", "ns/other") == {
        "ns/on-b": "b",
        "ns/not-a": "b",
        "ns/gone": None,
        "ns/other": None,
    }


def test_a_node_update_keeps_its_name_label() -> None:
    st = ClusterState()
    log = Log(st)
    log(EV.NODE_ADDED, node("a"))
    log(EV.POD_SUBMITTED, pod("on-a", affinity=by_field("In", "a")))
    log(EV.NODE_UPDATED, node("a", labels={"zone": "z1"}))
    assert placed(st, "ns/on-a") == {"ns/on-a": "a"}
    assert "field:metadata.name=a" not in str(st.node_labels)  # not a user-visible label


def test_a_daemonset_from_a_manifest_runs_one_pod_on_each_node_it_matches() -> None:
    st = ClusterState()
    docs = load_documents((CORPUS / "k8s-daemonset.yaml").read_text())
    for position, event in enumerate(events_from_documents(docs), 1):
        st.apply(event, position)
    keys = [k for k in st.pod_index if k.startswith("kube-system/")]
    assert sorted(placed(st, *keys).values()) == ["control-plane-1", "worker-1"]
