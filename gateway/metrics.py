"""The gateway's Prometheus metrics, with ``prometheus_client``, exposed at ``/metrics``.

The reference's names are kept (``lakesync_push_total{status}``, ``lakesync_pull_total``,
``lakesync_push_latency_ms``, ``lakesync_buffer_bytes``, …) so dashboards keep working; added
are per-gateway push and pull durations, the size of WAL group commits and the number of
serving processes.

Gateway label values are bounded: a process labels the first :data:`GATEWAY_LABEL_LIMIT`
gateway ids it meets (on a successful push, a pull or a scrape of the backlog: a request that
failed, maybe without a token, claims no name) by their id and every later one ``_other``, so a
flood of gateway ids cannot grow the series without bound (with N workers,
at most N × the limit + 1 values).

With several worker processes (``lakesync gateway --workers N``) the values live in
``prometheus_client``'s multiprocess mode: each worker writes its own files in a per-run
directory (``PROMETHEUS_MULTIPROC_DIR``, set by :func:`gateway.serve.serve` before the workers
start) and a scrape, answered by any worker, sums them all. The WAL backlog is not counted by the
processes but read from the store at scrape time, so it is the same whichever worker answers.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Final

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector

__all__ = ["GATEWAY_LABEL_LIMIT", "OTHER_GATEWAYS", "GatewayLabels", "Metrics"]

GATEWAY_LABEL_LIMIT: Final = 100
"""How many gateway ids a process labels by name; the rest are labelled :data:`OTHER_GATEWAYS`."""
OTHER_GATEWAYS: Final = "_other"
"""The label value of every gateway past the limit; no gateway id starts with ``_``."""

_LATENCY_BUCKETS_MS: Final = (1, 5, 10, 50, 100, 500)
_DURATION_BUCKETS_S: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
_GROUP_BUCKETS: Final = (1, 2, 4, 8, 16, 32, 64)


class GatewayLabels:
    """The gateway label of an id: the id for the first ``limit`` ids met, else ``_other``."""

    def __init__(self, limit: int = GATEWAY_LABEL_LIMIT) -> None:
        self._limit = limit
        self._named: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, gw: str) -> str:
        """The label value of ``gw``, naming it if there is room."""
        if gw in self._named:
            return gw
        with self._lock:
            if gw in self._named or len(self._named) < self._limit:
                self._named.add(gw)
                return gw
        return OTHER_GATEWAYS

    def named(self, gw: str) -> str:
        """The label value of ``gw`` without naming it: ``_other`` unless already named."""
        return gw if gw in self._named else OTHER_GATEWAYS


class _Backlog:
    """A collector of the WAL backlog read from the store for one scrape."""

    def __init__(self, backlogs: Mapping[str, tuple[int, int]], label: GatewayLabels) -> None:
        self._totals: dict[str, list[int]] = {}
        for gw, (entries, size) in sorted(backlogs.items()):
            total = self._totals.setdefault(label(gw), [0, 0])
            total[0] += entries
            total[1] += size

    def collect(self) -> Iterator[Metric]:
        entries = GaugeMetricFamily(
            "lakesync_wal_backlog_entries",
            "Unflushed WAL entries per gateway.",
            labels=["gateway"],
        )
        size = GaugeMetricFamily(
            "lakesync_buffer_bytes",
            "Unflushed WAL bytes per gateway (estimate).",
            labels=["gateway"],
        )
        for gw, (n, b) in self._totals.items():
            entries.add_metric([gw], n)
            size.add_metric([gw], b)
        yield entries
        yield size


class Metrics:
    """The gateway's metrics: what the routes and the WAL writer observe, and their exposition.

    ``multiprocess_dir`` is the directory of ``prometheus_client``'s multiprocess mode when the
    gateway serves from several processes (the environment variable must name it before
    ``prometheus_client`` is imported: :func:`gateway.serve.serve` sees to it); then
    :meth:`render` sums the values of every process. ``gateway_labels`` bounds the gateway
    label values (see the module docstring).
    """

    def __init__(
        self, multiprocess_dir: Path | None = None, *, gateway_labels: GatewayLabels | None = None
    ) -> None:
        # the reference exposes no ``*_created`` series (prometheus_client leaves this unannotated)
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self._label = gateway_labels or GatewayLabels()
        registry = CollectorRegistry()
        self._push_total = Counter(
            "lakesync_push_total", "Push requests by outcome.", ["status"], registry=registry
        )
        self._pull_total = Counter("lakesync_pull_total", "Pull pages served.", registry=registry)
        self._accepted = Counter(
            "lakesync_deltas_accepted_total",
            "Deltas accepted (new and duplicate).",
            registry=registry,
        )
        self._appended = Counter(
            "lakesync_wal_appended_total",
            "Effective changes appended to the WAL.",
            registry=registry,
        )
        self._duplicates = Counter(
            "lakesync_deltas_duplicate_total",
            "Deltas dropped as already accepted.",
            registry=registry,
        )
        self._pulled = Counter(
            "lakesync_deltas_pulled_total", "Deltas served by pulls.", registry=registry
        )
        self._push_latency = Histogram(
            "lakesync_push_latency_ms",
            "Push latency in milliseconds.",
            buckets=_LATENCY_BUCKETS_MS,
            registry=registry,
        )
        self._push_seconds = Histogram(
            "lakesync_push_duration_seconds",
            "Push duration per gateway, in seconds.",
            ["gateway"],
            buckets=_DURATION_BUCKETS_S,
            registry=registry,
        )
        self._pull_seconds = Histogram(
            "lakesync_pull_duration_seconds",
            "Pull page duration per gateway, in seconds.",
            ["gateway"],
            buckets=_DURATION_BUCKETS_S,
            registry=registry,
        )
        self._group_size = Histogram(
            "lakesync_wal_group_commit_size",
            "Pushes committed together in one WAL transaction.",
            buckets=_GROUP_BUCKETS,
            registry=registry,
        )
        processes = Gauge(
            "lakesync_gateway_processes",
            "Processes serving the gateway.",
            registry=registry,
            multiprocess_mode="livesum",
        )
        processes.set(1)
        self._exposed = registry
        if multiprocess_dir is not None:
            self._exposed = CollectorRegistry()
            # prometheus_client leaves the collector unannotated
            MultiProcessCollector(self._exposed, path=str(multiprocess_dir))  # type: ignore[no-untyped-call]

    def observe_push(self, gw: str, status: str, seconds: float) -> None:
        """Count one push to ``gw`` by outcome and record its duration."""
        self._push_total.labels(status).inc()
        self._push_latency.observe(seconds * 1000)
        label = self._label(gw) if status == "ok" else self._label.named(gw)
        self._push_seconds.labels(label).observe(seconds)

    def observe_push_counts(self, accepted: int, appended: int, duplicates: int) -> None:
        """Count the deltas of one successful push."""
        self._accepted.inc(accepted)
        self._appended.inc(appended)
        self._duplicates.inc(duplicates)

    def observe_pull(self, gw: str, deltas: int, seconds: float) -> None:
        """Count one pull page served for ``gw``, its deltas and its duration."""
        self._pull_total.inc()
        self._pulled.inc(deltas)
        self._pull_seconds.labels(self._label(gw)).observe(seconds)

    def observe_group_commit(self, size: int) -> None:
        """Record one WAL group commit of ``size`` pushes (the WAL writer's observer)."""
        self._group_size.observe(size)

    def render(self, backlogs: Mapping[str, tuple[int, int]]) -> str:
        """Prometheus text exposition; ``backlogs`` maps gateway id → (entries, bytes)."""
        text = generate_latest(self._exposed) + generate_latest(_Backlog(backlogs, self._label))
        return text.decode()
