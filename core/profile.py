"""Scheduling profiles, read from kube-scheduler's own ``KubeSchedulerConfiguration`` (v1).

An operator brings the file they already have: ``profiles[].plugins.score`` (and
``multiPoint``) ``enabled``/``disabled`` with weights, ``pluginConfig[].args`` and
``percentageOfNodesToScore`` (global or per profile). ``NodeResourcesFit``
(``scoringStrategy.type`` LeastAllocated / MostAllocated / RequestedToCapacityRatio
with ``shape`` and ``resources``) and ``NodeResourcesBalancedAllocation`` mean what
they mean in kube-scheduler v1.30, and so do ``TaintToleration`` (PreferNoSchedule
taints), ``NodeAffinity`` (preferred terms, and ``args.addedAffinity``) and
``InterPodAffinity`` (preferred pod terms, ``hardPodAffinityWeight``) and
``PodTopologySpread`` (ScheduleAnyway constraints; ``defaultingType`` and
``defaultConstraints``: :attr:`Profile.spread_defaults`) as score plugins, with kube's
default weights 3, 2, 2 and 2. esched adds ``EPVM``, ``Mixed``, ``FGD``,
``PaperBestFit`` (the FGD paper's BestFit), ``NodeGroupAffinity`` and ``Usage``
(Volcano's ``usage``: measured load, with a filter above per-resource thresholds) in
the same structure. Arguments are validated here, so the Cython placer sees only clean numbers.

``NodeGroupAffinity`` scores the preferred node groups of the pod's queue (Volcano):
100 on a node in one of them, 0 elsewhere, like a preferred term of kube's NodeAffinity
(default weight 2). It is in every profile with weight 2 unless the profile disables it
by name (``disabled: [{name: NodeGroupAffinity}]``; ``"*"`` does not remove it) or
enables it with another weight. Classes without preferred groups skip it.

Several profiles: each pod is scheduled by the profile its ``spec.schedulerName`` names
(a pod naming none, or ``volcano``, by the profile named ``default-scheduler``, else the
first); a pod naming a scheduler no profile has is not esched's (Pending,
OtherScheduler). The resolved profiles travel together as :attr:`Profile.profiles`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "ALWAYS_ON_FILTERS",
    "API_VERSION",
    "DEFAULT_PROFILE",
    "IGNORED_KUBE_PLUGINS",
    "KUBE_PLUGINS",
    "NODE_GROUP_AFFINITY",
    "REMOVED_KUBE_PLUGINS",
    "USAGE",
    "USAGE_THRESHOLDS",
    "VOLCANO_SCHEDULER_NAME",
    "PluginConfig",
    "Profile",
    "ProfileError",
    "load_profile",
    "parse_profile",
    "register_python_plugin",
    "scheduler_names",
]

#: kube's default resources for the Fit strategies and BalancedAllocation.
DEFAULT_RESOURCES = (("cpu", 1), ("memory", 1))
#: kube-scheduler plugins with no resource meaning: accepted in a profile and ignored
#: for scoring (their filtering, where esched does it, is built into feasibility).
IGNORED_KUBE_PLUGINS = frozenset(
    {
        "ImageLocality",
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
    }
)
#: The KubeSchedulerConfiguration API version esched reads; others are refused.
API_VERSION = "kubescheduler.config.k8s.io/v1"
#: kube-scheduler's in-tree plugins of that version (pkg/scheduler/framework/plugins).
KUBE_PLUGINS = IGNORED_KUBE_PLUGINS | {
    "NodeResourcesFit",
    "NodeResourcesBalancedAllocation",
    "TaintToleration",
    "NodeAffinity",
    "InterPodAffinity",
    "PodTopologySpread",
}
#: Plugins kube removed (validation.go removedPluginsByVersion, and the in-tree cloud
#: volume limits removed in 1.31): refused by name, as kube-scheduler refuses them.
REMOVED_KUBE_PLUGINS = frozenset(
    {
        "NodeLabel",
        "ServiceAffinity",
        "NodePreferAvoidPods",
        "NodeResourcesLeastAllocated",
        "NodeResourcesMostAllocated",
        "RequestedToCapacityRatio",
        "SelectorSpread",
        "DefaultPodTopologySpread",
        "EBSLimits",
        "GCEPDLimits",
        "AzureDiskLimits",
        "CinderLimits",
    }
)
#: Filters (and the PreEnqueue gate) esched always applies: a profile disabling one
#: asks for placements esched would not make, so it is refused.
ALWAYS_ON_FILTERS = frozenset(
    {
        "NodeUnschedulable",
        "NodeName",
        "TaintToleration",
        "NodeAffinity",
        "NodePorts",
        "NodeResourcesFit",
        "SchedulingGates",
        "InterPodAffinity",
        "PodTopologySpread",
    }
)
#: Extension points where disabling a plugin turns its filtering off.
_FILTER_POINTS = ("multiPoint", "preEnqueue", "preFilter", "filter")
_EXTENSION_POINTS = frozenset(
    {
        "multiPoint",
        "preEnqueue",
        "queueSort",
        "preFilter",
        "filter",
        "postFilter",
        "preScore",
        "score",
        "reserve",
        "permit",
        "preBind",
        "bind",
        "postBind",
    }
)
#: Arguments of kube's plugins (their *Args types) that esched honours, or that act only
#: on pods esched refuses at ingest (so no pod it accepts is placed against them);
#: anything else in ``args`` is refused. ``apiVersion``/``kind`` name the args type.
_KUBE_ARGS: dict[str, frozenset[str]] = {
    "NodeResourcesFit": frozenset({"scoringStrategy"}),
    "NodeResourcesBalancedAllocation": frozenset({"resources"}),
    "NodeAffinity": frozenset({"addedAffinity"}),
    "InterPodAffinity": frozenset({"hardPodAffinityWeight", "ignorePreferredTermsOfExistingPods"}),
    # Pods with claims to bind are refused at ingest.
    "VolumeBinding": frozenset({"bindTimeoutSeconds", "shape"}),
    "DynamicResources": frozenset({"filterTimeout"}),
    "DefaultPreemption": frozenset(),
    "PodTopologySpread": frozenset({"defaultingType", "defaultConstraints"}),
}
#: Arguments esched does not honour, with why (refused rather than ignored).
_REFUSED_ARGS = {
    ("NodeResourcesFit", "ignoredResources"): "NodeResourcesFit ignoredResources is not "
    "honoured by esched (it filters on every requested resource)",
    ("NodeResourcesFit", "ignoredResourceGroups"): "NodeResourcesFit ignoredResourceGroups is "
    "not honoured by esched (it filters on every requested resource)",
    ("DefaultPreemption", "minCandidateNodesPercentage"): "DefaultPreemption "
    "minCandidateNodesPercentage is not honoured by esched (preemption considers every node)",
    ("DefaultPreemption", "minCandidateNodesAbsolute"): "DefaultPreemption "
    "minCandidateNodesAbsolute is not honoured by esched (preemption considers every node)",
}
#: kube's defaults of refused arguments: stating the default asks for nothing esched
#: does not do (an empty list likewise).
_NO_DEFAULT = object()
_KUBE_DEFAULTS: dict[tuple[str, str], Any] = {
    ("DefaultPreemption", "minCandidateNodesPercentage"): 10,
    ("DefaultPreemption", "minCandidateNodesAbsolute"): 100,
    ("NodeResourcesFit", "ignoredResources"): [],
    ("NodeResourcesFit", "ignoredResourceGroups"): [],
}
#: Top-level fields of a KubeSchedulerConfiguration; ``extenders`` must be empty.
_CONFIG_FIELDS = frozenset(
    {
        "apiVersion",
        "kind",
        "parallelism",
        "leaderElection",
        "clientConnection",
        "healthzBindAddress",
        "metricsBindAddress",
        "enableProfiling",
        "enableContentionProfiling",
        "percentageOfNodesToScore",
        "podInitialBackoffSeconds",
        "podMaxBackoffSeconds",
        "profiles",
        "extenders",
        "delayCacheUntilActive",
    }
)
_PROFILE_FIELDS = frozenset(
    {"schedulerName", "plugins", "pluginConfig", "percentageOfNodesToScore"}
)
#: The scheduler name Volcano's objects carry (``schedulerName: volcano``): esched
#: schedules them too, since it implements Volcano's queues and gangs.
VOLCANO_SCHEDULER_NAME = "volcano"
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
    BalancedAllocation, EPVM, Mixed, FGD, PaperBestFit, NodeGroupAffinity, NodeAffinity,
    TaintToleration, InterPodAffinity, PodTopologySpread, Usage, Python. ``name`` is the
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
    #: PaperBestFit: each resource's normaliser (the artifact's "max spec"), in order
    max_spec: tuple[int, ...] = ()
    #: FGD: among nodes of equal total, "random" (the pass's tie-break) or "pack" (the
    #: node with the least free GPU, then the least free CPU, first)
    fgd_ties: str = "random"
    #: InterPodAffinity: the weight of bound pods' required affinity terms the incoming
    #: pod matches (kube's hardPodAffinityWeight, default 1)
    hard_pod_affinity_weight: int = 1
    #: InterPodAffinity: skip bound pods' terms for a pod without preferred terms
    ignore_preferred_terms_of_existing_pods: bool = False
    #: Usage: per resource (in ``resources`` order) the percent of allocatable above
    #: which a node's measured usage filters it out; -1: no threshold on that resource
    thresholds: tuple[int, ...] = ()
    #: Usage: filter on the thresholds (Volcano's enablePredicate); else score only
    usage_filter: bool = False


@dataclass(frozen=True)
class Profile:
    """A resolved profile: score plugins in order and the sampling percentage.

    ``percentage_of_nodes_to_score`` None (or 0 in the file) means kube's adaptive rule.
    ``added_affinity``: NodeAffinity's ``args.addedAffinity`` (``{"required":
    NodeSelector, "preferred": [PreferredSchedulingTerm]}``), None without.
    ``siblings``: the other profiles of the same configuration (see :attr:`profiles`).
    """

    name: str = "default-scheduler"
    plugins: tuple[PluginConfig, ...] = ()
    percentage_of_nodes_to_score: int | None = None
    ignored: tuple[str, ...] = field(default=())
    added_affinity: dict[str, Any] | None = field(default=None, compare=False, hash=False)
    #: PodTopologySpread's default constraints, for pods without constraints of their
    #: own that have a controller (see :func:`_spread_defaults`): ``(topologyKey,
    #: maxSkew, whenUnsatisfiable, minDomains, nodeAffinityPolicy is Honor,
    #: nodeTaintsPolicy is Honor)`` each.
    spread_defaults: tuple[tuple[str, int, str, int, bool, bool], ...] = ()
    #: ``defaultingType: System``: kube's system defaults, under which nodes lacking a
    #: topology key are scored (kube's ``systemDefaulted``) rather than ignored.
    spread_system: bool = False
    siblings: tuple[Profile, ...] = field(default=(), compare=False, hash=False)

    @property
    def profiles(self) -> tuple[Profile, ...]:
        """Every profile esched runs with this one: itself (pods naming no scheduler),
        then its siblings, in the configuration's order."""
        return (self, *self.siblings)


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
    if name == "PaperBestFit":
        return _paper_best_fit(name, weight, args, where)
    if name == USAGE:
        return _usage(name, weight, args, where)
    if name == "FGD":
        # Fragmentation gradient descent (Weng et al., ATC '23): scored outside the placer
        # from per-device state (esched.core._devices.DeviceTable.fgd_scores); the target
        # workload is the one the caller sets (the simulator: the trace's pod types).
        unknown = set(args) - {"resources", "ties"}
        if unknown:
            raise ProfileError(where, f"FGD takes only ties (got {sorted(unknown)})")
        ties = args.get("ties", "random")
        if ties not in FGD_TIES:
            raise ProfileError(f"{where}.ties", f"must be one of {', '.join(FGD_TIES)}")
        return PluginConfig(name, "FGD", weight, (), fgd_ties=ties)
    if name == "PodTopologySpread":
        # (its arguments are the profile's: _spread_defaults reads them)
        return PluginConfig(name, name, weight, ())
    if name == "InterPodAffinity":
        # (arguments checked by _check_plugin_config: kube's ranges)
        return PluginConfig(
            name,
            name,
            weight,
            (),
            hard_pod_affinity_weight=int(args.get("hardPodAffinityWeight", 1)),
            ignore_preferred_terms_of_existing_pods=bool(
                args.get("ignorePreferredTermsOfExistingPods", False)
            ),
        )
    if name in ("NodeAffinity", "TaintToleration"):
        # (NodeAffinity's addedAffinity is the profile's: parse_profile reads it)
        return PluginConfig(name, name, weight, ())
    if name == NODE_GROUP_AFFINITY:
        if args:
            raise ProfileError(where, f"{name} takes no arguments (got {sorted(args)})")
        return PluginConfig(name, NODE_GROUP_AFFINITY, weight, ())
    if name in _PYTHON_PLUGINS:
        return PluginConfig(name, "Python", weight, ())
    raise ProfileError(where, f"unknown score plugin {name!r}")


