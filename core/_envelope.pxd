# A strict scanner of stored CloudEvents envelopes (JSON bytes), for the fold's
# decoder (ClusterState.apply_payloads): it finds the byte spans of the few fields
# the fold reads, so a payload need not become a dozen dicts first.
#
# Its contract is conservative acceptance: it says yes only to a document that
# orjson parses to the same values, and "bail" (-1) to anything else, after which
# the caller decodes the whole payload with orjson exactly as before (so bad input
# raises the same error, and odd but valid input folds the same). What it bails on:
# any byte >= 0x80 (no UTF-8 to validate), any backslash (no escapes to decode),
# control characters in strings, numbers with an exponent or longer than 18
# characters (orjson turns 1e999 into an error and big integers into floats),
# nesting deeper than MAX_DEPTH, and everything that is not JSON.
#
# Spans are [start, end) byte offsets; a string's span is its content, without
# the quotes (no escapes, so the content is the value).
#
# The buffer is a bytes object's: b[n] is its terminating NUL, which skip_ws reads
# in place of a bound check.

from libc.stdint cimport uint64_t
from libc.string cimport memcmp, memcpy


cdef extern from *:
    """
    #if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
    #error "skip_string reads eight bytes as a little-endian word"
    #endif
    /* Sixteen bytes at a time where SSE2 is (every x86-64): a bit per byte, set for
       a quote (esched_quotes16), or for a quote, a backslash, a control character or
       a byte >= 0x80 (esched_special16: a signed compare below 0x20 catches both of
       the last two). Elsewhere 0: the callers then take their eight-byte loops. */
    #if defined(__SSE2__)
    #include <emmintrin.h>
    #define ESCHED_WIDE 16
    static inline unsigned int esched_quotes16(const unsigned char* p) {
        __m128i v = _mm_loadu_si128((const __m128i*)p);
        return (unsigned int)_mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(0x22)));
    }
    static inline unsigned int esched_special16(const unsigned char* p) {
        __m128i v = _mm_loadu_si128((const __m128i*)p);
        __m128i m = _mm_or_si128(
            _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8(0x22)),
                         _mm_cmpeq_epi8(v, _mm_set1_epi8(0x5c))),
            _mm_cmplt_epi8(v, _mm_set1_epi8(0x20)));
        return (unsigned int)_mm_movemask_epi8(m);
    }
    #else
    #define ESCHED_WIDE 0
    static inline unsigned int esched_quotes16(const unsigned char* p) { (void)p; return 0; }
    static inline unsigned int esched_special16(const unsigned char* p) { (void)p; return 0; }
    #endif
    """
    int __builtin_ctzll(unsigned long long) nogil
    int __builtin_ctz(unsigned int) nogil
    const Py_ssize_t ESCHED_WIDE
    unsigned int esched_quotes16(const unsigned char* p) nogil
    unsigned int esched_special16(const unsigned char* p) nogil

cdef enum:
    MAX_DEPTH = 64     # deeper documents are left to orjson (its own limit is higher)
    MAX_NUMBER = 18    # characters; int64 holds every 18-digit integer


ctypedef struct Span:
    Py_ssize_t start
    Py_ssize_t end


cdef inline Py_ssize_t skip_ws(const unsigned char* b, Py_ssize_t i, Py_ssize_t n) noexcept nogil:
    # Stored envelopes are compact (orjson writes no whitespace): one compare leaves
    # at any byte above the space, which is every byte here but a document's odd one.
    # No bound check: b[n] is the bytes object's terminating NUL (see above), not
    # whitespace, and i never passes n here.
    while b[i] <= 0x20 and (b[i] == 0x20 or b[i] == 0x0a or b[i] == 0x0d or b[i] == 0x09):
        i += 1
    return i


