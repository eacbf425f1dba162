"""What a replay counts in Beam metrics, and the totals read back: records read, quarantined, staged and written.

The steps count where they run (a worker on another host, on a cluster) with Beam counters, once per batch;
the client reads the totals from the runner, so its progress line is the same on every runner
(`parity.replay.watch` polls them while a side's job runs). Counter names are `<what>.<side>` in the `parity`
namespace, e.g. `parity:records_read.offline`: a side's name may hold dots, `what` never does.

Every record read is counted once as read, and then either as quarantined or as staged and written:
`records_read == quarantined + records_written` once a replay has ended.
"""
from __future__ import annotations

import logging
from typing import Any, Mapping

from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricResults, MetricsFilter

from parity import compat
from parity.console import progress

NAMESPACE = "parity"
READ = "records_read"
QUARANTINED = "quarantined"
STAGED = "records_staged"
WRITTEN = "records_written"
COUNTS = (READ, QUARANTINED, STAGED, WRITTEN)  # in the order the progress line shows them

_LOG = logging.getLogger(__name__)


def metric_name(what: str, side: str) -> str:
    return f"{what}.{side}"


class SideCounters:
    """A step's Beam counters for one side (made in the DoFn's `setup`, on the worker); `add` once per batch (never per record: a counter update is a
    dict lookup and a lock, which per record would cost more than the records' own fingerprinting)."""

    def __init__(self, side: str, *whats: str):
        self._side = side
        self._counters = {what: Metrics.counter(NAMESPACE, metric_name(what, side)) for what in whats}

    def add(self, what: str, count: int) -> None:
        if count:
            self._counters[what].inc(count)
            progress.tally(self._side, what, count)  # a live line where the step runs in the client's process


def totals(results: Mapping[str, Any], side: str) -> dict[str, int]:
    """A side's counts from a metrics query (`MetricResults.query`), every name in COUNTS (0 when absent).

    A counter is the sum over the steps that report it. Committed values where the runner gives them (they
    leave out the work of a retried bundle), else attempted ones: Flink's REST accumulators carry attempted
    values only."""
    counts = dict.fromkeys(COUNTS, 0)
    for result in results.get(MetricResults.COUNTERS, ()):
        name = result.key.metric
        if name.namespace != NAMESPACE:
            continue
        what, _, of = name.name.partition(".")
        if of != side or what not in counts:
            continue
        value = result.committed if result.committed is not None else result.attempted
        counts[what] += int(value or 0)
    return counts


def query(metrics: MetricResults) -> dict[str, Any]:
    """parity's counters in a runner's metrics."""
    return metrics.query(MetricsFilter().with_namespace(NAMESPACE))


_said: set[str] = set()


def of_result(result: Any, side: str) -> dict[str, int] | None:
    """A side's counts from a pipeline result now, or None when the runner cannot say (logged once per kind of
    failure): progress must never fail a replay.

    Beam's portable `PipelineResult` keeps its first metrics answer for ever, so that one asked while the job
    runs would be the job's answer at the end too; it is asked afresh here each time."""
    try:
        compat.forget_metrics(result)
        return totals(query(result.metrics()), side)
    except Exception as exc:  # a runner without metrics, a job service gone: progress only, never the run
        said_once(f"metrics:{type(exc).__name__}", f"the runner's metrics could not be read ({type(exc).__name__}: "
                  f"{exc}); the progress line shows what this process counted")
        return None


def said_once(kind: str, message: str) -> None:
    """Logs a progress problem once per process and kind."""
    if kind not in _said:
        _said.add(kind)
        _LOG.warning("parity progress: %s", message)