#: FGD's ``ties`` values: "random" (the scheduler's tie-break) or "pack" (a secondary
#: key among equal FGD scores: least free GPU, then least free CPU).
FGD_TIES = ("random", "pack")
#: PaperBestFit's default resources and normalisers: the FGD artifact's (cpu milli over
#: 128 cores, milli-GPU over 8 GPUs; pkg/type/open-gpu-share/utils/const.go MaxSpec*).
PAPER_BEST_FIT_RESOURCES = (("cpu", 1), ("esched.dev/gpu-milli", 1))
PAPER_BEST_FIT_MAX_SPEC = {"cpu": 128_000, "esched.dev/gpu-milli": 8_000}


def _paper_best_fit(name: str, weight: int, args: dict[str, Any], where: str) -> PluginConfig:
    """The FGD paper's BestFit: ``resources`` ({name, weight, maxSpec}); ``maxSpec`` is
    required for a resource without a default in :data:`PAPER_BEST_FIT_MAX_SPEC`."""
    unknown = set(args) - {"resources"}
    if unknown:
        raise ProfileError(where, f"{name} takes only resources (got {sorted(unknown)})")
    raw = args.get("resources")
    resources = PAPER_BEST_FIT_RESOURCES if raw is None else _resources(raw, f"{where}.resources")
    spec = []
    for i, (rname, _) in enumerate(resources):
        given = raw[i].get("maxSpec") if raw is not None else None
        m = PAPER_BEST_FIT_MAX_SPEC.get(rname) if given is None else given
        if not isinstance(m, int) or m <= 0:
            raise ProfileError(f"{where}.resources[{i}].maxSpec", "must be a positive integer")
        spec.append(m)
    return PluginConfig(name, "PaperBestFit", weight, resources, max_spec=tuple(spec))


