# Typing stub for the Cython module core/_fold_usage.pyx (mypy reads this, not the .pyx).
# The usage fold is cdef functions (core/_fold_usage.pxd): ClusterState.apply and its
# siblings are its Python entry points.

__all__: list[str] = []

def _usage_node_name(name: object) -> str: ...
