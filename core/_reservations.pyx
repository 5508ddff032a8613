"""Test entry point to the reservation rule (core/_reservations.pxd), as sklearn's _py_*."""

from esched.core._reservations cimport next_reservation


def _py_next_reservation(long long resv, long long limit, long long usage, double dt,
                         bint holding, double tau, double margin, bint overcommit) -> int:
    """One step of :func:`next_reservation` (see core/_reservations.pxd)."""
    return next_reservation(resv, limit, usage, dt, holding, tau, margin, overcommit)