#: Usage's defaults, Volcano's (plugins/usage/usage.go New): cpu and memory weighted 1
#: each, a node filtered above 80% measured usage of either, the filter on.
USAGE = "Usage"
USAGE_THRESHOLDS = {"cpu": 80, "memory": 80}
#: Volcano's spellings of Usage's arguments, read as esched's (``mem``: memory).
_VOLCANO_RESOURCE = {"mem": "memory"}


def _usage(name: str, weight: int, args: dict[str, Any], where: str) -> PluginConfig:
    """Usage's arguments: ``resources`` ({name, weight}; Volcano's cpu.weight and
    memory.weight), ``thresholds`` ({resource: percent 0..100}; Volcano's, ``mem``
    accepted for memory; a resource without one is never filtered) and
    ``enablePredicate`` (Volcano's; default true). Volcano keeps its default for an
    argument out of range; esched refuses it, so a typo fails at start."""
    unknown = set(args) - {"resources", "thresholds", "enablePredicate"}
    if unknown:
        raise ProfileError(
            where, f"{name} takes resources, thresholds, enablePredicate (got {sorted(unknown)})"
        )
    resources = _resources(args.get("resources"), f"{where}.resources")
    names = [r for r, _ in resources]
    raw = args.get("thresholds")
    if raw is None:
        raw = {r: p for r, p in USAGE_THRESHOLDS.items() if r in names}
    if not isinstance(raw, dict):
        raise ProfileError(f"{where}.thresholds", "must be a mapping of resource to percent")
    given: dict[str, int] = {}
    for key, pct in raw.items():
        rname = _VOLCANO_RESOURCE.get(str(key), str(key))
        if type(pct) is not int or not 0 <= pct <= 100:
            raise ProfileError(f"{where}.thresholds.{key}", "must be an integer in 0..100")
        given[rname] = pct
    for rname in given:
        if rname not in names:
            raise ProfileError(
                f"{where}.thresholds.{rname}", f"not one of the plugin's resources {names}"
            )
    enable = args.get("enablePredicate", True)
    if not isinstance(enable, bool):
        raise ProfileError(f"{where}.enablePredicate", "must be true or false")
    return PluginConfig(
        name,
        USAGE,
        weight,
        resources,
        thresholds=tuple(given.get(r, -1) for r in names),
        usage_filter=enable and bool(given),
    )


