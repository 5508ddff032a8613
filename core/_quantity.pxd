# Kubernetes quantities in C, for the fold's hot paths (ClusterState._units: usage
# reports, pod specs, bindings). The rule is schemas/quantity.py's to_base_units, the
# reference: this parser only *accepts* the common spellings ("250m", "1.5", "512Mi",
# "2Gi", "3G", "1e3", JSON integers and floats) and gives exactly the base units
# to_base_units gives them; for anything else (whitespace, a sign other than "+",
# more than 17 significant digits, a result above MAX_BASE_UNITS, an invalid string,
# another type) it says -1, "not mine", and the caller asks to_base_units, which
# gives the value or raises its error. tests/core/test_quantity_fast.py checks the
# equality over generated quantities.
from libc.stdint cimport int64_t

cdef extern from *:
    """
    #include <stdint.h>
    static const uint64_t esched_pow10[19] = {
        1ULL, 10ULL, 100ULL, 1000ULL, 10000ULL, 100000ULL, 1000000ULL, 10000000ULL,
        100000000ULL, 1000000000ULL, 10000000000ULL, 100000000000ULL, 1000000000000ULL,
        10000000000000ULL, 100000000000000ULL, 1000000000000000ULL,
        10000000000000000ULL, 100000000000000000ULL, 1000000000000000000ULL};
    #define ESCHED_MAX_BASE_UNITS (((uint64_t)1) << 62)  /* schemas.quantity.MAX_BASE_UNITS */
    #define ESCHED_MAX_QUANTITY_CHARS 64                /* ... MAX_QUANTITY_CHARS */
    static const long long esched_max_units = (long long)ESCHED_MAX_BASE_UNITS;

    /* The base units (milli-units if cpu) of the ASCII quantity s[0:n], rounded up,
       or -1 when this parser does not take it (see core/_quantity.pxd). The grammar
       is schemas/quantity.py's _QUANTITY: [+]digits[.digits] then one of a binary
       suffix (Ki..Ei), an exponent ([eE][+-]?digits, |exp| <= 30) or a decimal
       suffix (n u m k M G T P E); "1E" is exa, "1E3" a thousand, as there. */
    static inline int64_t esched_quantity_units(const unsigned char* s, Py_ssize_t n, int cpu) {
        Py_ssize_t i = 0;
        uint64_t m = 0;     /* the digits, without the point: m < 10^18 */
        int frac = 0;       /* digits after the point */
        int any = 0, dot = 0;
        int exp10 = 0;      /* power of ten of a decimal suffix or exponent */
        int bin = 0;        /* power of two of a binary suffix */
        if (n <= 0 || n > ESCHED_MAX_QUANTITY_CHARS)
            return -1;
        if (s[0] == '+')
            i = 1;
        for (; i < n; i++) {
            unsigned char c = s[i];
            if (c >= '0' && c <= '9') {
                if (m >= 100000000000000000ULL)
                    return -1;  /* more digits than an int64 keeps exactly */
                m = m * 10 + (uint64_t)(c - '0');
                any = 1;
                frac += dot;
            } else if (c == '.' && !dot) {
                dot = 1;
            } else {
                break;
            }
        }
        if (!any)
            return -1;
        if (i < n) {
            unsigned char c = s[i];
            if (i + 2 == n && s[i + 1] == 'i') {
                switch (c) {
                case 'K': bin = 10; break;
                case 'M': bin = 20; break;
                case 'G': bin = 30; break;
                case 'T': bin = 40; break;
                case 'P': bin = 50; break;
                case 'E': bin = 60; break;
                default: return -1;
                }
            } else if ((c == 'e' || c == 'E') && i + 1 < n) {
                Py_ssize_t j = i + 1;
                int neg = 0, x = 0;
                if (s[j] == '+' || s[j] == '-') {
                    neg = s[j] == '-';
                    j++;
                }
                if (j >= n)
                    return -1;
                for (; j < n; j++) {
                    if (s[j] < '0' || s[j] > '9' || x > 30)
                        return -1;  /* not an exponent, or out of range (the reference raises) */
                    x = x * 10 + (s[j] - '0');
                }
                if (x > 30)
                    return -1;
                exp10 = neg ? -x : x;
            } else if (i + 1 == n) {
                switch (c) {
                case 'n': exp10 = -9; break;
                case 'u': exp10 = -6; break;
                case 'm': exp10 = -3; break;
                case 'k': exp10 = 3; break;
                case 'M': exp10 = 6; break;
                case 'G': exp10 = 9; break;
                case 'T': exp10 = 12; break;
                case 'P': exp10 = 15; break;
                case 'E': exp10 = 18; break;
                default: return -1;
                }
            } else {
                return -1;
            }
        }
        if (m == 0)
            return 0;
        if (bin) {
            /* m * 2^bin (* 1000) / 10^frac, rounded up: m < 2^60, so m << 60 < 2^120 */
            unsigned __int128 num = ((unsigned __int128)m) << bin;
            uint64_t den, q;
            unsigned __int128 whole;
            if (frac > 18)
                return -1;
            if (cpu) {
                if (num > ((~(unsigned __int128)0) / 1000))
                    return -1;
                num *= 1000;
            }
            den = esched_pow10[frac];
            whole = (num + den - 1) / den;
            if (whole > ESCHED_MAX_BASE_UNITS)
                return -1;  /* the reference raises: absurdly large */
            q = (uint64_t)whole;
            return (int64_t)q;
        }
        {
            int e = exp10 - frac + (cpu ? 3 : 0);
            uint64_t p;
            if (e >= 0) {
                if (e > 18)
                    return -1;  /* m >= 1: at least 10^19, above the limit */
                p = esched_pow10[e];
                if (m > ESCHED_MAX_BASE_UNITS / p)
                    return -1;  /* the reference raises: absurdly large */
                return (int64_t)(m * p);
            }
            if (-e > 18)
                return 1;  /* 0 < m < 10^18 < 10^-e: a positive fraction of a unit */
            p = esched_pow10[-e];
            return (int64_t)((m + p - 1) / p);
        }
    }
    """
    int64_t esched_quantity_units(const unsigned char* s, Py_ssize_t n, int cpu) noexcept nogil
    const long long esched_max_units

