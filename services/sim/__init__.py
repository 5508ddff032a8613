"""Trace-driven simulation and packing evaluation through the real core.

Modules: :mod:`.traces` (loaders), :mod:`.engine` (the event-driven run),
:mod:`.metrics` (what a run measured), :mod:`.compaction` (Verma et al.'s cluster
compaction and workload inflation), :mod:`.report` (HTML, JSON, terminal).
"""