#: kube's default score plugins that esched scores, with their weights
#: (pkg/scheduler/apis/config/v1/default_plugins.go), in kube's order.
DEFAULT_SCORE = (
    ("TaintToleration", 3),
    ("NodeAffinity", 2),
    ("NodeResourcesFit", 1),
    ("PodTopologySpread", 2),
    ("InterPodAffinity", 2),
    ("NodeResourcesBalancedAllocation", 1),
)
#: esched's own score plugins (arguments checked by :func:`_plugin`).
_ESCHED_PLUGINS = frozenset({"EPVM", "Mixed", "FGD", "PaperBestFit", "NodeGroupAffinity", "Usage"})
#: The queue's preferred node groups, scored in every profile unless disabled by name.
NODE_GROUP_AFFINITY = "NodeGroupAffinity"
NODE_GROUP_AFFINITY_WEIGHT = 2


def scheduler_names(profile: Profile) -> frozenset[str]:
    """The ``spec.schedulerName`` values esched schedules with ``profile``: the names of
    its profiles (:attr:`Profile.profiles`) and :data:`VOLCANO_SCHEDULER_NAME`. A pod
    naming no scheduler is the first profile's (esched's input has no API server to
    default the field)."""
    return frozenset({p.name for p in profile.profiles} | {VOLCANO_SCHEDULER_NAME})


