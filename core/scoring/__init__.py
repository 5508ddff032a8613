"""Scoring plugins: one ``noexcept nogil`` kernel per file, cimported by the placer.

Each ``_<plugin>.pxd`` holds an inline kernel over typed arrays (no Python objects)
returning 0..MAX_NODE_SCORE, the only home of its formula; ``_plugin.pxd`` holds what
they share (the score range, ``PluginSpec``, the one call signature ``score_fn``).
The kernels follow kube-scheduler v1.30's ``noderesources`` package where a
Kubernetes plugin of that name exists, integer arithmetic included. ``_table.pxd``
maps a plugin kind to its kernel once per profile (``PluginSpec.fn``); ``_gather.pxd``
scores a node through that table. The vectorized block kernel of the kube default
profile (``core/_fused_block.h``) is the fast form of LeastAllocated / MostAllocated
and BalancedAllocation, checked against these kernels by tests/core/test_placer.py.
"""