cdef inline Py_ssize_t skip_string(const unsigned char* b, Py_ssize_t i, Py_ssize_t n) noexcept nogil:
    # b[i] is the opening quote; returns the index after the closing one. The bytes
    # a string may hold here are 0x20..0x7f less the backslash. Sixteen at a time
    # with SSE2 (esched_special16): most strings end in the first step; the rest of
    # the search is _skip_string_tail's, out of line, so that this stays small
    # enough for the compiler to inline at each of the scanner's calls.
    cdef unsigned int wide
    i += 1
    # (ESCHED_WIDE is 0 without SSE2: the loop is then never entered)
    while ESCHED_WIDE and i + ESCHED_WIDE <= n:
        wide = esched_special16(b + i)
        if wide:
            i += __builtin_ctz(wide)
            return i + 1 if b[i] == 0x22 else -1
        i += ESCHED_WIDE
    return _skip_string_tail(b, i, n)


cdef inline Py_ssize_t _skip_string_tail(const unsigned char* b, Py_ssize_t i, Py_ssize_t n) noexcept nogil:
    # skip_string's search from ``i`` (inside the string) to the end of the document.
    # Eight at a time: the usual SWAR tests set the high bit of each byte that is a
    # control character, a quote, a backslash or >= 0x80 (exactly for the first such
    # byte: borrows only run upwards from one), so the lowest set bit is the string's
    # first special byte.
    cdef unsigned char c
    cdef uint64_t w, special
    while i + 8 <= n:
        memcpy(&w, b + i, 8)
        special = ((w - 0x2020202020202020ULL)                                # < 0x20
                   | ((w ^ 0x2222222222222222ULL) - 0x0101010101010101ULL)    # == '"'
                   | ((w ^ 0x5c5c5c5c5c5c5c5cULL) - 0x0101010101010101ULL)    # == '\\'
                   | w) & 0x8080808080808080ULL                               # >= 0x80
        if special:
            i += __builtin_ctzll(special) >> 3
            return i + 1 if b[i] == 0x22 else -1
        i += 8
    # The last few bytes of the document: one at a time; one unsigned compare after a
    # subtraction tests both ends of the range.
    while i < n:
        c = b[i]
        if <unsigned char>(c - 0x20) >= 0x60 or c == 0x5c:
            return -1
        if c == 0x22:
            return i + 1
        i += 1
    return -1


cdef inline Py_ssize_t skip_digits(const unsigned char* b, Py_ssize_t i, Py_ssize_t n) noexcept nogil:
    while i < n and 0x30 <= b[i] <= 0x39:
        i += 1
    return i


cdef inline Py_ssize_t skip_number(const unsigned char* b, Py_ssize_t i, Py_ssize_t n) noexcept nogil:
    # -?(0|[1-9][0-9]*)(\.[0-9]+)?, no exponent (see above).
    cdef Py_ssize_t start = i, j
    if b[i] == 0x2d:
        i += 1
    if i >= n:
        return -1
    if b[i] == 0x30:
        i += 1
    elif 0x31 <= b[i] <= 0x39:
        i = skip_digits(b, i + 1, n)
    else:
        return -1
    if i < n and b[i] == 0x2e:
        j = skip_digits(b, i + 1, n)
        if j == i + 1:
            return -1
        i = j
    if i < n and (b[i] == 0x65 or b[i] == 0x45):
        return -1
    if i - start > MAX_NUMBER:
        return -1
    return i


cdef inline Py_ssize_t skip_literal(const unsigned char* b, Py_ssize_t i, Py_ssize_t n,
                                    const char* word, Py_ssize_t length) noexcept nogil:
    if i + length > n or memcmp(b + i, word, length) != 0:
        return -1
    return i + length