def _known_plugin(name: Any) -> bool:
    return name in KUBE_PLUGINS or name in _ESCHED_PLUGINS or name in _PYTHON_PLUGINS


def _check_plugin_name(name: Any, where: str) -> None:
    if not isinstance(name, str) or not name:
        raise ProfileError(where, "a plugin name is required")
    if name in REMOVED_KUBE_PLUGINS:
        raise ProfileError(
            where, f"plugin {name!r} was removed from kube-scheduler ({API_VERSION} has none)"
        )
    if name != "*" and not _known_plugin(name):
        raise ProfileError(where, f"unknown plugin {name!r}")


def _check_plugins(plugins: Any, where: str) -> None:
    """Every extension point's plugin names are known; no always-on filter disabled."""
    if not isinstance(plugins, dict):
        raise ProfileError(where, "must be a mapping of extension points")
    for point, section in plugins.items():
        if point not in _EXTENSION_POINTS:
            raise ProfileError(f"{where}.{point}", "unknown extension point")
        for part in ("enabled", "disabled"):
            for i, p in enumerate((section or {}).get(part) or ()):
                _check_plugin_name((p or {}).get("name"), f"{where}.{point}.{part}[{i}].name")
    for point in _FILTER_POINTS:
        section = plugins.get(point) or {}
        disabled = {(d or {}).get("name") for d in section.get("disabled") or ()}
        # A plugin disabled here is back if this point or multiPoint enables it.
        enabled = {(e or {}).get("name") for e in section.get("enabled") or ()}
        enabled |= {
            (e or {}).get("name") for e in (plugins.get("multiPoint") or {}).get("enabled") or ()
        }
        for name in sorted(ALWAYS_ON_FILTERS):
            if (name in disabled or "*" in disabled) and name not in enabled:
                raise ProfileError(
                    f"{where}.{point}.disabled",
                    f"esched always applies the {name} filter and cannot disable it",
                )


def _check_plugin_config(entries: Any, where: str) -> None:
    """pluginConfig: known plugins, each once (kube's duplicated-plugin-config), and
    only arguments esched honours."""
    seen: set[str] = set()
    for i, entry in enumerate(entries or ()):
        name = str((entry or {}).get("name") or "")
        _check_plugin_name(name, f"{where}[{i}].name")
        if name in seen:
            raise ProfileError(f"{where}[{i}].name", f"repeated config for plugin {name!r}")
        seen.add(name)
        args = (entry or {}).get("args") or {}
        if not isinstance(args, dict):
            raise ProfileError(f"{where}[{i}].args", "must be a mapping")
        if name not in KUBE_PLUGINS:
            continue  # esched's own plugins: _plugin checks their arguments
        for key, value in args.items():
            if key in ("apiVersion", "kind"):
                continue
            refused = _REFUSED_ARGS.get((name, key))
            if refused is not None:
                if value != _KUBE_DEFAULTS.get((name, key), _NO_DEFAULT):
                    raise ProfileError(f"{where}[{i}].args.{key}", refused)
                continue
            if key not in _KUBE_ARGS.get(name, frozenset()):
                raise ProfileError(
                    f"{where}[{i}].args.{key}", f"not an argument of {name} that esched honours"
                )
            if (name, key) == ("InterPodAffinity", "hardPodAffinityWeight") and (
                not isinstance(value, int) or not 0 <= value <= 100
            ):
                raise ProfileError(f"{where}[{i}].args.{key}", "not in valid range [0-100]")


