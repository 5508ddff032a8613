"""Byte searches over a fetched batch of ``(position, payload)`` pairs, in C.

A replica follows every event of the log and looks into each batch twice: for the
decisions of its own proposals (payloads holding its proposal id prefix) and for any
event that may make work (a payload that is not a committed placement). CPython's
``bytes.find`` skips poorly over JSON (the needles' characters, hex digits and
dashes, are everywhere in it: ~6 instructions a byte, more than half a microsecond
a pod); glibc's ``memmem`` skips by byte pairs and reads a few bytes per step.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE


cdef extern from "string.h" nogil:
    # A GNU extension: Python.h (included first) defines _GNU_SOURCE.
    void* memmem(const void* haystack, size_t haystacklen, const void* needle,
                 size_t needlelen)


cdef inline bint _holds(object payload, bytes needle) except -1:
    if type(payload) is bytes:
        return memmem(PyBytes_AS_STRING(payload), <size_t>PyBytes_GET_SIZE(payload),
                      PyBytes_AS_STRING(needle), <size_t>PyBytes_GET_SIZE(needle)) != NULL
    return needle in payload  # bytearray, memoryview: as a search per payload does


def mentioning(rows, bytes needle not None) -> list:
    """The rows (``(position, payload)`` pairs, or anything indexable so) whose
    payload holds ``needle``, in order; the same as ``[r for r in rows if needle in
    r[1]]``."""
    cdef list out = []
    for row in rows:
        if _holds(row[1], needle):
            out.append(row)
    return out


def all_hold(rows, bytes needle not None) -> bool:
    """Whether every row's payload holds ``needle`` (True for no rows): ``all(needle
    in r[1] for r in rows)``, stopping at the first that does not."""
    for row in rows:
        if not _holds(row[1], needle):
            return False
    return True