cdef inline Py_ssize_t skip_value(const unsigned char* b, Py_ssize_t i, Py_ssize_t n,
                                  int depth) noexcept nogil:
    """Index after the JSON value starting at ``b[i]`` (no leading whitespace), or -1."""
    if i >= n:
        return -1
    cdef unsigned char c = b[i]
    if c == 0x22:
        return skip_string(b, i, n)
    if c == 0x7b or c == 0x5b:  # { or [
        if depth >= MAX_DEPTH:
            return -1
        i = skip_ws(b, i + 1, n)
        if i < n and b[i] == c + 2:  # } is { + 2, ] is [ + 2
            return i + 1
        while True:
            if c == 0x7b:
                if i >= n or b[i] != 0x22:
                    return -1
                i = skip_string(b, i, n)
                if i < 0:
                    return -1
                i = skip_ws(b, i, n)
                if i >= n or b[i] != 0x3a:  # :
                    return -1
                i = skip_ws(b, i + 1, n)
            # A string, the common value, without the recursive call.
            if i < n and b[i] == 0x22:
                i = skip_string(b, i, n)
            else:
                i = skip_value(b, i, n, depth + 1)
            if i < 0:
                return -1
            i = skip_ws(b, i, n)
            if i >= n:
                return -1
            if b[i] == 0x2c:  # ,
                i = skip_ws(b, i + 1, n)
            elif b[i] == c + 2:
                return i + 1
            else:
                return -1
    if c == 0x74:
        return skip_literal(b, i, n, b"true", 4)
    if c == 0x66:
        return skip_literal(b, i, n, b"false", 5)
    if c == 0x6e:
        return skip_literal(b, i, n, b"null", 4)
    if c == 0x2d or 0x30 <= c <= 0x39:
        return skip_number(b, i, n)
    return -1


cdef enum:
    # The members of an envelope's ``data`` object that scan_envelope notes, by index
    # into its ``members`` (what the bulk events' handlers read first).
    DATA_METADATA = 0
    DATA_SPEC = 1
    DATA_BINDINGS = 2
    N_DATA_MEMBERS = 3


cdef inline Py_ssize_t _skip_data(const unsigned char* b, Py_ssize_t i, Py_ssize_t n,
                                  Span* members, Span* unchecked) noexcept nogil:
    # skip_value's object branch at depth 1 (the same checks), for an envelope's data
    # object at b[i], noting the raw spans of its DATA_* members in ``members`` (the
    # last of each; start -1 when absent): its handler then finds them without a walk.
    # With ``unchecked``, a ``spec`` object is taken unchecked to the envelope's last
    # two bytes when they are "}}" (see scan_envelope).
    cdef Py_ssize_t key, length, value
    cdef int m
    for m in range(N_DATA_MEMBERS):
        members[m].start = -1
    i = skip_ws(b, i + 1, n)
    if i < n and b[i] == 0x7d:
        return i + 1
    while True:
        if i >= n or b[i] != 0x22:
            return -1
        key = i + 1
        i = skip_string(b, i, n)
        if i < 0:
            return -1
        length = i - 1 - key
        i = skip_ws(b, i, n)
        if i >= n or b[i] != 0x3a:  # :
            return -1
        value = i = skip_ws(b, i + 1, n)
        m = -1
        if length == 8:
            if memcmp(b + key, b"metadata", 8) == 0:
                m = DATA_METADATA
            elif memcmp(b + key, b"bindings", 8) == 0:
                m = DATA_BINDINGS
        elif length == 4 and memcmp(b + key, b"spec", 4) == 0:
            m = DATA_SPEC
        if i < n and b[i] == 0x22:
            i = skip_string(b, i, n)
        elif (m == DATA_SPEC and unchecked != NULL and b[i] == 0x7b
                and b[n - 1] == 0x7d and b[n - 2] == 0x7d):
            # Where orjson puts a pod's spec, last in the last member (n >= 2 here:
            # b[i] is in it); the caller proves the span (see scan_envelope).
            unchecked.start = i
            i = unchecked.end = n - 2
        else:
            i = skip_value(b, i, n, 2)
        if i < 0:
            return -1
        if m >= 0:
            members[m].start = value
            members[m].end = i
        i = skip_ws(b, i, n)
        if i >= n:
            return -1
        if b[i] == 0x2c:  # ,
            i = skip_ws(b, i + 1, n)
        elif b[i] == 0x7d:
            return i + 1
        else:
            return -1


