"""Kubernetes-shaped manifests (YAML or JSON) folded into a :class:`ClusterState`.

For tools that start from objects rather than from the log (``esched explain``):
the objects become events through the same converter ``esched publish`` uses
(:mod:`esched.schemas.manifests`, validated), and the state is their fold.
"""

from __future__ import annotations

from pathlib import Path

from esched.core._state import ClusterState
from esched.schemas.events import NODE_ADDED
from esched.schemas.manifests import events_from_documents, load_documents

__all__ = ["load_events", "state_from_events"]


def load_events(path: str | Path) -> list[dict]:
    """The events of a manifest file (a List, a multi-document YAML, or one object);
    a Volcano Job with the PodGroup and pods its controller first creates.

    Raises ``ValueError`` (or its subclass ``InvalidEvent``) naming what is wrong.
    """
    return list(
        events_from_documents(
            load_documents(Path(path).read_text(encoding="utf-8")),
            source="esched-explain",
            job_pods=True,
        )
    )


def state_from_events(events: list[dict]) -> ClusterState:
    """Fold nodes first, then the rest in file order (so running pods find their node)."""
    ordered = sorted(events, key=lambda e: e["type"] != NODE_ADDED)  # stable
    state = ClusterState()
    state.apply_many(enumerate(ordered, 1))
    return state
