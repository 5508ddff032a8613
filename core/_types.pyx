"""Expose the sizes and signs of the core's typedefs so tests can check them."""

from esched.core._types cimport flag_t, index_t, phase_t, score_t, units_t, word_t


def type_info() -> dict[str, tuple[int, bool]]:
    """``{typedef: (size in bytes, signed)}`` for every typedef in ``_types.pxd``."""
    return {
        "units_t": (sizeof(units_t), <units_t>-1 < 0),
        "index_t": (sizeof(index_t), <index_t>-1 < 0),
        "word_t": (sizeof(word_t), <word_t>-1 < 0),
        "score_t": (sizeof(score_t), <score_t>-1 < 0),
        "flag_t": (sizeof(flag_t), <flag_t>-1 < 0),
        "phase_t": (sizeof(phase_t), <phase_t>-1 < 0),
    }
