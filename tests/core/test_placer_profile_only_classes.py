"""A class whose constraints name only its scheduler shares the compiled form of the
unconstrained classes when that scheduler is the first profile's (every pod of a
Volcano Job names ``volcano``, and each one-pod Job's pod is a class of its own), and
is compiled with its own profile's addedAffinity otherwise: the commit service's
verdicts must be those of the profile each pod's scheduler selects, in any order the
classes are first checked."""

from __future__ import annotations

import itertools

import pytest

from esched.core import ClusterState
from esched.core.profile import API_VERSION, parse_profile
from esched.core.validation import Validator
from support.fold import EV, Log, node, pod


def _in_zone(zone: str) -> dict:
    return {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": [zone]}]}
            ]
        }
    }


def _profile(name: str, zone: str) -> dict:
    return {
        "schedulerName": name,
        "pluginConfig": [{"name": "NodeAffinity", "args": {"addedAffinity": _in_zone(zone)}}],
    }


# pod -> (its schedulerName, the zone its profile's addedAffinity requires)
PODS = {
    "plain": (None, "a"),  # no constraints: the first profile
    "named": ("default-scheduler", "a"),  # the first profile, named
    "named-2": ("default-scheduler", "a"),  # the same, another class (other requests)
    "zone-b": ("zone-b", "b"),  # the second profile
}


@pytest.mark.parametrize("order", list(itertools.permutations(PODS)))
def test_scheduler_only_classes_are_checked_under_their_own_profile(order: tuple) -> None:
    st = ClusterState()
    log = Log(st)
    for name, zone in (("a1", "a"), ("b1", "b")):
        log(EV.NODE_ADDED, node(name, labels={"zone": zone}))
    for i, (name, (scheduler, _zone)) in enumerate(PODS.items()):
        p = pod(name, cpu=f"{100 + i}m")
        if scheduler:
            p["spec"]["schedulerName"] = scheduler
        log(EV.POD_SUBMITTED, p)
    assert len({st.class_of(st.pod_index[f"ns/{name}"]) for name in PODS}) == len(PODS)
    profile = parse_profile(
        {
            "apiVersion": API_VERSION,
            "kind": "KubeSchedulerConfiguration",
            "profiles": [_profile("default-scheduler", "a"), _profile("zone-b", "b")],
        }
    )
    validator = Validator(st, profile=profile)

    def fits(name: str, where: str) -> bool:
        cid = st.class_of(st.pod_index[f"ns/{name}"])
        binding = {"pod": f"ns/{name}", "node": where, "resources": st.class_specs[cid]["requests"]}
        data = {
            "proposal": f"{name}-{where}",
            "replica": "r",
            "position": st.position,
            "gang": None,
            "bindings": [binding],
        }
        return validator.check(data, record=False).ok

    for name in order:
        zone = PODS[name][1]
        assert fits(name, f"{zone}1"), name
        assert not fits(name, "b1" if zone == "a" else "a1"), name
