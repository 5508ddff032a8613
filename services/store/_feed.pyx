"""Reading the feed's messages (``services/store/feed.py``, which describes the
layout and writes them), in C: a replica reads every message of the feed, and
decoding one in Python (a ``struct`` call a part, slices, a ``bisect`` and a
``bytes.find`` per decision of its own, a JSON decode per proposal id) cost it
~2,500 instructions per pod of the flow more than this (``python -m
esched.services.bench_follow 5000 6 feed``), half of what applying the pods'
claims costs.
"""

import orjson

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport uint32_t, uint64_t
from libc.string cimport memcmp


cdef extern from "string.h" nogil:
    # A GNU extension: Python.h (included first) defines _GNU_SOURCE.
    void* memmem(const void* haystack, size_t haystacklen, const void* needle,
                 size_t needlelen)


cdef extern from "Python.h":
    str PyUnicode_DecodeUTF8(const char* s, Py_ssize_t size, const char* errors)


cdef bytes _MAGIC = b"EFD1"
#: First bytes of a feed message.
MAGIC = _MAGIC
#: Kinds of a message's parts (see services/store/feed.py).
CLAIMS = 0
FOLD = 1
DECISIONS = 2
COMMITS = 3
# (the header: magic, u64 after, u64 upto, u8 flags, u32 parts; a part's: u8 kind,
# u64 position, u32 length)
cdef Py_ssize_t _HEAD = 25
cdef Py_ssize_t _PART = 13


class FeedError(ValueError):
    """Bytes that are not a feed message."""


# Little-endian, as the writer packs them (struct "<"), on any host: compilers make
# one load of these shifts where the host is little-endian.
cdef inline uint64_t _u64(const unsigned char* b) noexcept:
    return (<uint64_t>_u32(b)) | ((<uint64_t>_u32(b + 4)) << 32)


cdef inline uint32_t _u32(const unsigned char* b) noexcept:
    return (<uint32_t>b[0]) | ((<uint32_t>b[1]) << 8) | ((<uint32_t>b[2]) << 16) \
        | ((<uint32_t>b[3]) << 24)


cdef const unsigned char* _header(bytes raw) except NULL:
    if PyBytes_GET_SIZE(raw) < _HEAD or memcmp(PyBytes_AS_STRING(raw), PyBytes_AS_STRING(_MAGIC), 4):
        raise FeedError("not a feed message")
    return <const unsigned char*>PyBytes_AS_STRING(raw)


cdef inline bytes _bytes(object raw):
    # (a bus client may hand a record's value over as another buffer)
    return <bytes>raw if type(raw) is bytes else bytes(raw)


def message_range(raw) -> tuple:
    """``(after, upto)`` of a feed message (bytes, or any buffer), read from its
    header alone (a follower skips the messages its position covers without decoding
    them)."""
    raw = _bytes(raw)
    cdef const unsigned char* b = _header(raw)
    return _u64(b + 4), _u64(b + 12)


def decode_message(raw) -> tuple:
    """``(after, upto, flags, parts)`` of a feed message (bytes, or any buffer),
    ``parts`` a list of ``(kind, position, bytes)``; :class:`FeedError` if it is not
    one."""
    raw = _bytes(raw)
    cdef const unsigned char* b = _header(raw)
    cdef uint64_t after = _u64(b + 4), upto = _u64(b + 12)
    cdef int flags = b[20]
    cdef uint32_t n = _u32(b + 21), j
    cdef Py_ssize_t i = _HEAD, size = PyBytes_GET_SIZE(raw), length
    cdef int kind
    cdef list parts = []
    for j in range(n):
        if i + _PART > size:
            raise FeedError("truncated feed message")
        kind = b[i]
        length = _u32(b + i + 9)
        if length > size - i - _PART or kind > COMMITS:
            raise FeedError("truncated feed message")
        parts.append((kind, _u64(b + i + 1),
                      PyBytes_FromStringAndSize(<const char*>(b + i + _PART), length)))
        i += _PART + length
    if i != size or upto < after:
        raise FeedError("a malformed feed message")
    return after, upto, flags, parts


cdef struct _Entries:
    # A decisions part's tables (see feed.decisions_part): n entries, their u32
    # offsets and u64 positions, and the payloads from ``base`` on.
    const unsigned char* b
    Py_ssize_t n, base, size


