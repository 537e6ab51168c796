"""In-process counters exposed as Prometheus text at ``/metrics``."""

from __future__ import annotations

import threading
from collections import defaultdict

__all__ = ["Metrics"]

_BUCKETS_MS = (1, 5, 10, 50, 100, 500)


class Metrics:
    """Thread-safe counters and a push-latency histogram (names follow the reference)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.push_total: dict[str, int] = defaultdict(int)
        self.pull_total = 0
        self.deltas_accepted = 0
        self.deltas_appended = 0
        self.deltas_duplicate = 0
        self.deltas_pulled = 0
        self._latency_buckets = [0] * (len(_BUCKETS_MS) + 1)
        self._latency_sum = 0.0
        self._latency_count = 0

    def observe_push(self, status: str, latency_ms: float) -> None:
        """Count one push by outcome and record its latency."""
        with self._lock:
            self.push_total[status] += 1
            i = next((i for i, b in enumerate(_BUCKETS_MS) if latency_ms <= b), len(_BUCKETS_MS))
            self._latency_buckets[i] += 1
            self._latency_sum += latency_ms
            self._latency_count += 1

    def observe_push_counts(self, accepted: int, appended: int, duplicates: int) -> None:
        """Count the deltas of one successful push."""
        with self._lock:
            self.deltas_accepted += accepted
            self.deltas_appended += appended
            self.deltas_duplicate += duplicates

    def observe_pull(self, deltas: int) -> None:
        """Count one served pull page."""
        with self._lock:
            self.pull_total += 1
            self.deltas_pulled += deltas

    def render(self, backlog: dict[str, tuple[int, int]]) -> str:
        """Prometheus text exposition; ``backlog`` maps gateway id → (entries, bytes)."""
        with self._lock:
            lines = [
                "# HELP lakesync_push_total Push requests by outcome.",
                "# TYPE lakesync_push_total counter",
            ]
            lines += [
                f'lakesync_push_total{{status="{s}"}} {n}'
                for s, n in sorted(self.push_total.items())
            ]
            lines += [
                "# HELP lakesync_pull_total Pull pages served.",
                "# TYPE lakesync_pull_total counter",
                f"lakesync_pull_total {self.pull_total}",
                "# HELP lakesync_deltas_accepted_total Deltas accepted (new and duplicate).",
                "# TYPE lakesync_deltas_accepted_total counter",
                f"lakesync_deltas_accepted_total {self.deltas_accepted}",
                "# HELP lakesync_wal_appended_total Effective changes appended to the WAL.",
                "# TYPE lakesync_wal_appended_total counter",
                f"lakesync_wal_appended_total {self.deltas_appended}",
                "# HELP lakesync_deltas_duplicate_total Deltas dropped as already accepted.",
                "# TYPE lakesync_deltas_duplicate_total counter",
                f"lakesync_deltas_duplicate_total {self.deltas_duplicate}",
                "# HELP lakesync_deltas_pulled_total Deltas served by pulls.",
                "# TYPE lakesync_deltas_pulled_total counter",
                f"lakesync_deltas_pulled_total {self.deltas_pulled}",
                "# HELP lakesync_push_latency_ms Push latency in milliseconds.",
                "# TYPE lakesync_push_latency_ms histogram",
            ]
            cumulative = 0
            for bound, count in zip((*_BUCKETS_MS, "+Inf"), self._latency_buckets, strict=True):
                cumulative += count
                lines.append(f'lakesync_push_latency_ms_bucket{{le="{bound}"}} {cumulative}')
            lines.append(f"lakesync_push_latency_ms_sum {self._latency_sum:.3f}")
            lines.append(f"lakesync_push_latency_ms_count {self._latency_count}")
        lines += [
            "# HELP lakesync_wal_backlog_entries Unflushed WAL entries per gateway.",
            "# TYPE lakesync_wal_backlog_entries gauge",
        ]
        lines += [
            f'lakesync_wal_backlog_entries{{gateway="{g}"}} {e}'
            for g, (e, _) in sorted(backlog.items())
        ]
        lines += [
            "# HELP lakesync_buffer_bytes Unflushed WAL bytes per gateway (estimate).",
            "# TYPE lakesync_buffer_bytes gauge",
        ]
        lines += [
            f'lakesync_buffer_bytes{{gateway="{g}"}} {b}' for g, (_, b) in sorted(backlog.items())
        ]
        return "\n".join(lines) + "\n"
