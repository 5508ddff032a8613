"""The inter-pod index follows the live cluster, not its history.

Pods come and go with ever new label values (``pod-template-hash``, job names): a
label set no pod holds is released with its memoized terms, and so is a matcher only
such label sets' terms held, with its counts arrays; an equivalence class whose
constraints name a run is released with the run's last pod. What is left is bounded by
the live pods, and placements are those of a state folded from only the live pods.
"""

from __future__ import annotations

from typing import Any

from esched.core import ClusterState, Placer
from support.fold import EV, Log, commit, node, pod

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
RES = {"cpu": 10, "memory": 1 << 20, "pods": 1}


def _pod(name: str, labels: dict, kind: int) -> dict:
    """A churned pod of one of four kinds: plain labels; a ReplicaSet's (default spread
    constraints over its labels); anti-affinity to its own run by host (the selector
    from matchLabelKeys); a zone spread constraint over its own run."""
    spec: dict[str, Any] = {}
    if kind == 2:
        spec["affinity"] = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {}, "topologyKey": HOST, "matchLabelKeys": ["run"]}
                ]
            }
        }
    elif kind == 3:
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": ZONE,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"run": labels["run"]}},
            }
        ]
    p = pod(name, cpu="10m", memory="1Mi", namespace="default", **spec)
    p["metadata"]["labels"] = dict(labels)
    if kind == 1:
        p["metadata"]["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "controller": True}
        ]
    return p


def _steady() -> list[dict]:
    """Long-lived pods the churn runs beside: host anti-affinity replicas, an affine
    pod, a zone-spread pod."""
    web = {"app": "web"}
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": web}, "topologyKey": HOST}
            ]
        }
    }
    aff = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": web}, "topologyKey": ZONE}
            ]
        }
    }
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": ZONE,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "db"}},
        }
    ]
    out = []
    for i in range(2):
        p = pod(f"web{i}", cpu="10m", memory="1Mi", namespace="default", affinity=anti)
        p["metadata"]["labels"] = dict(web)
        out.append(p)
    p = pod("cache", cpu="10m", memory="1Mi", namespace="default", affinity=aff)
    p["metadata"]["labels"] = {"app": "cache"}
    out.append(p)
    p = pod("db", cpu="10m", memory="1Mi", namespace="default", topologySpreadConstraints=spread)
    p["metadata"]["labels"] = {"app": "db"}
    out.append(p)
    return out


def _cluster() -> tuple[ClusterState, Log]:
    st = ClusterState()
    log = Log(st)
    for i in range(4):
        log(EV.NODE_ADDED, node(f"n{i}", labels={HOST: f"n{i}", ZONE: f"z{i % 2}"}))
    return st, log


def _place(st: ClusterState, log: Log, manifest: dict) -> str | None:
    # Submitted, placed by key (as a replica does), bound by a commit.
    log(EV.POD_SUBMITTED, manifest)
    key = f"default/{manifest['metadata']['name']}"
    got = Placer(st).place(key, assume=False)
    if got is not None:
        log(EV.PLACEMENT_COMMITTED, commit((key, got[0], RES)))
    return None if got is None else got[0]


def _probes() -> list[dict]:
    # Pods of every kind, whose placements and per-node fits the two states must agree on.
    out = [_pod(f"probe{k}", {"run": "live-7", "app": "web"}, k) for k in range(4)]
    out += _steady()
    for p in out:
        p["metadata"]["name"] = "probe-" + p["metadata"]["name"]
    return out


def _decisions(st: ClusterState) -> list:
    placer = Placer(st)
    out = []
    for p in _probes():
        out.append(placer.place(p, assume=False))
        out.append([placer.fits(p, f"n{i}") for i in range(4)])
    return out


def test_label_sets_and_matchers_stay_bounded_by_the_live_pods_under_churn() -> None:
    st, log = _cluster()
    for p in _steady():
        _place(st, log, p)
    live: list[dict] = []  # the churned pods alive, oldest first
    window = 12
    peak: dict[str, int] = {}
    for i in range(1500):
        kind = i % 4
        labels = {"run": f"run-{i}", "app": "batch"}
        if kind == 1:
            labels["pod-template-hash"] = f"h{i}"
        p = _pod(f"c{i}", labels, kind)
        _place(st, log, p)
        live.append(p)
        if len(live) > window:
            gone = live.pop(0)
            # every other one finishes first: a terminal pod is deleted later too
            if i % 2:
                log(EV.POD_SUCCEEDED, {"metadata": gone["metadata"]})
            log(EV.POD_DELETED, {"metadata": gone["metadata"]})
        for k, v in st.interpod.sizes().items():
            peak[k] = max(peak.get(k, 0), v)
        peak["classes"] = max(peak.get("classes", 0), len(st.class_index))
    pods = len(_steady()) + window + 1
    sizes = st.interpod.sizes()
    # one label set per live pod at most (the steady ones share none here), with
    # their matchers and arrays; the ids the most that were ever live at once
    assert sizes["label_sets"] <= pods, sizes
    assert peak["label_set_ids"] <= pods + 1, peak
    assert peak["matcher_ids"] <= 3 * pods, peak
    assert peak["arrays"] <= 12 * pods, peak
    assert peak["label_pairs"] <= 3 * pods, peak
    assert peak["memo"] <= pods, peak
    # a class per live run at most (the zone-spread pods' selector names their run),
    # and the ids the most that were ever held at once (the probes' classes besides)
    assert peak["classes"] <= pods, peak
    assert st.n_classes <= pods + 1, st.n_classes

    # The same placements as a state folded from only the live pods, bound where they are.
    fresh, flog = _cluster()
    for p in _steady() + live:
        key = f"default/{p['metadata']['name']}"
        bound = dict(
            p, spec=dict(p["spec"], nodeName=st.node_names[st.pod_node_np[st.pod_index[key]]])
        )
        flog(EV.POD_SUBMITTED, bound)
    assert _decisions(st) == _decisions(fresh)

    # A snapshot keeps the held label sets only, and reads back the same.
    back = ClusterState.from_bytes(st.to_bytes())
    assert back.interpod.sizes()["label_sets"] == sizes["label_sets"]
    assert back.to_bytes() == st.to_bytes()
    assert _decisions(back) == _decisions(st)


def test_a_replaced_pod_releases_its_old_label_set_and_a_released_id_is_reused() -> None:
    st, log = _cluster()
    _place(st, log, _pod("a", {"run": "one"}, 0))
    first = st.interpod.pod_lset_of(st.pod_index["default/a"])
    log(EV.POD_SUCCEEDED, {"metadata": {"name": "a", "namespace": "default"}})
    # a terminal pod of the same name is replaced by the new submit
    log(EV.POD_SUBMITTED, _pod("a", {"run": "two"}, 0))
    assert st.interpod.lsets[first] is None or st.interpod.lsets[first][1] == {"run": "two"}
    assert st.interpod.sizes()["label_sets"] == 1
    log(EV.POD_DELETED, {"metadata": {"name": "a", "namespace": "default"}})
    assert st.interpod.sizes()["label_sets"] == 0
    log(EV.POD_SUBMITTED, _pod("b", {"run": "three"}, 0))
    assert st.interpod.pod_lset_of(st.pod_index["default/b"]) == first
