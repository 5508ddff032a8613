# Typing stub for the Cython module core/_topology_views.pyx (mypy reads this, not the .pyx).
# Inter-pod affinity and topology spread views are cdef functions
# (core/_topology_views.pxd) the placer calls per pod: no Python entry point.

__all__: list[str] = []
