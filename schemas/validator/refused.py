"""Refused pod fields: placement features esched does not implement (reason ``unsupported``)."""

from __future__ import annotations

from typing import Any

from esched.schemas.validator.errors import InvalidEvent

__all__ = ["UNSUPPORTED_POD_FIELDS", "check_refused_fields"]

#: Pod fields that change where kube-scheduler may place a pod and that esched does
#: not implement: field -> (kube plugin, what). A pod setting one is refused (reason
#: ``unsupported``, dead-lettered by ingest) rather than placed as if it were absent.
UNSUPPORTED_POD_FIELDS = {
    "spec.resourceClaims": ("DynamicResources", "DRA resource claims"),
    "spec.volumes[].persistentVolumeClaim": ("VolumeBinding", "volumes of persistent claims"),
    "spec.volumes[].ephemeral": ("VolumeBinding", "generic ephemeral volumes"),
}


def _refused_field(field: str, path: str) -> InvalidEvent:
    plugin, what = UNSUPPORTED_POD_FIELDS[field]
    return InvalidEvent(
        "unsupported",
        f"data.{path}: {what} ({plugin}) not implemented by esched; the pod is refused "
        "rather than placed ignoring them",
        f"data.{path}",
    )


def check_refused_fields(spec: dict[str, Any]) -> None:
    """Refuse (``unsupported``) a pod ``spec`` setting one of
    :data:`UNSUPPORTED_POD_FIELDS`."""
    if spec.get("resourceClaims"):
        raise _refused_field("spec.resourceClaims", "spec.resourceClaims")
    for i, volume in enumerate(spec.get("volumes") or ()):
        for key in ("persistentVolumeClaim", "ephemeral"):
            if isinstance(volume, dict) and key in volume:
                raise _refused_field(f"spec.volumes[].{key}", f"spec.volumes[{i}].{key}")
