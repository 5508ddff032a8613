"""The JSON Schemas of ``schemas/v1/``, rewritten for speed and compiled once (jsonschema-rs)."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import cache
from importlib import resources
from typing import Any

import jsonschema_rs
import orjson

from esched.schemas.events import TYPES

__all__ = [
    "ENVELOPE_URI",
    "FORMAT_PATTERNS",
    "PATTERN_REWRITES",
    "SCHEMA_BASE_URI",
    "Compiled",
    "compiled_form",
    "load_schema",
    "schema_names",
    "validators",
]

#: ``$id`` prefix of every schema; ``<prefix><name>.json`` is ``schemas/v1/<name>.json``.
SCHEMA_BASE_URI = "https://esched.dev/schemas/v1/"

_ENVELOPE = "cloudevent"
ENVELOPE_URI = f"{SCHEMA_BASE_URI}{_ENVELOPE}.json"
_DEFINITIONS = "definitions"


def schema_names() -> list[str]:
    """Names of the schema files: ``cloudevent``, ``definitions`` and one per event type."""
    return [_ENVELOPE, _DEFINITIONS, *TYPES]


@cache
def _schema_text(name: str) -> bytes:
    return (resources.files("esched.schemas") / "v1" / f"{name}.json").read_bytes()


def load_schema(name: str) -> dict[str, Any]:
    """A fresh copy of ``schemas/v1/<name>.json`` (``name`` as in :func:`schema_names`)."""
    if name not in schema_names():
        raise KeyError(f"no schema named {name!r}")
    return orjson.loads(_schema_text(name))


def _no_network(uri: str) -> dict[str, Any]:
    """jsonschema-rs retriever: every ``$ref`` we use is in the registry; never fetch."""
    raise ValueError(f"schema reference outside esched's schemas: {uri}")


# Lookahead-free equivalents of the schemas' lookahead patterns. jsonschema-rs runs a
# pattern with lookaround on a backtracking engine (fancy-regex) at ~0.6 µs a string,
# ten times the cost of a plain one, and a pod has a dozen qualified names. Each such
# pattern becomes one plain pattern that also bounds the last segment (name <= 63),
# and a length bound on the first: a string of at most 255 characters cannot have a
# longer first segment, else a second plain pattern checks it. tests/schemas checks
# the equivalence on random strings and that every lookahead pattern is listed here.
_SUBDOMAIN = r"[a-z0-9]+(?:-+[a-z0-9]+)*(?:\.[a-z0-9]+(?:-+[a-z0-9]+)*)*"
_LABEL = r"[a-z0-9]+(?:-+[a-z0-9]+)*"
_NAME = r"[A-Za-z0-9]+(?:[-_.]+[A-Za-z0-9]+)*"
# Same languages, at most 63 characters: alphanumeric at both ends, any of the
# separators in between.
_LABEL_63 = r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?"
_NAME_63 = r"[A-Za-z0-9](?:[-_.A-Za-z0-9]{0,61}[A-Za-z0-9])?"
_QUALIFIED = rf"(?:(?=[^/]{{1,253}}/){_SUBDOMAIN}/)?(?=[^/]{{1,63}}$){_NAME}"


def _bounded(pattern: str, first_253: str) -> dict[str, Any]:
    return {"pattern": pattern, "x-also": {"anyOf": [{"maxLength": 255}, {"pattern": first_253}]}}


#: Schema patterns with lookaheads (which jsonschema-rs runs on its slow backtracking
#: engine) and their lookahead-free forms, the length bounds apart (see
#: :func:`compiled_form`).
PATTERN_REWRITES: dict[str, dict[str, Any]] = {
    # QualifiedName: [subdomain (<= 253) "/"] name (<= 63)
    f"^{_QUALIFIED}$": _bounded(f"^(?:{_SUBDOMAIN}/)?{_NAME_63}$", r"^(?:[^/]{1,253}/)?[^/]*$"),
    # Toleration key: empty or a qualified name
    f"^(?:{_QUALIFIED})?$": _bounded(
        f"^(?:(?:{_SUBDOMAIN}/)?{_NAME_63})?$", r"^(?:[^/]{1,253}/)?[^/]*$"
    ),
    # PodKey: namespace (DNS label, <= 63) "/" name (DNS subdomain, <= 253)
    f"^(?=[^/]{{1,63}}/){_LABEL}/(?=[^/]{{1,253}}$){_SUBDOMAIN}$": _bounded(
        f"^{_LABEL_63}/{_SUBDOMAIN}$", r"^[^/]*/[^/]{1,253}$"
    ),
}

#: The envelope's formats as the patterns fastjsonschema checked them with (Python
#: ``re``), for jsonschema-rs's engine, which reads ``\d``, ``\w`` and ``\s`` as
#: ECMA-262 does (ASCII): Python's Unicode classes are spelled out (identical on
#: every character of Python's Unicode database); ``$`` is the end of the text.
#: A Python format callback would cost ~1 µs an event; these cost ~0.1 µs.
FORMAT_PATTERNS = {
    "date-time": (
        r"^(?:\p{Nd}{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\p{Nd}|3[01])|(?:0[469]|11)-"
        r"(?:0[1-9]|[12]\p{Nd}|30)|02-(?:0[1-9]|1\p{Nd}|2[0-8]))|(?:\p{Nd}\p{Nd}(?:0[48]|"
        r"[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)-02-29)(t|T)"
        r"(?:[01]\p{Nd}|2[0-3]):[0-5]\p{Nd}:(?:[0-5]\p{Nd}|60)(?:\.\p{Nd}+)?"
        r"(?:[+-](?:[01]\p{Nd}|2[0-3]):[0-5]\p{Nd}|[+-](?:[01]\p{Nd}|2[0-3])[0-5]\p{Nd}|z|Z)$"
    ),
    "uri": r"^[\p{L}\p{N}_]+:(/?/?)[^\p{White_Space}\x1c-\x1f]+$",
    # RFC 3986 characters only (CloudEvents ``source``); structure is not checked.
    "uri-reference": r"^[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]+$",
}


def compiled_form(node: Any) -> Any:
    """The schema as compiled: same verdicts as the file, cheaper to evaluate.

    * ``allOf`` members marked ``x-python-check`` (if/then rules between fields,
      such as "operator Exists needs an empty value") are dropped here and
      enforced by :func:`_check_rules`, whose messages name the field at fault.
    * A ``pattern`` in :data:`PATTERN_REWRITES` becomes its lookahead-free form (the
      length bound in an added ``allOf`` member carrying the same ``x-error``);
      ``x-pattern`` keeps the original for messages.
    * A ``format`` in :data:`FORMAT_PATTERNS` becomes that ``pattern``
      (``x-format`` names it for messages).

    ``tests/schemas`` checks that the verdicts agree with the schema files as the
    reference ``jsonschema`` (Python ``re``) evaluates them, and each rewritten
    pattern and format with its original on random strings.
    """
    if isinstance(node, list):
        return [compiled_form(x) for x in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "allOf":
            kept = [
                compiled_form(x)
                for x in value
                if not (isinstance(x, dict) and "x-python-check" in x)
            ]
            if kept:
                out[key] = kept
        elif key in ("properties", "definitions", "patternProperties"):
            out[key] = {k: compiled_form(v) for k, v in value.items()}
        else:
            out[key] = compiled_form(value)
    extra: list[dict[str, Any]] = []
    pattern = node.get("pattern")
    if isinstance(pattern, str) and pattern in PATTERN_REWRITES:
        rewrite = PATTERN_REWRITES[pattern]
        out["pattern"], out["x-pattern"] = rewrite["pattern"], pattern
        extra.append({**rewrite["x-also"], "x-pattern": pattern})
    fmt = node.get("format")
    if isinstance(fmt, str) and fmt in FORMAT_PATTERNS:
        del out["format"]
        extra.append({"pattern": FORMAT_PATTERNS[fmt], "x-format": fmt})
    if extra:
        if "x-error" in node:
            extra = [{**x, "x-error": node["x-error"]} for x in extra]
        out["allOf"] = [*out.get("allOf", ()), *extra]
    return out


class Compiled:
    """All validators (jsonschema-rs), compiled once."""

    def __init__(self) -> None:
        started = time.perf_counter()
        self.schemas: dict[str, dict[str, Any]] = {
            f"{SCHEMA_BASE_URI}{n}.json": compiled_form(load_schema(n)) for n in schema_names()
        }
        registry = jsonschema_rs.Registry(list(self.schemas.items()), retriever=_no_network)

        def compile_(name: str) -> Any:
            return jsonschema_rs.validator_for(
                self.schemas[f"{SCHEMA_BASE_URI}{name}.json"],
                registry=registry,
                retriever=_no_network,
                validate_formats=True,
            )

        self.envelope = compile_(_ENVELOPE)
        self.data = {t: compile_(t) for t in TYPES}
        self.envelope_valid: Callable[[Any], bool] = self.envelope.is_valid
        self.data_valid: dict[str, Callable[[Any], bool]] = {
            t: v.is_valid for t, v in self.data.items()
        }
        self.compile_s = time.perf_counter() - started


_compiled: Compiled | None = None


def validators() -> Compiled:
    """The validators of every schema, compiled on the first call (the same object
    after it); :func:`~esched.schemas.validator.compile_validators` calls it early."""
    global _compiled
    if _compiled is None:
        _compiled = Compiled()
    return _compiled
