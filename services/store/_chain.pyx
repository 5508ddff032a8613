"""The hash chain's rule, in one place (see :mod:`esched.services.store.chain`).

``digest(n) = sha256(int8(position) int8(stream_version) int4(len payload) payload
id US type US stream)`` and ``hash(n) = sha256(hash(n-1) || digest(n))``. The
appends of both adapters, the SQLite walk, the PostgreSQL migration's backfill and
:class:`CopyChain` (``esched store verify`` on PostgreSQL) all hash through
:func:`_digest` and :func:`_link` below.

SHA-256 is OpenSSL's libcrypto, called directly: hashlib reaches the same code but
through a Python call and an object per hash, which is most of the cost for rows
of a few hundred bytes.
"""

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy, memset

from esched.services._openssl cimport SHA256_CTX, SHA256_Final, SHA256_Init, SHA256_Update

DEF HASH = 32
# COPY's binary format (PostgreSQL docs, "COPY", File Formats): signature, flags,
# header extension length; then per tuple an int16 field count (-1 ends the data)
# and per field an int32 length (-1: NULL) and the bytes.
cdef bytes _SIGNATURE = b"PGCOPY\n\xff\r\n\x00"
DEF FIELDS = 7
cdef const uint8_t _US = 0x1F

#: The columns :class:`CopyChain` reads, in its order.
COPY_COLUMNS = "position, stream_version, payload, id, type, stream, hash"


cdef inline void _put_be(uint8_t* p, uint64_t v, int n) noexcept nogil:
    cdef int i
    for i in range(n - 1, -1, -1):
        p[i] = v & 0xFF
        v >>= 8


cdef inline uint64_t _get_be(const uint8_t* p, int n) noexcept nogil:
    cdef uint64_t v = 0
    cdef int i
    for i in range(n):
        v = (v << 8) | p[i]
    return v


cdef void _digest(
    int64_t position, int64_t stream_version, const uint8_t* payload, size_t n_payload,
    const uint8_t* id, size_t n_id, const uint8_t* type_, size_t n_type,
    const uint8_t* stream, size_t n_stream, uint8_t* out,
) noexcept nogil:
    """digest(n) into ``out`` (32 bytes); texts are UTF-8."""
    cdef SHA256_CTX c
    cdef uint8_t head[20]
    _put_be(head, <uint64_t>position, 8)
    _put_be(head + 8, <uint64_t>stream_version, 8)
    _put_be(head + 16, <uint32_t>n_payload, 4)
    SHA256_Init(&c)
    SHA256_Update(&c, head, 20)
    SHA256_Update(&c, payload, n_payload)
    SHA256_Update(&c, id, n_id)
    SHA256_Update(&c, &_US, 1)
    SHA256_Update(&c, type_, n_type)
    SHA256_Update(&c, &_US, 1)
    SHA256_Update(&c, stream, n_stream)
    SHA256_Final(out, &c)


cdef void _link(const uint8_t* prev, const uint8_t* digest, uint8_t* out) noexcept nogil:
    """hash(n) = sha256(hash(n-1) || digest(n)) into ``out``."""
    cdef SHA256_CTX c
    SHA256_Init(&c)
    SHA256_Update(&c, prev, HASH)
    SHA256_Update(&c, digest, HASH)
    SHA256_Final(out, &c)


cdef inline const uint8_t* _bytes(bytes b):
    return <const uint8_t*>PyBytes_AS_STRING(b)


def row_digest(
    int64_t position, int64_t stream_version, str id, str type, str stream, bytes payload
) -> bytes:
    """``digest(n)`` of a row (see the module docstring)."""
    cdef bytes i = id.encode(), t = type.encode(), s = stream.encode()
    cdef uint8_t out[HASH]
    _digest(
        position, stream_version, _bytes(payload), PyBytes_GET_SIZE(payload),
        _bytes(i), PyBytes_GET_SIZE(i), _bytes(t), PyBytes_GET_SIZE(t),
        _bytes(s), PyBytes_GET_SIZE(s), out,
    )
    return PyBytes_FromStringAndSize(<char*>out, HASH)


def link(bytes prev, bytes digest) -> bytes:
    """The chain's next hash: ``sha256(prev || digest)``."""
    if PyBytes_GET_SIZE(prev) != HASH or PyBytes_GET_SIZE(digest) != HASH:
        raise ValueError("a chain hash and a digest are 32 bytes")
    cdef uint8_t out[HASH]
    _link(_bytes(prev), _bytes(digest), out)
    return PyBytes_FromStringAndSize(<char*>out, HASH)


