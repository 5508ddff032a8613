"""Validate esched events: size, JSON, CloudEvents envelope, type, data schema, quantities.

The JSON Schemas in ``schemas/v1/`` are the contract; this package compiles them once
(on first use) with jsonschema-rs and adds the one check JSON Schema cannot express
exactly: every Kubernetes quantity in the event is converted to integer base units
by :mod:`esched.schemas.quantity`, so an accepted event can be folded without a
parse error.

Every failure is an :class:`InvalidEvent` with a closed ``reason`` (see
:data:`REASONS`), the dotted ``field`` at fault (``None`` when the whole message
is at fault) and a message that names the field::

    >>> parse_event(b'{"specversion": "1.0"}')
    Traceback (most recent call last):
    ...
    InvalidEvent: id: required property is missing

One module a job:

* :mod:`.errors`: :class:`InvalidEvent` and :data:`REASONS`, the dead-letter vocabulary;
* :mod:`.compiled`: the schema files, rewritten for speed and compiled once;
* :mod:`.messages`: the first schema error as a message naming the field;
* :mod:`.timewindow`: the envelope's ``time`` within :data:`TIME_WINDOW`;
* :mod:`.quantities`: quantities in base units, pod totals, a queue's resource order;
* :mod:`.refused`: :data:`UNSUPPORTED_POD_FIELDS`, refused rather than ignored;
* :mod:`.pods`: toleration, node-affinity and scheduling-gate rules of a pod;
* :mod:`.checks`: the checks after the schema, per event type;
* :mod:`.event`: :func:`parse_event`, :func:`validate_event` and :func:`validate_data`,
  the pipeline;
* :mod:`.bench`: :func:`bench_validate`, for ``esched bench``.
"""

from __future__ import annotations

from esched.schemas.validator.bench import bench_validate
from esched.schemas.validator.checks import check_quantities
from esched.schemas.validator.compiled import SCHEMA_BASE_URI, load_schema, schema_names
from esched.schemas.validator.errors import REASONS, InvalidEvent
from esched.schemas.validator.event import (
    MAX_EVENT_BYTES,
    compile_validators,
    parse_event,
    validate_data,
    validate_event,
)
from esched.schemas.validator.refused import UNSUPPORTED_POD_FIELDS
from esched.schemas.validator.timewindow import TIME_WINDOW

__all__ = [
    "MAX_EVENT_BYTES",
    "REASONS",
    "SCHEMA_BASE_URI",
    "TIME_WINDOW",
    "UNSUPPORTED_POD_FIELDS",
    "InvalidEvent",
    "bench_validate",
    "check_quantities",
    "compile_validators",
    "load_schema",
    "parse_event",
    "schema_names",
    "validate_data",
    "validate_event",
]
