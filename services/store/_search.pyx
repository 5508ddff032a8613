"""Byte searches over a fetched batch of ``(position, payload)`` pairs, in C.

A replica follows every event of the log and looks into each batch twice: for the
decisions of its own proposals (payloads holding its proposal id prefix) and for any
event that may make work (a payload that is not a committed placement). CPython's
``bytes.find`` skips poorly over JSON (the needles' characters, hex digits and
dashes, are everywhere in it: ~6 instructions a byte, more than half a microsecond
a pod). The search here is Horspool's over byte pairs, as glibc's ``memmem`` does
for short needles, with its shift table built once per batch rather than once per
payload (the table was a third of the ~490 instructions ``memmem`` took over a
stored event).
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE


cdef extern from "string.h" nogil:
    # A GNU extension: Python.h (included first) defines _GNU_SOURCE.
    void* memmem(const void* haystack, size_t haystacklen, const void* needle,
                 size_t needlelen)


cdef extern from *:
    """
    #include <string.h>
    /* Horspool's search on the window's last byte pair: a shift, by a hash of that
       pair, that no occurrence of the needle can be skipped by. Needles of 2..255
       bytes. */
    typedef struct {
        size_t m;                   /* needle length */
        const unsigned char* ne;    /* the needle (its bytes object outlives the search) */
        unsigned char shift[256];   /* pair hash -> least shift that may align that pair */
    } esched_pairs;

    static inline unsigned esched_pair_hash(const unsigned char* p) {
        return (((unsigned)p[0] << 4) ^ p[1]) & 0xffu;
    }

    static void esched_pairs_init(esched_pairs* t, const unsigned char* ne, size_t m) {
        size_t j;
        t->m = m;
        t->ne = ne;
        /* A pair not in the needle's first m-1 bytes: the next window may begin at
           its second byte. */
        memset(t->shift, (int)(m - 1), sizeof t->shift);
        /* The needle's pair ending at j (1..m-2) lines up after a shift of m-1-j; a
           later j shifts less, so it overwrites: each hash keeps its least shift. */
        for (j = 1; j + 1 < m; j++)
            t->shift[esched_pair_hash(ne + j - 1)] = (unsigned char)(m - 1 - j);
    }

    static int esched_pairs_in(const esched_pairs* t, const unsigned char* hs, size_t n) {
        const size_t m = t->m;
        const unsigned char* ne = t->ne;
        const unsigned char a = ne[m - 2], b = ne[m - 1];
        size_t e;  /* the window's last byte */
        for (e = m - 1; e < n; e += t->shift[esched_pair_hash(hs + e - 1)]) {
            if (hs[e] == b && hs[e - 1] == a && memcmp(hs + e + 1 - m, ne, m - 2) == 0)
                return 1;
        }
        return 0;
    }
    """
    ctypedef struct esched_pairs:
        size_t m
    void esched_pairs_init(esched_pairs* t, const unsigned char* ne, size_t m) noexcept nogil
    bint esched_pairs_in(const esched_pairs* t, const unsigned char* hs, size_t n) noexcept nogil


cdef inline bint _holds(object payload, bytes needle, const esched_pairs* pairs) except -1:
    if type(payload) is bytes:
        if pairs != NULL:
            return esched_pairs_in(pairs, <const unsigned char*>PyBytes_AS_STRING(payload),
                                   <size_t>PyBytes_GET_SIZE(payload))
        return memmem(PyBytes_AS_STRING(payload), <size_t>PyBytes_GET_SIZE(payload),
                      PyBytes_AS_STRING(needle), <size_t>PyBytes_GET_SIZE(needle)) != NULL
    return needle in payload  # bytearray, memoryview: as a search per payload does


cdef inline const esched_pairs* _pairs_of(bytes needle, esched_pairs* table) noexcept:
    # The needle's shift table in ``table``, or NULL (memmem's) outside 2..255 bytes.
    cdef Py_ssize_t m = PyBytes_GET_SIZE(needle)
    if m < 2 or m > 255:
        return NULL
    esched_pairs_init(table, <const unsigned char*>PyBytes_AS_STRING(needle), <size_t>m)
    return table


def mentioning(rows, bytes needle not None) -> list:
    """The rows (``(position, payload)`` pairs, or anything indexable so) whose
    payload holds ``needle``, in order; the same as ``[r for r in rows if needle in
    r[1]]``."""
    cdef esched_pairs table
    cdef const esched_pairs* pairs = _pairs_of(needle, &table)
    cdef list out = []
    for row in rows:
        if _holds(row[1], needle, pairs):
            out.append(row)
    return out


def all_hold(rows, bytes needle not None) -> bool:
    """Whether every row's payload holds ``needle`` (True for no rows): ``all(needle
    in r[1] for r in rows)``, stopping at the first that does not."""
    cdef esched_pairs table
    cdef const esched_pairs* pairs = _pairs_of(needle, &table)
    for row in rows:
        if not _holds(row[1], needle, pairs):
            return False
    return True
