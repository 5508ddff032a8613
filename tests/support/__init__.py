"""Test support in one place (importable as ``support``: pytest puts ``tests/`` on the path).

- :mod:`support.events`: service-level events and an ``append_events`` helper (small
  clusters whose arithmetic a test can state).
- :mod:`support.fold`: fold-level envelopes and objects for the core tests, and ``Log``.
- :mod:`support.kube`: builders mirroring kube-scheduler's test helpers and its scores.
- :mod:`support.replicas`: a replica wired to an in-process commit service that
  records its proposals.
- :mod:`support.up`: ``esched up`` in process over a list of events, the store opened
  beside it (``up_running``), and reads of the log (a pod's phase, the first
  unschedulable report).
- :mod:`support.aio`: ``eventually()`` instead of fixed sleeps, and the check that
  fails an async test whose exception reached the event loop's handler.

Services as OS processes go through :mod:`esched.services.procs`, the harness
``esched bench e2e`` uses too.
"""
