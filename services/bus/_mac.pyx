"""The internal records' MAC (HMAC-SHA256, RFC 2104) in C: the rule of
:mod:`esched.services.bus.signing`, which keeps the keys, the header's name and the
words of each refusal.

A key's padded inner and outer SHA-256 states are computed once (:class:`Mac`); a
record's MAC is then two copies of a small struct and two short hashes through
OpenSSL's libcrypto, called directly. ``hashlib`` reaches the same SHA-256 code
through a Python object per hash and a context copy per ``digest()``, which cost
more than hashing a record of a few hundred bytes; every record on the internal
topics is signed once and checked once.
"""

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.ref cimport Py_INCREF
from libc.stdint cimport uint8_t

from esched.services._openssl cimport CRYPTO_memcmp, SHA256_CTX, SHA256_Final, SHA256_Init, SHA256_Update

DEF BLOCK = 64
DEF HASH = 32
DEF HEX = 64

cdef const char* _DIGITS = b"0123456789abcdef"

#: :func:`refusal` codes (``signing.Keyring.refusal`` words them).
UNSIGNED = 1
TWO_HEADERS = 2
TOO_LONG = 3
UNKNOWN_KEY = 4
MISMATCH = 5


@cython.final
@cython.auto_pickle(False)  # holds key material: never pickled
cdef class Mac:
    """HMAC-SHA256 under one secret (a secret longer than the 64-byte block is hashed
    first, as RFC 2104 says)."""

    cdef SHA256_CTX _inner
    cdef SHA256_CTX _outer

    def __init__(self, bytes secret not None):
        cdef uint8_t key[BLOCK]
        cdef uint8_t pad[BLOCK]
        cdef Py_ssize_t n = PyBytes_GET_SIZE(secret), i
        cdef SHA256_CTX c
        for i in range(BLOCK):
            key[i] = 0
        if n > BLOCK:
            SHA256_Init(&c)
            SHA256_Update(&c, PyBytes_AS_STRING(secret), n)
            SHA256_Final(key, &c)
        else:
            for i in range(n):
                key[i] = <uint8_t>PyBytes_AS_STRING(secret)[i]
        for i in range(BLOCK):
            pad[i] = key[i] ^ 0x36
        SHA256_Init(&self._inner)
        SHA256_Update(&self._inner, pad, BLOCK)
        for i in range(BLOCK):
            pad[i] = key[i] ^ 0x5C
        SHA256_Init(&self._outer)
        SHA256_Update(&self._outer, pad, BLOCK)

    cdef void _hex(self, const char* data, Py_ssize_t n, char* out) noexcept nogil:
        """The MAC of ``data`` as 64 lowercase hex digits into ``out``."""
        cdef SHA256_CTX c = self._inner
        cdef uint8_t digest[HASH]
        cdef int i
        SHA256_Update(&c, data, n)
        SHA256_Final(digest, &c)
        c = self._outer
        SHA256_Update(&c, digest, HASH)
        SHA256_Final(digest, &c)
        for i in range(HASH):
            out[2 * i] = _DIGITS[digest[i] >> 4]
            out[2 * i + 1] = _DIGITS[digest[i] & 15]

    def hexdigest(self, bytes value not None) -> bytes:
        """The MAC of ``value`` as lowercase hex digits (what a signature carries)."""
        cdef bytes out = PyBytes_FromStringAndSize(NULL, HEX)
        self._hex(PyBytes_AS_STRING(value), PyBytes_GET_SIZE(value), PyBytes_AS_STRING(out))
        return out

    def signature(self, bytes prefix not None, bytes value not None) -> bytes:
        """``prefix`` followed by the MAC of ``value`` in hex."""
        return _signature(self, prefix, value)


cdef bytes _signature(Mac mac, bytes prefix, bytes value):
    cdef Py_ssize_t k = PyBytes_GET_SIZE(prefix)
    cdef bytes out = PyBytes_FromStringAndSize(NULL, k + HEX)
    cdef char* p = PyBytes_AS_STRING(out)
    cdef Py_ssize_t i
    for i in range(k):
        p[i] = PyBytes_AS_STRING(prefix)[i]
    mac._hex(PyBytes_AS_STRING(value), PyBytes_GET_SIZE(value), p + k)
    return out


def signed(Mac mac not None, bytes prefix not None, str header not None, list records not None):
    """``(key, value)`` records as ``(key, value, ((header, prefix + MAC), ))``: one
    call for a batch of records."""
    cdef Py_ssize_t n = len(records), i
    cdef list out = PyList_New(n)
    cdef object rec, key, value, item
    for i in range(n):
        rec = records[i]
        key, value = rec
        if type(value) is not bytes:
            raise TypeError(f"a record's value is bytes, not {type(value).__name__}")
        item = (key, value, ((header, _signature(mac, prefix, <bytes>value)),))
        Py_INCREF(item)
        PyList_SET_ITEM(out, i, item)
    return out


def refusal(dict macs not None, str header not None, object headers, bytes value not None,
            Py_ssize_t max_header):
    """Why a record with ``headers`` and ``value`` is refused: None when one ``header``
    carries ``<key id>:<hex MAC>`` under a key of ``macs`` (key id bytes -> :class:`Mac`)
    matching ``value``; else ``(code, detail)``: :data:`UNSIGNED`, :data:`TWO_HEADERS`,
    :data:`TOO_LONG` (detail: the length), :data:`UNKNOWN_KEY` or :data:`MISMATCH`
    (detail: the key id as sent)."""
    return _refusal(macs, header, headers, value, max_header)


def split(dict macs not None, str header not None, object msgs, Py_ssize_t max_header):
    """:func:`refusal` over records (objects with ``headers`` and ``value``): the
    accepted ones, in order, and ``(record, code, detail)`` of each refused one."""
    cdef list accepted = [], refused = []
    cdef object m, why
    for m in msgs:
        why = _refusal(macs, header, m.headers, m.value, max_header)
        if why is None:
            accepted.append(m)
        else:
            refused.append((m, why[0], why[1]))
    return accepted, refused


cdef object _refusal(dict macs, str header, object headers, object value_obj,
                     Py_ssize_t max_header):
    cdef object sig = None, name, hv, kid, found
    cdef Py_ssize_t n, colon, i
    cdef const char* s
    cdef char mine[HEX]
    cdef Mac mac
    cdef bytes value
    if type(value_obj) is not bytes:
        raise TypeError(f"a record's value is bytes, not {type(value_obj).__name__}")
    value = <bytes>value_obj
    for name, hv in headers:
        if name == header:
            if sig is not None:
                return TWO_HEADERS, None
            sig = hv if hv is not None else b""
    if sig is None:
        return UNSIGNED, None
    if type(sig) is not bytes:
        sig = bytes(sig)
    n = PyBytes_GET_SIZE(sig)
    if n > max_header:
        return TOO_LONG, n
    s = PyBytes_AS_STRING(sig)
    colon = -1
    for i in range(n - 1, -1, -1):
        if s[i] == b":":
            colon = i
            break
    # No colon: no key id (as bytes.rpartition gives it).
    kid = PyBytes_FromStringAndSize(s, colon if colon >= 0 else 0)
    found = macs.get(kid) if colon >= 0 else None
    if found is None:
        return UNKNOWN_KEY, kid
    mac = <Mac>found
    mac._hex(PyBytes_AS_STRING(value), PyBytes_GET_SIZE(value), mine)
    # Constant time over the digits, as hmac.compare_digest.
    if n - colon - 1 != HEX or CRYPTO_memcmp(mine, s + colon + 1, HEX) != 0:
        return MISMATCH, kid
    return None
