"""Scoring plugins: one ``noexcept nogil`` kernel per file, cimported by the placer.

Each ``_<plugin>.pxd`` holds an inline kernel over typed arrays (no Python objects)
returning 0..MAX_NODE_SCORE; ``_plugin.pxd`` holds what they share. The kernels
follow kube-scheduler v1.30's ``noderesources`` package where a Kubernetes plugin
of that name exists, integer arithmetic included. Dispatch is resolved once per
profile into a table of ``PluginSpec`` (see ``esched.core._placer``).
"""
