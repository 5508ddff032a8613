"""Builders mirroring kube-scheduler's test helpers (st.MakePod / st.MakeNode / makeNode)."""

from __future__ import annotations

import itertools

from esched.core import ClusterState, Placer
from esched.core.profile import parse_profile
from support.fold import EV, envelope

_n = itertools.count()


def make_pod(*reqs: dict, node: str | None = None, containers: int = 0) -> dict:
    """st.MakePod(): ``.Req(r)`` adds a container requesting r; ``.Container(c)`` one without."""
    spec: dict = {
        "containers": [
            {"name": f"c{i}", "resources": {"requests": dict(r)}} for i, r in enumerate(reqs)
        ]
    }
    spec["containers"] += [{"name": f"e{i}"} for i in range(containers)]
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": f"pod-{next(_n)}", "namespace": "t"}, "spec": spec}


def make_node(name: str, capacity: dict) -> dict:
    """st.MakeNode().Capacity(c) (allocatable = capacity)."""
    return {"metadata": {"name": name}, "status": {"capacity": dict(capacity)}}


def milli_node(name: str, milli_cpu: int, memory: int, scalars: dict | None = None) -> dict:
    """kube's makeNode(name, milliCPU, memory, extended) from test_util.go."""
    cap = {"cpu": f"{milli_cpu}m", "memory": str(memory), "pods": "32"}
    cap.update({k: str(v) for k, v in (scalars or {}).items()})
    return make_node(name, cap)


def fit_profile(
    strategy: str, resources=None, shape=None, balanced=False, percentage: int | None = None
) -> dict:
    """A profile of one NodeResourcesFit strategy (or BalancedAllocation) and nothing else;
    ``percentage`` sets percentageOfNodesToScore (100: score every node)."""
    args: dict = {"scoringStrategy": {"type": strategy}}
    if resources is not None:
        args["scoringStrategy"]["resources"] = resources
    if shape is not None:
        args["scoringStrategy"]["requestedToCapacityRatio"] = {"shape": shape}
    enabled = [{"name": "NodeResourcesBalancedAllocation" if balanced else "NodeResourcesFit"}]
    profile: dict = {
        "plugins": {"score": {"disabled": [{"name": "*"}], "enabled": enabled}},
        "pluginConfig": [{"name": "NodeResourcesFit", "args": args}],
    }
    if percentage is not None:
        profile["percentageOfNodesToScore"] = percentage
    return {"profiles": [profile]}


def fit_and_balanced_profile(
    strategy: str, order, fit_weight: int, bal_weight: int, rw, extra: tuple = ()
) -> dict:
    """NodeResourcesFit (``strategy``, resources in ``order`` with weights ``rw``) and
    BalancedAllocation over the same resources, weighted ``fit_weight`` and
    ``bal_weight``; ``extra`` score plugins (name, weight) after them."""
    res = [{"name": r, "weight": rw[r]} for r in order]
    enabled = [
        {"name": "NodeResourcesFit", "weight": fit_weight},
        {"name": "NodeResourcesBalancedAllocation", "weight": bal_weight},
    ] + [{"name": name, "weight": weight} for name, weight in extra]
    return {
        "profiles": [
            {
                "plugins": {"score": {"disabled": [{"name": "*"}], "enabled": enabled}},
                "pluginConfig": [
                    {
                        "name": "NodeResourcesFit",
                        "args": {"scoringStrategy": {"type": strategy, "resources": res}},
                    },
                    {
                        "name": "NodeResourcesBalancedAllocation",
                        "args": {"resources": [{"name": r, "weight": 1} for r in order]},
                    },
                ],
            }
        ]
    }


def balanced_profile(resources=None) -> dict:
    args = {"resources": resources} if resources else {}
    return {
        "profiles": [
            {
                "plugins": {
                    "score": {
                        "disabled": [{"name": "*"}],
                        "enabled": [{"name": "NodeResourcesBalancedAllocation"}],
                    }
                },
                "pluginConfig": [{"name": "NodeResourcesBalancedAllocation", "args": args}],
            }
        ]
    }


def scores(profile_doc: dict, pod: dict, nodes: list[dict], existing: list[dict]) -> list[int]:
    """Score ``pod`` on every node the way kube's Score() does (feasibility not applied)."""
    state = ClusterState()
    events = [envelope(EV.NODE_ADDED, n) for n in nodes]
    events += [envelope(EV.POD_SUBMITTED, p) for p in existing]
    state.apply_many(enumerate(events, 1))
    placer = Placer(state, parse_profile(profile_doc))
    out = []
    for n in nodes:
        (score,) = placer.scores(pod, n["metadata"]["name"]).values()
        out.append(score)
    return out