@cython.auto_pickle(False)  # a walk in progress, not a value
cdef class CopyChain:
    """Checks one range of the chain as it streams in from
    ``COPY (SELECT <COPY_COLUMNS> ... ORDER BY position) TO STDOUT (FORMAT binary)``
    over positions ``after .. upto``.

    With ``after`` > 0 the first row is the range's predecessor: its *stored* hash
    starts the walk (a chain whose every link matches its stored predecessor is a
    valid chain, so ranges are checked independently). :meth:`feed` takes the
    stream's chunks as they come (a row may span two); after :meth:`finish`,
    ``broken_at`` and ``reason`` name the first broken link, or are None.
    """

    cdef uint8_t prev[HASH]
    cdef int64_t expected
    cdef bytes start
    cdef bint predecessor
    cdef bint header
    cdef bint ended
    cdef bytes tail
    #: links checked so far
    cdef readonly int64_t checked
    #: the first broken position and why (None while the range holds)
    cdef readonly object broken_at
    cdef readonly object reason
    #: the range: positions after .. upto
    cdef readonly int64_t after
    cdef readonly int64_t upto

    def __init__(self, int64_t after, int64_t upto, bytes start):
        """``start``: the hash before position 1 (the chain's zero hash), used when
        ``after`` is 0."""
        if PyBytes_GET_SIZE(start) != HASH:
            raise ValueError("the chain's start hash is 32 bytes")
        self.after = after
        self.upto = upto
        self.start = start
        self.restart()

    def restart(self) -> None:
        """Forget what was fed: the stream starts again (a retried COPY)."""
        if self.after == 0:
            memcpy(self.prev, _bytes(self.start), HASH)
            self.expected = 1
            self.predecessor = False
        else:
            memset(self.prev, 0, HASH)
            self.expected = self.after
            self.predecessor = True
        self.header = False
        self.ended = False
        self.tail = b""
        self.checked = 0
        self.broken_at = None
        self.reason = None

    @property
    def last_hash(self) -> bytes:
        """The hash of the last row walked (its stored hash, when the range holds)."""
        return PyBytes_FromStringAndSize(<char*>self.prev, HASH)

    cdef void _break(self, int64_t position, str reason):
        self.broken_at = position
        self.reason = reason

    def feed(self, chunk) -> None:
        """Check the rows of ``chunk`` (bytes-like; with the partial row the last
        chunk left)."""
        if self.broken_at is not None or self.ended:
            return
        cdef const uint8_t[::1] view
        cdef bytes data
        if PyBytes_GET_SIZE(self.tail):
            data = self.tail + bytes(chunk)
            view = data
        else:
            view = chunk
        if view.shape[0] == 0:
            return
        cdef const uint8_t* p = &view[0]
        cdef Py_ssize_t n = view.shape[0]
        cdef Py_ssize_t off = self._rows(p, n)
        self.tail = PyBytes_FromStringAndSize(<const char*>p + off, n - off) if off < n else b""

    cdef Py_ssize_t _rows(self, const uint8_t* p, Py_ssize_t n) except -1:
        """Walk the whole rows of ``p[:n]``; returns where the unread rest starts."""
        cdef Py_ssize_t off = 0, row, k
        cdef Py_ssize_t starts[FIELDS]
        cdef Py_ssize_t sizes[FIELDS]
        cdef int32_t size
        cdef int fields
        if not self.header:
            if n < 19:
                return 0
            if memcmp(p, _bytes(_SIGNATURE), 11) != 0:
                raise ValueError("not a COPY (FORMAT binary) stream")
            off = 19 + <Py_ssize_t>_get_be(p + 15, 4)
            if n < off:
                return 0
            self.header = True
        while True:
            row = off
            if n - off < 2:
                return off
            fields = <int16_t>_get_be(p + off, 2)
            off += 2
            if fields == -1:
                self.ended = True
                return n
            if fields != FIELDS:
                raise ValueError(f"a COPY row of {fields} columns, not {FIELDS}")
            for k in range(FIELDS):
                if n - off < 4:
                    break
                size = <int32_t>_get_be(p + off, 4)
                off += 4
                if size < 0:
                    starts[k], sizes[k] = 0, -1
                    continue
                if n - off < size:
                    break
                starts[k], sizes[k] = off, size
                off += size
            else:
                if sizes[0] != 8 or sizes[1] != 8 or sizes[2] < 0 or sizes[3] < 0 \
                        or sizes[4] < 0 or sizes[5] < 0:
                    raise ValueError("a COPY row not of the chain's columns")
                if not self._row(<int64_t>_get_be(p + starts[0], 8), p, starts, sizes):
                    return n
                continue
            return row  # the row goes on in the next chunk

    cdef bint _row(
        self, int64_t position, const uint8_t* p, Py_ssize_t* starts, Py_ssize_t* sizes
    ):
        """Walk one row; False once the chain is broken."""
        cdef uint8_t digest[HASH]
        cdef uint8_t now[HASH]
        if position != self.expected:
            self._break(
                self.expected,
                f"position {self.expected} is missing (next stored: {position})",
            )
            return False
        if self.predecessor:
            self.predecessor = False
            if sizes[6] != HASH:
                self._break(position, "no hash stored")
                return False
            memcpy(self.prev, p + starts[6], HASH)
            self.expected += 1
            return True
        _digest(
            position, <int64_t>_get_be(p + starts[1], 8), p + starts[2], sizes[2],
            p + starts[3], sizes[3], p + starts[4], sizes[4], p + starts[5], sizes[5], digest,
        )
        _link(self.prev, digest, now)
        if sizes[6] != HASH or memcmp(now, p + starts[6], HASH) != 0:
            self._break(
                position,
                "no hash stored" if sizes[6] < 0
                else "stored hash does not match the event's content and the chain before it",
            )
            return False
        memcpy(self.prev, now, HASH)
        self.expected += 1
        self.checked += 1
        return True

    def finish(self) -> None:
        """After the stream: a range that stopped short of ``upto`` lost its last rows."""
        if self.broken_at is None and self.expected <= self.upto:
            self._break(self.expected, f"position {self.expected} is missing")
