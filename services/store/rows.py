"""What readers of stored rows take from them without decoding every payload.

The bulk of the log is pod events whose stream names the pod
(``pod/<namespace>/<name>``, :func:`~esched.schemas.events.stream_of`): a reader
that needs only the pod's key (admission, the dispatcher, the commit service's
latency books) reads it from the stream and decodes the rest. So is a PodGroup's
(``podgroup/<namespace>/<name>``) and a Volcano Job's (``job/<namespace>/<name>``:
its first submission implies its PodGroup and first pods, which readers find in the
fold by the Job's key).
"""

from __future__ import annotations

import orjson

from esched.core.admission import Fact, event_key
from esched.schemas.events import (
    JOB,
    JOB_SUBMITTED,
    POD,
    POD_DELETED,
    POD_FAILED,
    POD_SUBMITTED,
    POD_SUCCEEDED,
    POD_UPDATED,
    PODGROUP,
    PODGROUP_SUBMITTED,
    stream_key,
)
from esched.services.store.base import StoredEvent

__all__ = ["KEYED", "row_fact"]

#: Pod events of which readers need only the pod's key (admission, the dispatcher):
#: the stored stream names it (``pod/<namespace>/<name>``,
#: :func:`~esched.schemas.events.stream_of`), so they are not decoded for it.
KEYED = frozenset({POD_SUBMITTED, POD_SUCCEEDED, POD_FAILED, POD_DELETED, POD_UPDATED})


# The stream kind naming the object of each type whose readers need only its key.
_KEY_KIND = dict.fromkeys(KEYED, POD) | {PODGROUP_SUBMITTED: PODGROUP, JOB_SUBMITTED: JOB}


def row_fact(row: StoredEvent) -> Fact | None:
    """The :data:`Fact` of a stored event, decoded only if its type is neither
    :data:`KEYED` nor a PodGroup's or a Job's, or its stream does not name its object; None if
    its ``data`` is not an object."""
    kind = _KEY_KIND.get(row.type)
    key = None if kind is None else stream_key(row.stream, kind)
    if key is not None:
        return (row.position, row.type, key, None)
    data = orjson.loads(row.payload).get("data")
    if not isinstance(data, dict):
        return None
    return (row.position, row.type, event_key(data), data)
