"""Scheduling profiles, read from kube-scheduler's own ``KubeSchedulerConfiguration`` (v1).

An operator brings the file they already have: ``profiles[].plugins.score`` (and
``multiPoint``) ``enabled``/``disabled`` with weights, ``pluginConfig[].args`` and
``percentageOfNodesToScore`` (global or per profile). ``NodeResourcesFit``
(``scoringStrategy.type`` LeastAllocated / MostAllocated / RequestedToCapacityRatio
with ``shape`` and ``resources``) and ``NodeResourcesBalancedAllocation`` mean what
they mean in kube-scheduler v1.30. esched adds ``EPVM``, ``Mixed``, ``FGD`` and
``NodeGroupAffinity`` in the same structure. Arguments are validated here, so the Cython
placer sees only clean numbers.

``NodeGroupAffinity`` scores the preferred node groups of the pod's queue (Volcano):
100 on a node in one of them, 0 elsewhere, like a preferred term of kube's NodeAffinity
(default weight 2). It is in every profile with weight 2 unless the profile disables it
by name (``disabled: [{name: NodeGroupAffinity}]``; ``"*"`` does not remove it) or
enables it with another weight. Classes without preferred groups skip it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "DEFAULT_PROFILE",
    "IGNORED_KUBE_PLUGINS",
    "NODE_GROUP_AFFINITY",
    "PluginConfig",
    "Profile",
    "ProfileError",
    "load_profile",
    "parse_profile",
    "register_python_plugin",
]

#: kube's default resources for the Fit strategies and BalancedAllocation.
DEFAULT_RESOURCES = (("cpu", 1), ("memory", 1))
#: kube-scheduler plugins with no resource meaning: accepted in a profile and ignored
#: for scoring (their filtering, where esched does it, is built into feasibility).
IGNORED_KUBE_PLUGINS = frozenset(
    {
        "TaintToleration",
        "NodeAffinity",
        "ImageLocality",
        "InterPodAffinity",
        "PodTopologySpread",
        "VolumeBinding",
        "NodePorts",
        "NodeName",
        "NodeUnschedulable",
        "VolumeRestrictions",
        "VolumeZone",
        "NodeVolumeLimits",
        "DefaultPreemption",
        "PrioritySort",
        "DefaultBinder",
        "SchedulingGates",
        "DynamicResources",
        "EBSLimits",
        "GCEPDLimits",
        "AzureDiskLimits",
    }
)
_STRATEGIES = {"LeastAllocated", "MostAllocated", "RequestedToCapacityRatio"}
# Python plugins: name -> callable(state, node_index, class_id) -> int in 0..100.
_PYTHON_PLUGINS: dict[str, Callable[[Any, int, int], int]] = {}


class ProfileError(ValueError):
    """A profile file or plugin argument that esched cannot use; ``field`` says where."""

    def __init__(self, field_path: str, reason: str) -> None:
        self.field = field_path
        super().__init__(f"{field_path}: {reason}")


@dataclass(frozen=True)
class PluginConfig:
    """One enabled score plugin, resolved: kind, weight and validated arguments.

    ``kind`` is one of LeastAllocated, MostAllocated, RequestedToCapacityRatio,
    BalancedAllocation, EPVM, Mixed, FGD, NodeGroupAffinity, Python. ``name`` is the
    profile's plugin name.
    FGD is scored outside the placer (it needs per-device GPU state): see
    :meth:`esched.core.Placer.place` (``extra``) and :mod:`esched.core._devices`.
    """

    name: str
    kind: str
    weight: int
    resources: tuple[tuple[str, int], ...] = DEFAULT_RESOURCES
    shape: tuple[tuple[int, int], ...] = ()
    epvm_base: float = 0.0
    prod_priority: int = 0
    exhaust_permille: int = 0
    strand_permille: int = 0


@dataclass(frozen=True)
class Profile:
    """A resolved profile: score plugins in order and the sampling percentage.

    ``percentage_of_nodes_to_score`` None (or 0 in the file) means kube's adaptive rule.
    """

    name: str = "default-scheduler"
    plugins: tuple[PluginConfig, ...] = ()
    percentage_of_nodes_to_score: int | None = None
    ignored: tuple[str, ...] = field(default=())


def register_python_plugin(name: str, fn: Callable[[Any, int, int], int]) -> None:
    """Make ``name`` usable in profiles: ``fn(state, node_index, class_id) -> 0..100``.

    Python plugins run on a declared-slow path (the GIL is held for every node scored).
    """
    _PYTHON_PLUGINS[name] = fn


def python_plugin(name: str) -> Callable[[Any, int, int], int]:
    """The callable registered under ``name`` (KeyError if none)."""
    return _PYTHON_PLUGINS[name]


def _resources(raw: Any, where: str) -> tuple[tuple[str, int], ...]:
    if raw is None:
        return DEFAULT_RESOURCES
    if not isinstance(raw, list) or not raw:
        raise ProfileError(where, "must be a non-empty list of {name, weight}")
    out = []
    for i, r in enumerate(raw):
        if not isinstance(r, dict) or not r.get("name"):
            raise ProfileError(f"{where}[{i}].name", "required")
        w = r.get("weight", 1)
        # kube: 1 <= weight <= MaxNodeScore (validation_pluginargs.go).
        if not isinstance(w, int) or not 1 <= w <= 100:
            raise ProfileError(f"{where}[{i}].weight", "must be an integer in 1..100")
        out.append((str(r["name"]), w))
    if len(out) > 8:
        raise ProfileError(where, "at most 8 resources per plugin")
    return tuple(out)


def _shape(raw: Any, where: str) -> tuple[tuple[int, int], ...]:
    if not isinstance(raw, list) or not raw:
        raise ProfileError(where, "must be a non-empty list of {utilization, score}")
    if len(raw) > 16:
        raise ProfileError(where, "at most 16 points")
    pts: list[tuple[int, int]] = []
    for i, p in enumerate(raw):
        u, s = p.get("utilization"), p.get("score")
        if not isinstance(u, int) or not 0 <= u <= 100:
            raise ProfileError(f"{where}[{i}].utilization", "must be an integer in 0..100")
        if not isinstance(s, int) or not 0 <= s <= 10:
            raise ProfileError(f"{where}[{i}].score", "must be an integer in 0..10")
        if pts and u <= pts[-1][0]:
            raise ProfileError(f"{where}[{i}].utilization", "must be strictly increasing")
        pts.append((u, s))
    return tuple(pts)


def _plugin(name: str, weight: int, args: dict[str, Any], where: str) -> PluginConfig:
    if name == "NodeResourcesFit":
        strategy = args.get("scoringStrategy") or {}
        kind = strategy.get("type") or "LeastAllocated"
        if kind not in _STRATEGIES:
            raise ProfileError(f"{where}.scoringStrategy.type", f"unknown strategy {kind!r}")
        resources = _resources(strategy.get("resources"), f"{where}.scoringStrategy.resources")
        shape: tuple[tuple[int, int], ...] = ()
        if kind == "RequestedToCapacityRatio":
            rtcr = strategy.get("requestedToCapacityRatio") or {}
            shape = _shape(
                rtcr.get("shape"), f"{where}.scoringStrategy.requestedToCapacityRatio.shape"
            )
        return PluginConfig(name, kind, weight, resources, shape)
    if name == "NodeResourcesBalancedAllocation":
        return PluginConfig(
            name,
            "BalancedAllocation",
            weight,
            _resources(args.get("resources"), f"{where}.resources"),
        )
    if name == "EPVM":
        base = float(args.get("base", 16.0))
        if not base > 1.0:
            raise ProfileError(f"{where}.base", "must be > 1")
        return PluginConfig(
            name,
            "EPVM",
            weight,
            _resources(args.get("resources"), f"{where}.resources"),
            epvm_base=base,
        )
    if name == "Mixed":
        prod = args.get("productionPriority", 1000)
        exhaust = args.get("exhaustedPercent", 5)
        strand = args.get("strandingPenaltyPercent", 100)
        for key, v in (("exhaustedPercent", exhaust), ("strandingPenaltyPercent", strand)):
            if not isinstance(v, int) or not 0 <= v <= 100:
                raise ProfileError(f"{where}.{key}", "must be an integer in 0..100")
        if not isinstance(prod, int):
            raise ProfileError(f"{where}.productionPriority", "must be an integer")
        return PluginConfig(
            name,
            "Mixed",
            weight,
            _resources(args.get("resources"), f"{where}.resources"),
            prod_priority=prod,
            exhaust_permille=exhaust * 10,
            strand_permille=strand * 10,
        )
    if name == "FGD":
        # Fragmentation gradient descent (Weng et al., ATC '23): scored outside the placer
        # from per-device state (esched.core._devices.DeviceTable.fgd_scores); the target
        # workload is the one the caller sets (the simulator: the trace's pod types).
        unknown = set(args) - {"resources"}
        if unknown:
            raise ProfileError(where, f"FGD takes no arguments (got {sorted(unknown)})")
        return PluginConfig(name, "FGD", weight, ())
    if name == NODE_GROUP_AFFINITY:
        if args:
            raise ProfileError(where, f"{name} takes no arguments (got {sorted(args)})")
        return PluginConfig(name, NODE_GROUP_AFFINITY, weight, ())
    if name in _PYTHON_PLUGINS:
        return PluginConfig(name, "Python", weight, ())
    raise ProfileError(where, f"unknown score plugin {name!r}")


DEFAULT_SCORE = (("NodeResourcesFit", 1), ("NodeResourcesBalancedAllocation", 1))
#: The queue's preferred node groups, scored in every profile unless disabled by name.
NODE_GROUP_AFFINITY = "NodeGroupAffinity"
NODE_GROUP_AFFINITY_WEIGHT = 2


def parse_profile(doc: dict[str, Any] | None, name: str | None = None) -> Profile:
    """Resolve one profile (``name``, else the first) of a KubeSchedulerConfiguration dict."""
    doc = doc or {}
    kind = doc.get("kind", "KubeSchedulerConfiguration")
    if kind != "KubeSchedulerConfiguration":
        raise ProfileError("kind", f"expected KubeSchedulerConfiguration, got {kind!r}")
    profiles = doc.get("profiles") or [{}]
    idx = 0
    if name is not None:
        names = [p.get("schedulerName", "default-scheduler") for p in profiles]
        if name not in names:
            raise ProfileError("profiles", f"no profile named {name!r} (have {names})")
        idx = names.index(name)
    prof = profiles[idx] or {}
    where = f"profiles[{idx}]"
    plugins = prof.get("plugins") or {}
    enabled: list[tuple[str, int]] = []
    disabled: set[str] = set()
    for point in ("multiPoint", "score"):
        section = plugins.get(point) or {}
        disabled |= {d.get("name") for d in section.get("disabled") or ()}
        for e in section.get("enabled") or ():
            w = e.get("weight") or 1  # kube: 0 means the default weight, 1
            if not isinstance(w, int) or w < 0:
                raise ProfileError(f"{where}.plugins.{point}.enabled", "weight must be >= 0")
            enabled = [x for x in enabled if x[0] != e.get("name")] + [(e.get("name"), w)]
    chosen = [] if "*" in disabled else [d for d in DEFAULT_SCORE if d[0] not in disabled]
    for name_w in enabled:
        chosen = [c for c in chosen if c[0] != name_w[0]] + [name_w]
    if NODE_GROUP_AFFINITY not in disabled and all(c[0] != NODE_GROUP_AFFINITY for c in chosen):
        chosen.append((NODE_GROUP_AFFINITY, NODE_GROUP_AFFINITY_WEIGHT))
    args = {c.get("name"): c.get("args") or {} for c in prof.get("pluginConfig") or ()}
    resolved, ignored = [], []
    for i, (pname, weight) in enumerate(chosen):
        if pname in IGNORED_KUBE_PLUGINS:
            ignored.append(pname)
            continue
        resolved.append(
            _plugin(
                pname,
                weight,
                args.get(pname, {}),
                f"{where}.pluginConfig[{pname}]"
                if pname in args
                else f"{where}.plugins.score.enabled[{i}]",
            )
        )
    pct = prof.get("percentageOfNodesToScore", doc.get("percentageOfNodesToScore"))
    if pct is not None and (not isinstance(pct, int) or not 0 <= pct <= 100):
        raise ProfileError("percentageOfNodesToScore", "must be an integer in 0..100")
    return Profile(
        name=prof.get("schedulerName", "default-scheduler"),
        plugins=tuple(resolved),
        percentage_of_nodes_to_score=pct or None,
        ignored=tuple(ignored),
    )


def load_profile(path: str | Path, name: str | None = None) -> Profile:
    """Read a KubeSchedulerConfiguration YAML/JSON file and resolve one profile."""
    with open(path, encoding="utf-8") as fh:
        doc = yaml.safe_load(fh)
    return parse_profile(doc, name)


#: kube-scheduler's default resource scoring: Fit(LeastAllocated) + BalancedAllocation.
DEFAULT_PROFILE = parse_profile({})
