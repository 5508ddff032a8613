# Borg's reservation rule (EuroSys 2015, section 5.5), one step: the one home of the
# curve. The fold (_fold_usage.pyx, _usage_pods) calls it per pod and
# reclaimed resource on each usage report, on the log's clock; the parameters and
# their defaults are core/reservations.py's ReclamationConfig.
from libc.math cimport ceil, exp

from esched.core._types cimport units_t

cdef enum:
    RES_RECLAIM = 1      # res_rflags: the resource's reservations decay
    RES_OVERCOMMIT = 2   # a pod may use more than its limit of it (compressible)


cdef inline units_t next_reservation(units_t resv, units_t limit, units_t usage, double dt,
                                     bint holding, double tau, double margin,
                                     bint overcommit) noexcept nogil:
    """The reservation after a usage report.

    ``resv``: the reservation before; ``usage``: the reported usage; ``dt``: seconds
    of decay since the previous report (or since the hold ended); ``holding``: within
    the hold after start (no decay). The target is usage + margin x limit, capped at
    the limit unless ``overcommit``; the reservation rises to it at once, else decays
    toward it: target + (resv - target) * exp(-dt / tau), rounded up (never below
    the curve).
    """
    cdef double t = <double>usage + margin * <double>limit
    if not overcommit and t > <double>limit:
        t = <double>limit
    if t > 4611686018427387904.0:
        # at most schemas.quantity.MAX_BASE_UNITS (2**62): sums over a node stay in int64
        t = 4611686018427387904.0
    cdef units_t target = <units_t>ceil(t)
    if target >= resv:
        return target
    if holding or dt <= 0.0:
        return resv
    return <units_t>ceil(<double>target + <double>(resv - target) * exp(-dt / tau))