cdef int _entries(bytes part, _Entries* e) except -1:
    cdef Py_ssize_t size = PyBytes_GET_SIZE(part)
    e.b = <const unsigned char*>PyBytes_AS_STRING(part)
    if size < 4:
        raise FeedError("truncated decisions part")
    e.n = _u32(e.b)
    e.base = 4 + 12 * e.n
    if e.base > size:
        raise FeedError("truncated decisions part")
    e.size = size
    # (offsets checked once: the searches below then trust them)
    cdef Py_ssize_t k, at = 0, nxt
    for k in range(e.n):
        nxt = _u32(e.b + 4 + 4 * k)
        if nxt < at or e.base + nxt > size:
            raise FeedError("a decisions part's offsets out of order")
        at = nxt
    return 0


cdef inline Py_ssize_t _start(const _Entries* e, Py_ssize_t k) noexcept:
    # Entry k's offset into the part (k == n: the part's end).
    return e.base + _u32(e.b + 4 + 4 * k) if k < e.n else e.size


cdef inline long long _position(const _Entries* e, Py_ssize_t k) noexcept:
    return <long long>_u64(e.b + 4 + 4 * e.n + 8 * k)


cdef Py_ssize_t _next(const _Entries* e, Py_ssize_t k, bytes needle) except -2:
    # The first entry from k on whose bytes hold ``needle`` (None: entry k), or -1.
    # The part's bytes from entry k on are searched as one block; a hit is placed by
    # a binary search over the offsets, and an entry's bytes must hold the whole
    # needle (a hit across two entries is searched on from the second).
    if k >= e.n:
        return -1
    if needle is None:
        return k
    cdef const char* nb = PyBytes_AS_STRING(needle)
    cdef Py_ssize_t m = PyBytes_GET_SIZE(needle), at, lo, hi, mid
    cdef const unsigned char* hit
    cdef Py_ssize_t from_ = _start(e, k)
    while True:
        hit = <const unsigned char*>memmem(e.b + from_, <size_t>(e.size - from_), nb, <size_t>m)
        if hit == NULL:
            return -1
        at = hit - e.b
        lo = k
        hi = e.n - 1
        while lo < hi:  # the last entry that starts at or before the hit
            mid = (lo + hi + 1) >> 1
            if _start(e, mid) <= at:
                lo = mid
            else:
                hi = mid - 1
        if at + m <= _start(e, lo + 1):
            return lo
        k = lo + 1
        if k >= e.n:
            return -1
        from_ = _start(e, k)


cdef inline bytes _entry(const _Entries* e, Py_ssize_t k):
    cdef Py_ssize_t a = _start(e, k), z = _start(e, k + 1)
    return PyBytes_FromStringAndSize(<const char*>(e.b + a), z - a)


def decisions_mentioning(bytes part not None, bytes mentions) -> list:
    """The ``(position, payload)`` of a ``DECISIONS`` (or ``COMMITS``) part's entries
    whose bytes hold ``mentions`` (None: all of them), in order, found by searching
    the part's bytes as one block: the others cost no step of their own."""
    cdef _Entries e
    _entries(part, &e)
    cdef list out = []
    cdef Py_ssize_t k = _next(&e, 0, mentions)
    while k >= 0:
        out.append((_position(&e, k), _entry(&e, k)))
        k = _next(&e, k + 1, mentions)
    return out


def commits_mentioning(bytes part not None, bytes mentions) -> list:
    """The ``(position, proposal id)`` of a ``COMMITS`` part's entries that hold
    ``mentions`` (None: all), each id the text of the JSON string whose characters
    (without its quotes) the entry holds: an entry without escapes or control
    characters is that text's UTF-8 as it is, any other is decoded as JSON."""
    cdef _Entries e
    _entries(part, &e)
    cdef list out = []
    cdef Py_ssize_t k = _next(&e, 0, mentions), a, z, i
    cdef bint plain
    while k >= 0:
        a = _start(&e, k)
        z = _start(&e, k + 1)
        plain = True
        for i in range(a, z):
            if e.b[i] < 0x20 or e.b[i] == 0x5C or e.b[i] == 0x22:  # control, \, "
                plain = False
                break
        if plain:
            pid = PyUnicode_DecodeUTF8(<const char*>(e.b + a), z - a, NULL)
        else:
            pid = orjson.loads(b'"' + PyBytes_FromStringAndSize(<const char*>(e.b + a), z - a)
                               + b'"')
        out.append((_position(&e, k), pid))
        k = _next(&e, k + 1, mentions)
    return out