def _check_config(doc: dict[str, Any], profiles: list[Any]) -> None:
    """What kube-scheduler's config validation refuses and what esched cannot honour,
    refused with the field path (validation.go, validation_pluginargs.go)."""
    version = doc.get("apiVersion")
    if version is not None and version != API_VERSION:
        raise ProfileError("apiVersion", f"expected {API_VERSION}, got {version!r}")
    for key in doc:
        if key not in _CONFIG_FIELDS:
            raise ProfileError(str(key), "unknown field of KubeSchedulerConfiguration")
    if doc.get("extenders"):
        raise ProfileError("extenders", "scheduler extenders are not supported by esched")
    seen: dict[str, int] = {}
    for i, prof in enumerate(profiles):
        where = f"profiles[{i}]"
        if not isinstance(prof, dict):
            raise ProfileError(where, "must be a mapping")
        for key in prof:
            if key not in _PROFILE_FIELDS:
                raise ProfileError(f"{where}.{key}", "unknown field of a profile")
        sname = prof.get("schedulerName")
        if len(profiles) > 1 and not sname:
            raise ProfileError(f"{where}.schedulerName", "Required value")
        sname = sname or "default-scheduler"
        if sname in seen:
            raise ProfileError(
                f"{where}.schedulerName", f"Duplicate value: profiles[{seen[sname]}].schedulerName"
            )
        seen[sname] = i
        if prof.get("plugins") is not None:
            _check_plugins(prof["plugins"], f"{where}.plugins")
        _check_plugin_config(prof.get("pluginConfig"), f"{where}.pluginConfig")


_SELECTOR_OPS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})


def _selector_term(term: Any, where: str) -> None:
    """A NodeSelectorTerm as kube-apiserver validates one (ValidateNodeSelectorTerm)."""
    if not isinstance(term, dict) or set(term) - {"matchExpressions", "matchFields"}:
        raise ProfileError(where, "must be a NodeSelectorTerm (matchExpressions, matchFields)")
    for part in ("matchExpressions", "matchFields"):
        for i, req in enumerate(term.get(part) or ()):
            at = f"{where}.{part}[{i}]"
            if not isinstance(req, dict) or not isinstance(req.get("key"), str):
                raise ProfileError(f"{at}.key", "required")
            op, values = req.get("operator"), req.get("values") or []
            if op not in _SELECTOR_OPS or (part == "matchFields" and op not in ("In", "NotIn")):
                raise ProfileError(f"{at}.operator", f"not a valid operator: {op!r}")
            if part == "matchFields" and req["key"] != "metadata.name":
                raise ProfileError(f"{at}.key", "only metadata.name is a supported field")
            if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
                raise ProfileError(f"{at}.values", "must be a list of strings")
            if op in ("In", "NotIn") and not values:
                raise ProfileError(f"{at}.values", f"must be non-empty for operator {op}")
            if op in ("Exists", "DoesNotExist") and values:
                raise ProfileError(f"{at}.values", f"must be empty for operator {op}")
            if op in ("Gt", "Lt") and (len(values) != 1 or not values[0].lstrip("-").isdigit()):
                raise ProfileError(f"{at}.values", f"must be one integer for operator {op}")


#: kube's system default spread constraints (podtopologyspread/plugin.go
#: systemDefaultConstraints): ScheduleAnyway, hostname maxSkew 3 and zone maxSkew 5.
SYSTEM_DEFAULT_CONSTRAINTS: tuple[tuple[str, int, str, int, bool, bool], ...] = (
    ("kubernetes.io/hostname", 3, "ScheduleAnyway", 1, True, False),
    ("topology.kubernetes.io/zone", 5, "ScheduleAnyway", 1, True, False),
)
_CONSTRAINT_FIELDS = frozenset(
    {
        "maxSkew",
        "topologyKey",
        "whenUnsatisfiable",
        "labelSelector",
        "minDomains",
        "nodeAffinityPolicy",
        "nodeTaintsPolicy",
        "matchLabelKeys",
    }
)


