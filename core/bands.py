"""Borg priority bands: which band a pod is in, and who may preempt whom.

Borg sorts jobs into four bands, highest first: **monitoring**, **production**,
**batch**, **best-effort**. *prod* means monitoring + production; everything else
is *non-prod*. esched reads a pod's band from its ``spec.priority`` against
thresholds, or from its ``spec.priorityClassName`` when the operator maps that
class to a band in the config (the mapping wins over the number: it is the
operator's explicit word).

Default thresholds (inclusive lower bounds), chosen to line up with Kubernetes'
priority ranges the way Borg's bands line up with its integer priorities:

================  ====================  ==========================================
band              priority              why
================  ====================  ==========================================
monitoring        >= 1,000,000,000      kube's user maximum and its ``system-*``
                                        classes (2e9): cluster infrastructure
production        >= 1,000              the Mixed scorer's ``productionPriority``
batch             >= 100
best-effort       < 100                 includes the default priority 0 (Borg's
                                        "free" tier: unlabelled work goes last)
================  ====================  ==========================================

Preemption (Borg, section 2.5): a pod that cannot be placed may evict pods of a
**strictly lower** band; and prod never preempts prod, so monitoring does not
evict production (Borg forbids preemption inside the prod band to avoid
preemption cascades). Together: only non-prod pods are ever victims, batch only
for prod, best-effort for batch and prod. :func:`may_preempt` is that rule, used
by the core's planner, the commit service's validation and the audit.

This module is plain Python: bands are resolved once per equivalence class (a few
hundred per cluster), and the hot loops see a ``uint8`` band per class.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from esched.schemas.objects import global_default_class

__all__ = [
    "BAND_NAMES",
    "DEFAULT_BANDS",
    "Band",
    "BandConfig",
    "BandConfigError",
    "is_prod",
    "may_preempt",
    "never_preempts",
    "parse_bands",
]


class Band(enum.IntEnum):
    """A Borg priority band; a larger value is a higher band."""

    BEST_EFFORT = 0
    BATCH = 1
    PRODUCTION = 2
    MONITORING = 3

    @property
    def label(self) -> str:
        """The band's name as operators write it (``best-effort``, ``production``, ...)."""
        return BAND_NAMES[self]


#: Band -> its name in config files, events and reports.
BAND_NAMES = {
    Band.BEST_EFFORT: "best-effort",
    Band.BATCH: "batch",
    Band.PRODUCTION: "production",
    Band.MONITORING: "monitoring",
}
_BY_NAME = {name: band for band, name in BAND_NAMES.items()}
_BY_NAME.update({"best_effort": Band.BEST_EFFORT, "besteffort": Band.BEST_EFFORT})


def is_prod(band: int) -> bool:
    """Whether ``band`` is prod (monitoring or production)."""
    return band >= Band.PRODUCTION


def may_preempt(preemptor: int, victim: int) -> bool:
    """Borg's rule: the victim's band is strictly lower, and not both are prod.

    As monitoring > production, "not both prod" means a victim is never prod.
    """
    return victim < preemptor and not (is_prod(victim) and is_prod(preemptor))


def never_preempts(class_spec: Mapping[str, Any], classes: Mapping[str, Mapping[str, Any]]) -> bool:
    """Whether pods of this equivalence class (``ClusterState.class_specs[c]``) may not
    preempt at all (kube: ``preemptionPolicy: Never``, such a pod waits for room): the
    pods' own ``spec.preemptionPolicy`` (kept in the class's constraints), or their
    PriorityClass's (``classes``, the fold's ``priority_classes``; pods naming no class
    take the ``globalDefault`` class's). The scheduling pass and the commit service's
    check both ask this."""
    if (class_spec.get("constraints") or {}).get("preemptionPolicy") == "Never":
        return True
    if not classes:
        return False
    name = class_spec.get("priorityClassName") or global_default_class(classes)
    return (classes.get(name or "") or {}).get("preemptionPolicy") == "Never"


class BandConfigError(ValueError):
    """A band configuration esched cannot use; ``field`` says where."""

    def __init__(self, field_path: str, reason: str) -> None:
        self.field = field_path
        super().__init__(f"{field_path}: {reason}")


@dataclass(frozen=True)
class BandConfig:
    """Thresholds (inclusive lower bounds of ``spec.priority``) and class mappings.

    :param monitoring: lowest priority in the monitoring band.
    :param production: lowest priority in the production band.
    :param batch: lowest priority in the batch band; anything below is best-effort.
    :param classes: ``priorityClassName`` -> band; wins over the numeric priority.
    """

    monitoring: int = 1_000_000_000
    production: int = 1_000
    batch: int = 100
    classes: Mapping[str, Band] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.monitoring > self.production > self.batch:
            raise BandConfigError(
                "bands",
                f"thresholds must satisfy monitoring > production > batch, got "
                f"{self.monitoring} > {self.production} > {self.batch}",
            )

    def band_of(self, priority: int, priority_class_name: str | None = None) -> Band:
        """The band of a pod with this ``spec.priority`` and ``priorityClassName``."""
        if priority_class_name:
            mapped = self.classes.get(priority_class_name)
            if mapped is not None:
                return mapped
        if priority >= self.monitoring:
            return Band.MONITORING
        if priority >= self.production:
            return Band.PRODUCTION
        if priority >= self.batch:
            return Band.BATCH
        return Band.BEST_EFFORT

    def as_dict(self) -> dict[str, Any]:
        """The config as written in a config file (round-trips through :func:`parse_bands`)."""
        return {
            "monitoring": self.monitoring,
            "production": self.production,
            "batch": self.batch,
            "classes": {k: BAND_NAMES[v] for k, v in sorted(self.classes.items())},
        }


DEFAULT_BANDS = BandConfig()


def _threshold(raw: Mapping[str, Any], key: str, default: int) -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise BandConfigError(f"bands.{key}", f"must be an integer priority, got {value!r}")
    return value


def parse_bands(raw: Mapping[str, Any] | None) -> BandConfig:
    """A :class:`BandConfig` from a config mapping (the ``bands:`` section).

    ``{"monitoring": 1000000000, "production": 1000, "batch": 100,
    "classes": {"critical-infra": "monitoring", "nightly": "batch"}}``; every key is
    optional. Raises :class:`BandConfigError` naming the field at fault.
    """
    if raw is None:
        return DEFAULT_BANDS
    if not isinstance(raw, Mapping):
        raise BandConfigError("bands", f"must be a mapping, got {type(raw).__name__}")
    known = {"monitoring", "production", "batch", "classes"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise BandConfigError(
            f"bands.{unknown[0]}", f"unknown key (expected one of {sorted(known)})"
        )
    classes_raw = raw.get("classes") or {}
    if not isinstance(classes_raw, Mapping):
        raise BandConfigError("bands.classes", "must map priorityClassName to a band name")
    classes: dict[str, Band] = {}
    for name, band in classes_raw.items():
        if not isinstance(name, str) or not name:
            raise BandConfigError("bands.classes", f"class name must be a string, got {name!r}")
        key = str(band).strip().lower() if isinstance(band, str) else None
        if key not in _BY_NAME:
            raise BandConfigError(
                f"bands.classes.{name}",
                f"unknown band {band!r} (expected one of {sorted(BAND_NAMES.values())})",
            )
        classes[name] = _BY_NAME[key]
    return BandConfig(
        monitoring=_threshold(raw, "monitoring", DEFAULT_BANDS.monitoring),
        production=_threshold(raw, "production", DEFAULT_BANDS.production),
        batch=_threshold(raw, "batch", DEFAULT_BANDS.batch),
        classes=classes,
    )
