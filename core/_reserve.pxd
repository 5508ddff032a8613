# Reservations over a Placer's view (core/_reserve.pyx), for the gang and preemption
# planners that cimport them.
from esched.core._placer cimport Placer

cdef object gang_of(Placer pl, pods)
cpdef hide_reserved(Placer pl, gang)
