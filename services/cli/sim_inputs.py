"""The simulator's inputs from flags, shared by ``simulate`` and ``compare``: the
trace, the profile and the usage model (bad ones are usage errors), the shared help
texts and options, and a progress bar."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

import click

from esched.core import ProfileError, load_profile
from esched.services.sim.traces import KINDS, TraceError, load_trace

__all__ = [
    "NODES_HELP",
    "TRACE_HELP",
    "profile_of",
    "progress_bar",
    "trace_of",
    "usage_every_option",
    "usage_model_of",
]

TRACE_HELP = (
    f"Trace as KIND:PATH, KIND one of {', '.join(KINDS)}; e.g. openb:DIR, "
    "philly:DIR, itp:FILE.csv, dlrm:FILE.csv, synthetic:nodes=64,jobs=2000,seed=1."
)
NODES_HELP = (
    "Node table for traces without one (itp, dlrm) or to replace it: an openb-style "
    "CSV (sn,cpu_milli,memory_mib,gpu,model) or COUNTxGPUS[:cpu=C][:mem=GiB]"
    "[:model=M],... e.g. 64x8."
)


@contextlib.contextmanager
def progress_bar(label: str, total: int, enabled: bool) -> Iterator:
    """A rich progress bar on stderr (only on a terminal); yields update(done, total)."""
    if not enabled or not sys.stderr.isatty():
        yield lambda done, tot=None: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task(label, total=total)

        def update(done: int, tot: int | None = None) -> None:
            bar.update(task, completed=done, total=tot or total)

        yield update


def trace_of(trace: str, nodes: str | None):
    """The trace of ``--trace`` (and ``--nodes``); a bad one is a usage error."""
    try:
        return load_trace(trace, nodes)
    except (TraceError, OSError) as exc:
        raise click.UsageError(str(exc)) from None


def profile_of(path: str):
    """The profile at ``path``; a bad one is a usage error."""
    try:
        return load_profile(path)
    except (ProfileError, OSError) as exc:
        raise click.UsageError(f"profile {path}: {exc}") from None


#: ``--usage-every`` of simulate and of compare's reclamation study (one definition).
usage_every_option = click.option(
    "--usage-every",
    type=click.FloatRange(min=0, min_open=True),
    default=60.0,
    show_default=True,
    metavar="SECONDS",
    help="Seconds of virtual time between usage reports (with --usage).",
)


def usage_model_of(spec: str | None):
    """The ``--usage`` model (None without one); a bad spec is a usage error."""
    if spec is None:
        return None
    from esched.services.sim.usage import UsageModelError, parse_usage

    try:
        return parse_usage(spec)
    except UsageModelError as exc:
        raise click.UsageError(f"--usage: {exc}") from None
