"""The rejection of an event: :class:`InvalidEvent` and its closed vocabulary of reasons."""

from __future__ import annotations

__all__ = ["REASONS", "InvalidEvent", "short_repr"]

#: Closed vocabulary of rejection reasons (dead-letter records and metrics use it).
REASONS = (
    "oversize",
    "not_json",
    "not_object",
    "envelope",
    "unknown_type",
    "schema",
    "quantity",
    "unsupported",
)


class InvalidEvent(ValueError):
    """An event that must not enter the log.

    ``reason`` is one of :data:`REASONS`; ``field`` is the dotted path at fault
    (``data.spec.containers[0].resources.requests.cpu``), or None; ``message`` is
    the human-readable text, also ``str(exc)``.
    """

    def __init__(self, reason: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.field = field
        self.message = message

    def __repr__(self) -> str:
        return (
            f"InvalidEvent(reason={self.reason!r}, field={self.field!r}, message={self.message!r})"
        )


def short_repr(value: object, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters, for a message quoting a bad value."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