cdef extern from "Python.h":
    bint PyUnicode_CheckExact(object)
    bint PyLong_CheckExact(object)
    bint PyFloat_CheckExact(object)
    int PyUnicode_READY(object) except -1
    bint PyUnicode_IS_ASCII(object)
    void* PyUnicode_DATA(object)
    Py_ssize_t PyUnicode_GET_LENGTH(object)
    long long PyLong_AsLongLongAndOverflow(object, int*) except? -1


cdef inline int64_t quantity_units(object value, bint cpu) except -2:
    """The base units of ``value`` (of cpu if ``cpu``) as to_base_units gives them, or
    -1: not a common spelling, ask schemas.quantity.to_base_units (core/_quantity.pxd)."""
    cdef int overflow = 0
    cdef long long v
    if PyUnicode_CheckExact(value):
        PyUnicode_READY(value)
        if not PyUnicode_IS_ASCII(value):
            return -1
        return esched_quantity_units(<const unsigned char*>PyUnicode_DATA(value),
                                     PyUnicode_GET_LENGTH(value), cpu)
    if PyLong_CheckExact(value):  # not bool: the reference refuses booleans
        v = PyLong_AsLongLongAndOverflow(value, &overflow)
        if overflow or v < 0 or v > (esched_max_units // 1000 if cpu else esched_max_units):
            return -1  # the reference raises (negative, absurdly large)
        return v * 1000 if cpu else v
    if PyFloat_CheckExact(value):
        # The reference reads a float as repr() gives it (0.1 stays 1/10).
        return quantity_units(repr(value), cpu)
    return -1
