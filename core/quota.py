"""Quota: limits on the requests of a queue's or a namespace's pods, per resource and band.

Configured in the config file's ``quota:`` section (see deploy/esched.example.yaml)::

    quota:
      queues:
        research:                 # limits on everything in the queue
          cpu: "100"
          nvidia.com/gpu: 8
          bands:                  # and per priority band
            best-effort: {cpu: "20"}
      namespaces:
        team-a:
          requests.memory: 200Gi  # Kubernetes ResourceQuota spelling works too
          pods: 500

A limit counts the requests of every *active* pod (Pending or Running, as a
Kubernetes ResourceQuota does: a waiting pod holds its quota). A submission that
would take any limit of its queue or namespace (overall, or of its band) over is
rejected at admission; see :mod:`esched.core.admission`.

Bands are Borg's (:mod:`esched.core.bands`): a pod's ``priorityClassName`` when
the ``bands.classes`` mapping names it, else its numeric priority against the
thresholds of the ``bands:`` section (monitoring >= 1e9, production >= 1000,
batch >= 100, else best-effort): the same band the preemption rules use. A gang
member's class is its PodGroup's ``priorityClassName`` when that is set (the fold
resolves it, see ``ClusterState``), so a gang counts against one band.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from esched.core.bands import (
    BAND_NAMES as _LABELS,
)
from esched.core.bands import (
    DEFAULT_BANDS,
    BandConfig,
    BandConfigError,
    parse_bands,
)
from esched.schemas.quantity import QuantityError, to_base_units

__all__ = ["BAND_NAMES", "Quota", "QuotaConfigError", "QuotaExceeded", "parse_quota"]

#: Band names as written in the config, highest first (Borg).
BAND_NAMES = tuple(_LABELS[b] for b in sorted(_LABELS, reverse=True))


class QuotaConfigError(ValueError):
    """A quota section esched cannot use; ``field`` names the place."""

    def __init__(self, field_path: str, reason: str) -> None:
        self.field = field_path
        super().__init__(f"{field_path}: {reason}")


@dataclass(frozen=True, slots=True)
class QuotaExceeded:
    """Why a pod is over quota: the first limit it would break."""

    scope: str  #: "queue/NAME" or "namespace/NAME"
    band: str | None  #: None: the scope's overall limit
    resource: str
    limit: int
    used: int
    requested: int

    def message(self, pod: str) -> str:
        what = self.scope + (f" band {self.band}" if self.band else "")
        return (
            f"pod {pod} exceeds the quota of {what}: {self.resource} requested "
            f"{self.requested}, used {self.used}, limit {self.limit} (base units)"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "band": self.band,
            "resource": self.resource,
            "limit": self.limit,
            "used": self.used,
            "requested": self.requested,
        }


#: scope ("queue/x" | "namespace/y") -> band (None = overall) -> resource -> limit
Limits = dict[str, dict[str | None, dict[str, int]]]


@dataclass(frozen=True)
class Quota:
    """Parsed quota limits (base units) and the band thresholds."""

    limits: Limits = field(default_factory=dict)
    bands: BandConfig = DEFAULT_BANDS

    def __bool__(self) -> bool:
        return bool(self.limits)

    def scopes(self, queue: str, namespace: str) -> list[str]:
        """The configured scopes a pod of ``queue`` / ``namespace`` counts against."""
        return [s for s in (f"queue/{queue}", f"namespace/{namespace}") if s in self.limits]

    def band(self, priority: int, priority_class_name: str | None = None) -> str:
        """The band name of a pod of this priority and ``priorityClassName`` (a class
        mapped by ``bands.classes`` wins over the number)."""
        return self.bands.band_of(priority, priority_class_name).label

    def check(
        self,
        scopes: list[str],
        band: str,
        requests: Mapping[str, int],
        used: Mapping[tuple[str, str | None], Mapping[str, int]],
    ) -> QuotaExceeded | None:
        """The first limit ``requests`` would break on top of ``used`` (per (scope, band))."""
        for scope in scopes:
            for b in (None, band):
                lim = self.limits[scope].get(b)
                if not lim:
                    continue
                have = used.get((scope, b)) or {}
                for res, limit in lim.items():
                    want = requests.get(res, 0)
                    if want and have.get(res, 0) + want > limit:
                        return QuotaExceeded(scope, b, res, limit, have.get(res, 0), want)
        return None


def _limits(raw: Any, where: str) -> dict[str, int]:
    if not isinstance(raw, Mapping):
        raise QuotaConfigError(where, f"must map resource names to quantities, got {raw!r}")
    out = {}
    for res, value in raw.items():
        if not isinstance(res, str) or not res:
            raise QuotaConfigError(where, f"resource name must be a string, got {res!r}")
        name = res.removeprefix("requests.")
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise QuotaConfigError(f"{where}.{res}", f"must be a quantity, got {value!r}")
        try:
            out[name] = to_base_units(name, str(value))
        except QuantityError as exc:
            raise QuotaConfigError(f"{where}.{res}", str(exc)) from exc
    return out


def parse_quota(raw: Any, bands: Mapping[str, Any] | None = None) -> Quota:
    """A :class:`Quota` from the config's ``quota:`` (and ``bands:``) sections.

    Raises :class:`QuotaConfigError` naming the field at fault.
    """
    try:
        band_config = parse_bands(bands)
    except BandConfigError as exc:
        raise QuotaConfigError(exc.field, str(exc).split(": ", 1)[-1]) from exc
    if raw is None:
        return Quota({}, band_config)
    if not isinstance(raw, Mapping):
        raise QuotaConfigError("quota", "must be a mapping with queues and/or namespaces")
    unknown = sorted(set(raw) - {"queues", "namespaces"})
    if unknown:
        raise QuotaConfigError(f"quota.{unknown[0]}", "unknown key (expected queues, namespaces)")
    limits: Limits = {}
    for section, scope in (("queues", "queue"), ("namespaces", "namespace")):
        entries = raw.get(section) or {}
        if not isinstance(entries, Mapping):
            raise QuotaConfigError(f"quota.{section}", "must map names to limits")
        for name, spec in entries.items():
            where = f"quota.{section}.{name}"
            if not isinstance(spec, Mapping):
                raise QuotaConfigError(where, "must map resources (and bands) to limits")
            per_band: dict[str | None, dict[str, int]] = {
                None: _limits({k: v for k, v in spec.items() if k != "bands"}, where)
            }
            bands_raw = spec.get("bands") or {}
            if not isinstance(bands_raw, Mapping):
                raise QuotaConfigError(f"{where}.bands", "must map band names to limits")
            for band, lim in bands_raw.items():
                key = str(band).strip().lower().replace("_", "-")
                if key == "besteffort":
                    key = "best-effort"
                if key not in BAND_NAMES:
                    raise QuotaConfigError(
                        f"{where}.bands.{band}",
                        f"unknown band (expected one of {list(BAND_NAMES)})",
                    )
                per_band[key] = _limits(lim, f"{where}.bands.{band}")
            limits[f"{scope}/{name}"] = per_band
    return Quota(limits, band_config)