cdef inline bint scan_envelope(const unsigned char* b, Py_ssize_t n, Span* type_,
                               Span* data, Span* members=NULL,
                               Span* unchecked=NULL) noexcept nogil:
    """True if ``b[:n]`` is one JSON object (surrounding whitespace allowed) this
    scanner accepts, i.e. orjson would decode it to the same values; in the same
    walk, the raw spans of its top-level ``type`` and ``data`` values (the last of
    each, as orjson keeps the last of duplicate keys; ``start`` -1 when absent), and
    with ``members`` (N_DATA_MEMBERS spans), those of the last ``data`` object's
    DATA_* members (all -1 when ``data`` is absent or not an object).

    With ``unchecked`` (and ``members``): a ``data`` object's ``spec`` member whose
    value opens with ``{`` while the envelope's last two bytes are ``}}`` (where
    orjson puts a pod's spec) is taken, unchecked, to end there: the scan goes on
    from those two bytes, and ``unchecked`` is that spec's span (start -1 when no
    spec was so taken). True then says the rest is accepted; the whole is accepted
    exactly when the span's bytes are one JSON value that skip_value accepts at
    depth 2, which the caller must prove (bytes equal to a spec so accepted before,
    or ``skip_value(b, unchecked.start, n, 2) == unchecked.end``) before reading
    anything, and otherwise scan again without ``unchecked`` (the spec may then
    end earlier)."""
    cdef Py_ssize_t i = skip_ws(b, 0, n), key, key_end, value
    cdef int m
    type_.start = data.start = -1
    if unchecked != NULL:
        unchecked.start = -1
    if members != NULL:
        for m in range(N_DATA_MEMBERS):
            members[m].start = -1
    if i >= n or b[i] != 0x7b:
        return False
    i = skip_ws(b, i + 1, n)
    if i < n and b[i] == 0x7d:
        return skip_ws(b, i + 1, n) == n
    while True:
        # The object branch of skip_value, at depth 0, noting two keys on the way.
        if i >= n or b[i] != 0x22:
            return False
        key = i + 1
        i = skip_string(b, i, n)
        if i < 0:
            return False
        key_end = i - 1
        i = skip_ws(b, i, n)
        if i >= n or b[i] != 0x3a:  # :
            return False
        value = i = skip_ws(b, i + 1, n)
        if members != NULL and key_end - key == 4 and memcmp(b + key, b"data", 4) == 0:
            if i < n and b[i] == 0x7b:
                i = _skip_data(b, i, n, members, unchecked)
            else:  # (not an object: no members, whatever an earlier data held)
                for m in range(N_DATA_MEMBERS):
                    members[m].start = -1
                i = skip_value(b, i, n, 1)
        elif i < n and b[i] == 0x22:
            i = skip_string(b, i, n)
        else:
            i = skip_value(b, i, n, 1)
        if i < 0:
            return False
        if key_end - key == 4:
            if memcmp(b + key, b"type", 4) == 0:
                type_.start = value
                type_.end = i
            elif memcmp(b + key, b"data", 4) == 0:
                data.start = value
                data.end = i
        i = skip_ws(b, i, n)
        if i >= n:
            return False
        if b[i] == 0x2c:  # ,
            i = skip_ws(b, i + 1, n)
        elif b[i] == 0x7d:
            return skip_ws(b, i + 1, n) == n
        else:
            return False


