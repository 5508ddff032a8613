"""What readers of stored rows take from them without decoding every payload.

The bulk of the log is pod events whose stream names the pod
(``pod/<namespace>/<name>``, :func:`~esched.schemas.events.stream_of`): a reader
that needs only the pod's key (admission, the dispatcher, the commit service's
latency books) reads it from the stream and decodes the rest.
"""

from __future__ import annotations

import orjson

from esched.core.admission import Fact, event_key
from esched.schemas.events import (
    POD,
    POD_DELETED,
    POD_FAILED,
    POD_SUBMITTED,
    POD_SUCCEEDED,
    POD_UPDATED,
    stream_key,
)
from esched.services.store.base import StoredEvent

__all__ = ["KEYED", "row_fact"]

#: Pod events of which readers need only the pod's key (admission, the dispatcher):
#: the stored stream names it (``pod/<namespace>/<name>``,
#: :func:`~esched.schemas.events.stream_of`), so they are not decoded for it.
KEYED = frozenset({POD_SUBMITTED, POD_SUCCEEDED, POD_FAILED, POD_DELETED, POD_UPDATED})


def row_fact(row: StoredEvent) -> Fact | None:
    """The :data:`Fact` of a stored event, decoded only if its type is not
    :data:`KEYED` or its stream does not name its pod; None if its ``data`` is not
    an object."""
    key = stream_key(row.stream, POD) if row.type in KEYED else None
    if key is not None:
        return (row.position, row.type, key, None)
    data = orjson.loads(row.payload).get("data")
    if not isinstance(data, dict):
        return None
    return (row.position, row.type, event_key(data), data)
