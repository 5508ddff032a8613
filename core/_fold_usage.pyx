"""The fold of ``esched.usage.reported``: measured node load and Borg's reservations.

``nodes[]`` (:func:`_usage_nodes`) is each node's usage on the log's clock, read by
:meth:`ClusterState.node_usage` and the placer's Usage plugin; ``pods[]``
(:func:`_usage_pods`) is each bound pod's last usage and its reservation (Borg 5.5,
the curve in ``_reservations.pxd``). The dict path's ``_apply`` (``core/_fold.pyx``)
calls them at C level; the bytes path hands usage events to it. Like the other fold
modules this one knows the class only through ``_state.pxd``.
"""

from esched.schemas.validator.timewindow import event_seconds

from libc.math cimport isnan

from esched.core._reservations cimport RES_OVERCOMMIT, RES_RECLAIM, next_reservation
from esched.core._state cimport ClusterState
from esched.core._types cimport units_t

__all__ = []


def _usage_node_name(name) -> str:
    """A usage report's node name; TypeError (a malformed body) if it is not a string."""
    if type(name) is not str:
        raise TypeError("usage report node name must be a string")
    return name


cdef int _usage_pods(ClusterState self, list pods, double now) except -1:
    # The pods[] part of a usage report at event time ``now``: each bound pod's
    # last usage and its reservations (Borg 5.5, core/_reservations.pxd). Parsed
    # whole before anything changes, so a malformed body has no effect.
    cdef Py_ssize_t p, n, r, i, m = len(pods)
    cdef units_t old, new, use
    cdef double hold_end, last, dt
    cdef bint holding, over
    cdef dict entry, raw
    parsed = []
    for entry in pods:
        raw = entry.get("usage") or {}
        parsed.append((<str?>entry["pod"],
                       {<str>name: self._units(name, value) for name, value in raw.items()}))
    if now > self.clock:
        self.clock = now
    now = self.clock  # the log's clock never runs backwards
    for i in range(m):
        key, usage = parsed[i]
        self.pod_usage[key] = usage
        slot = self.pod_index.get(key)
        if slot is None:
            continue
        p = slot
        n = self.pod_node[p]
        if n < 0:
            continue
        if isnan(self.pod_rtime[p, 0]):
            # first report since binding: the start-up hold starts now
            self.pod_rtime[p, 0] = now + self.rc_hold
            self.pod_rtime[p, 1] = now
        hold_end = self.pod_rtime[p, 0]
        last = self.pod_rtime[p, 1]
        holding = now < hold_end
        dt = now - (last if last > hold_end else hold_end)
        changed = False
        for name, use in usage.items():
            col = self.res_index.get(name)
            if col is None:
                continue
            r = col
            if not (self.res_rflags[r] & RES_RECLAIM):
                continue
            over = (self.res_rflags[r] & RES_OVERCOMMIT) != 0
            old = self.pod_resv[p, r]
            new = next_reservation(old, self.class_lim[self.pod_class[p], r], use, dt,
                                   holding, self.rc_tau, self.rc_margin, over)
            if new != old:
                self.pod_resv[p, r] = new
                self.node_resv[n, r] += new - old
                changed = True
        self.pod_rtime[p, 1] = now
        if changed:
            self.version[n] += 1
    return 0

cdef int _usage_nodes(ClusterState self, object nodes) except -1:
    # nodes[] of a usage report: each node's usage at the event's time. The clock
    # is the newest report time folded (event time, never the wall clock), so a
    # replay judges staleness (node_usage) exactly as the live fold did. A report
    # without a usable time counts at the clock (it cannot move it).
    if not nodes:
        return 0
    # Every entry read before anything changes: a malformed one has no effect.
    parsed = [(_usage_node_name(u["name"]), self._resource_list(u.get("usage"), "usage"))
              for u in nodes]
    at = event_seconds(self._usage_time)
    if at is None:
        at = self.clock
    elif at > self.clock:
        self.clock = at
    for name, usage in parsed:
        self._node_usage[name] = (at, usage)
    self.usage_gen += 1
    return 0
