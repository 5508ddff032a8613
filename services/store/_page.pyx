"""A page of the log read as one value, split into ``(position, payload)`` pairs in C.

PostgreSQL's :meth:`~esched.services.store.postgres.PostgresEventStore.read_payloads`
asks the server for a page as ONE ``bytea`` (:data:`PAGE_SQL`): per row the
position (8 bytes, big-endian, ``int8send``), the payload's length (4 bytes,
big-endian, ``int4send``) and the payload. One value crosses the wire instead of a
DataRow message per row, so the client does not parse a message, build an asyncpg
Record and decode two columns per row (~1,500 instructions a row), and the pairs
come out of one pass here (~a tenth of that: a tuple, an int and the payload's
bytes per row). Every replica reads every row of the log, so this is the part of
following that each added replica pays in its own process.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.long cimport PyLong_FromLongLong
from cpython.ref cimport Py_INCREF
from libc.stdint cimport int64_t, uint32_t, uint64_t

from operator import itemgetter

__all__ = ["PAGE_SQL", "split_page"]

#: The page query: ``$1 < position <= $2``, rows in the table's (heap) order, which
#: is position order for the append-only log (:func:`split_page` sorts otherwise).
#: No ORDER BY: with stale statistics the planner would sort the page on disk.
PAGE_SQL = (
    "SELECT string_agg(int8send(position) || int4send(length(payload)) || payload, ''::bytea)"
    " FROM events WHERE position > $1 AND position <= $2"
)

cdef enum:
    HEADER = 12  # position (8) + length (4)

cdef object _by_position = itemgetter(0)


cdef inline uint64_t _be64(const unsigned char* p) noexcept nogil:
    return ((<uint64_t>p[0] << 56) | (<uint64_t>p[1] << 48) | (<uint64_t>p[2] << 40)
            | (<uint64_t>p[3] << 32) | (<uint64_t>p[4] << 24) | (<uint64_t>p[5] << 16)
            | (<uint64_t>p[6] << 8) | <uint64_t>p[7])


cdef inline uint32_t _be32(const unsigned char* p) noexcept nogil:
    return ((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8)
            | <uint32_t>p[3])


def split_page(page) -> list:
    """The ``(position, payload)`` pairs of a page as :data:`PAGE_SQL` returns it
    (None, an empty page: ``[]``), in position order: the rows as the server sent
    them, sorted by position if they were not. Raises ValueError if the page is cut
    short or a position repeats."""
    if page is None:
        return []
    if type(page) is not bytes:
        page = bytes(page)
    cdef const unsigned char* b = <const unsigned char*>PyBytes_AS_STRING(page)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(page)
    cdef Py_ssize_t i = 0, rows = 0, k = 0
    cdef uint32_t length
    # First pass: count the rows and check the framing, so the list is built at its
    # size and a malformed page never yields a partial one.
    while i < n:
        if n - i < HEADER:
            raise ValueError(f"log page cut short at byte {i} of {n}")
        length = _be32(b + i + 8)
        if <Py_ssize_t>length > n - i - HEADER:
            raise ValueError(f"log page cut short at byte {i} of {n}")
        i += HEADER + length
        rows += 1
    cdef list out = PyList_New(rows)
    cdef int64_t position, last = 0
    cdef bint ordered = True
    cdef object pair
    i = 0
    for k in range(rows):
        position = <int64_t>_be64(b + i)
        length = _be32(b + i + 8)
        if k and position <= last:
            ordered = False
        last = position
        pair = (PyLong_FromLongLong(position),
                PyBytes_FromStringAndSize(<const char*>b + i + HEADER, length))
        Py_INCREF(pair)  # PyList_SET_ITEM steals the reference
        PyList_SET_ITEM(out, k, pair)
        i += HEADER + length
    if not ordered:
        # Not seen from an append-only table, but heap order is not a promise.
        out.sort(key=_by_position)
        for k in range(1, rows):
            if out[k][0] == out[k - 1][0]:
                raise ValueError(f"log page repeats position {out[k][0]}")
    return out