def _spread_defaults(
    args: dict[str, Any], where: str
) -> tuple[tuple[tuple[str, int, str, int, bool, bool], ...], bool]:
    """PodTopologySpreadArgs as kube validates them (validation_pluginargs.go
    ValidatePodTopologySpreadArgs): ``(default constraints, system defaulted)``.
    ``defaultingType`` defaults to System (v1 defaults), which takes kube's system
    constraints and forbids listing any; List takes ``defaultConstraints`` (possibly
    none). A default constraint has no ``labelSelector`` (kube derives it per pod);
    its ``matchLabelKeys`` are accepted and, as in kube, replaced by that selector."""
    defaulting = args.get("defaultingType", "System")
    listed = args.get("defaultConstraints") or []
    if defaulting not in ("System", "List"):
        raise ProfileError(f"{where}.defaultingType", "must be System or List")
    if not isinstance(listed, list):
        raise ProfileError(f"{where}.defaultConstraints", "must be a list")
    if defaulting == "System":
        if listed:
            raise ProfileError(
                f"{where}.defaultingType", "when .defaultConstraints are not empty: must be List"
            )
        return SYSTEM_DEFAULT_CONSTRAINTS, True
    out: list[tuple[str, int, str, int, bool, bool]] = []
    for i, c in enumerate(listed):
        at = f"{where}.defaultConstraints[{i}]"
        if not isinstance(c, dict):
            raise ProfileError(at, "must be a TopologySpreadConstraint")
        unknown = set(c) - _CONSTRAINT_FIELDS
        if unknown:
            raise ProfileError(f"{at}.{sorted(unknown)[0]}", "unknown field")
        skew = c.get("maxSkew")
        if not isinstance(skew, int) or isinstance(skew, bool) or skew <= 0:
            raise ProfileError(f"{at}.maxSkew", "not in valid range (0, inf)")
        key = c.get("topologyKey")
        if not isinstance(key, str) or not key:
            raise ProfileError(f"{at}.topologyKey", "can not be empty")
        when = c.get("whenUnsatisfiable")
        if when not in ("DoNotSchedule", "ScheduleAnyway"):
            raise ProfileError(
                f"{at}.whenUnsatisfiable", "supported values: DoNotSchedule, ScheduleAnyway"
            )
        if c.get("labelSelector") is not None:
            raise ProfileError(
                f"{at}.labelSelector",
                "constraint must not define a selector, as they deduced for each pod",
            )
        min_domains = c.get("minDomains", 1)
        if not isinstance(min_domains, int) or isinstance(min_domains, bool) or min_domains < 1:
            raise ProfileError(f"{at}.minDomains", "must be greater than 0")
        policies = []
        for name, default in (("nodeAffinityPolicy", "Honor"), ("nodeTaintsPolicy", "Ignore")):
            value = c.get(name) or default
            if value not in ("Honor", "Ignore"):
                raise ProfileError(f"{at}.{name}", "supported values: Honor, Ignore")
            policies.append(value == "Honor")
        if any(o[0] == key and o[2] == when for o in out):
            raise ProfileError(
                f"{at}", f"Duplicate value: {{topologyKey: {key}, whenUnsatisfiable: {when}}}"
            )
        out.append((key, skew, when, min_domains, policies[0], policies[1]))
    return tuple(out), False


def _added_affinity(raw: Any, where: str) -> dict[str, Any] | None:
    """NodeAffinityArgs.addedAffinity, checked (validation_pluginargs.go
    ValidateNodeAffinityArgs): ``{"required": NodeSelector | None, "preferred": [...]}``."""
    if not raw:
        return None
    if not isinstance(raw, dict):
        raise ProfileError(where, "must be a NodeAffinity")
    req_key = "requiredDuringSchedulingIgnoredDuringExecution"
    pref_key = "preferredDuringSchedulingIgnoredDuringExecution"
    unknown = set(raw) - {req_key, pref_key}
    if unknown:
        raise ProfileError(f"{where}.{sorted(unknown)[0]}", "unknown field of NodeAffinity")
    required = raw.get(req_key)
    if required is not None:
        terms = required.get("nodeSelectorTerms") if isinstance(required, dict) else None
        if not isinstance(terms, list) or not terms:
            raise ProfileError(
                f"{where}.{req_key}.nodeSelectorTerms", "must have at least one term"
            )
        for i, term in enumerate(terms):
            _selector_term(term, f"{where}.{req_key}.nodeSelectorTerms[{i}]")
    preferred = raw.get(pref_key) or []
    if not isinstance(preferred, list):
        raise ProfileError(f"{where}.{pref_key}", "must be a list")
    for i, pref in enumerate(preferred):
        at = f"{where}.{pref_key}[{i}]"
        w = pref.get("weight") if isinstance(pref, dict) else None
        if not isinstance(w, int) or not 1 <= w <= 100:
            raise ProfileError(f"{at}.weight", "must be in the range 1-100")
        _selector_term(pref.get("preference") or {}, f"{at}.preference")
    return {"required": required, "preferred": preferred}