cdef inline Py_ssize_t after_quote(const unsigned char* b, Py_ssize_t i, Py_ssize_t n) noexcept nogil:
    # For a document scan_envelope accepted: the index after the string opening at
    # b[i], whose end is the next quote (no escapes). Sixteen bytes at a time with
    # SSE2, then eight, inline:
    # most strings here are short, where a call of memchr cost more than the search.
    # (x - 0x01..) & ~x & 0x80.. marks exactly the lowest zero byte of x, the first
    # quote after the xor.
    cdef uint64_t w
    cdef unsigned int wide
    i += 1
    while ESCHED_WIDE and i + ESCHED_WIDE <= n:
        wide = esched_quotes16(b + i)
        if wide:
            return i + __builtin_ctz(wide) + 1
        i += ESCHED_WIDE
    while i + 8 <= n:
        memcpy(&w, b + i, 8)
        w ^= 0x2222222222222222ULL
        w = (w - 0x0101010101010101ULL) & ~w & 0x8080808080808080ULL
        if w:
            return i + (__builtin_ctzll(w) >> 3) + 1
        i += 8
    while b[i] != 0x22:  # accepted: the quote is there
        i += 1
    return i + 1


cdef inline Py_ssize_t skip_accepted(const unsigned char* b, Py_ssize_t i, Py_ssize_t n) noexcept nogil:
    # skip_value for a document scan_envelope accepted: nothing to check, and
    # strings hold no escapes, so a string ends at the next quote.
    cdef unsigned char c = b[i]
    cdef Py_ssize_t depth = 0
    while True:
        if c == 0x22:
            i = after_quote(b, i, n)
        elif c == 0x7b or c == 0x5b:
            depth += 1
            i += 1
        elif c == 0x7d or c == 0x5d:
            depth -= 1
            i += 1
        elif depth == 0:
            # A scalar at the top: it ends at a delimiter or the end.
            while i < n and b[i] != 0x2c and b[i] != 0x7d and b[i] != 0x5d and b[i] > 0x20:
                i += 1
            return i
        else:
            i += 1
        if depth == 0:
            return i
        c = b[i]


cdef inline Py_ssize_t next_key(const unsigned char* b, Py_ssize_t i, Py_ssize_t n,
                                Span* key) noexcept nogil:
    """:func:`next_member` up to the value: returns the index of its first byte (-1
    after the last member), from which the caller skips or walks the value, passing
    on the index after it (at ``,`` or ``}``, past any whitespace): one walk over a
    value the caller reads into."""
    if b[i] == 0x7d:
        return -1
    i = skip_ws(b, i + 1, n)  # past "{" or ","
    if b[i] == 0x7d:
        return -1
    key.start = i + 1
    i = after_quote(b, i, n)
    key.end = i - 1
    return skip_ws(b, skip_ws(b, i, n) + 1, n)  # past ":"


cdef inline Py_ssize_t next_member(const unsigned char* b, Py_ssize_t i, Py_ssize_t n,
                                   Span* key, Span* value) noexcept nogil:
    """Walk an object the scanner has accepted: start with ``i`` at its ``{``, then
    pass back what this returned; fills ``key`` (content) and ``value`` (the raw
    value). Returns -1 after the last member."""
    i = next_key(b, i, n, key)
    if i < 0:
        return -1
    value.start = i
    i = skip_accepted(b, i, n)
    value.end = i
    return skip_ws(b, i, n)  # at "," or "}"


cdef inline Py_ssize_t next_element(const unsigned char* b, Py_ssize_t i, Py_ssize_t n,
                                    Span* value) noexcept nogil:
    """Like :func:`next_member`, for an accepted array (start with ``i`` at its ``[``)."""
    if b[i] == 0x5d:
        return -1
    i = skip_ws(b, i + 1, n)  # past "[" or ","
    if b[i] == 0x5d:
        return -1
    value.start = i
    i = skip_accepted(b, i, n)
    value.end = i
    return skip_ws(b, i, n)


cdef inline bint span_is(const unsigned char* b, Span s, const char* text,
                         Py_ssize_t length) noexcept nogil:
    return s.end - s.start == length and memcmp(b + s.start, text, length) == 0