def _resolve(doc: dict[str, Any], prof: dict[str, Any], idx: int) -> Profile:
    """Profile ``idx`` of a checked configuration, resolved."""
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
    configs = list(prof.get("pluginConfig") or ())
    args = {c.get("name"): c.get("args") or {} for c in configs}
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
    added = None
    defaults, system = SYSTEM_DEFAULT_CONSTRAINTS, True
    for i, c in enumerate(configs):
        if c.get("name") == "NodeAffinity":
            added = _added_affinity(
                (c.get("args") or {}).get("addedAffinity"),
                f"{where}.pluginConfig[{i}].args.addedAffinity",
            )
        if c.get("name") == "PodTopologySpread":
            defaults, system = _spread_defaults(
                c.get("args") or {}, f"{where}.pluginConfig[{i}].args"
            )
    pct = prof.get("percentageOfNodesToScore", doc.get("percentageOfNodesToScore"))
    if pct is not None and (not isinstance(pct, int) or not 0 <= pct <= 100):
        raise ProfileError("percentageOfNodesToScore", "must be an integer in 0..100")
    return Profile(
        name=prof.get("schedulerName", "default-scheduler"),
        plugins=tuple(resolved),
        percentage_of_nodes_to_score=pct or None,
        ignored=tuple(ignored),
        added_affinity=added,
        spread_defaults=defaults,
        spread_system=system,
    )


def parse_profile(doc: dict[str, Any] | None, name: str | None = None) -> Profile:
    """Resolve a KubeSchedulerConfiguration dict: the profile ``name`` alone, else every
    profile (the one named ``default-scheduler``, else the first, with the others as its
    :attr:`Profile.siblings`). Everything esched cannot honour is refused
    (:class:`ProfileError`, with the field path)."""
    doc = doc or {}
    kind = doc.get("kind", "KubeSchedulerConfiguration")
    if kind != "KubeSchedulerConfiguration":
        raise ProfileError("kind", f"expected KubeSchedulerConfiguration, got {kind!r}")
    profiles = doc.get("profiles") or [{}]
    if not isinstance(profiles, list):
        raise ProfileError("profiles", "must be a list")
    _check_config(doc, profiles)
    names = [p.get("schedulerName", "default-scheduler") for p in profiles]
    if name is not None:
        if name not in names:
            raise ProfileError("profiles", f"no profile named {name!r} (have {names})")
        idx = names.index(name)
        return _resolve(doc, profiles[idx] or {}, idx)
    every = [_resolve(doc, p or {}, i) for i, p in enumerate(profiles)]
    if len(every) > 1 and any(pl.kind == "FGD" for p in every for pl in p.plugins):
        raise ProfileError(
            "profiles", "FGD needs per-device state of one profile: use it in a single profile"
        )
    first = names.index("default-scheduler") if "default-scheduler" in names else 0
    return replace(every[first], siblings=tuple(p for i, p in enumerate(every) if i != first))


def load_profile(path: str | Path, name: str | None = None) -> Profile:
    """Read a KubeSchedulerConfiguration YAML/JSON file and resolve one profile; the
    file must name its ``apiVersion`` (:data:`API_VERSION`), as kube-scheduler's does."""
    with open(path, encoding="utf-8") as fh:
        doc = yaml.safe_load(fh)
    if not isinstance(doc, dict):
        raise ProfileError("(file)", "not a KubeSchedulerConfiguration mapping")
    if "apiVersion" not in doc:
        raise ProfileError("apiVersion", f"required ({API_VERSION})")
    return parse_profile(doc, name)


#: kube-scheduler's default resource scoring: Fit(LeastAllocated) + BalancedAllocation.
DEFAULT_PROFILE = parse_profile({})
