"""What a long run samples and how it is judged: processes' memory and open files, a
PostgreSQL WAL's size, latency windows, the slope of a series after warm-up, and the plot.

Processes are read from ``/proc`` (Linux): the resident set and the open descriptors of a
process and all of its descendants (a gateway with workers, HAProxy's master and worker).
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .stats import pct

_PAGE = os.sysconf("SC_PAGE_SIZE")


def descendants(pid: int) -> list[int]:
    """``pid`` and every live process below it."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        if not Path(f"/proc/{p}").exists():
            continue
        found.append(p)
        for task in Path(f"/proc/{p}/task").glob("*/children"):
            try:
                todo += [int(c) for c in task.read_text().split()]
            except OSError:
                continue
    return found


def rss_bytes(pid: int) -> int:
    """Resident memory of one process (0 when it is gone)."""
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


def open_fds(pid: int) -> int:
    """Open file descriptors of one process (0 when it is gone)."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


@dataclass(frozen=True, slots=True)
class TreeSample:
    """Memory and descriptors of a process tree at one moment."""

    rss_mb: float
    fds: int
    processes: int


def sample_tree(pid: int | None, *, children: bool = True) -> TreeSample | None:
    """The tree under ``pid``, or the process alone without ``children`` (``None`` or gone:
    ``None``)."""
    if pid is None or not Path(f"/proc/{pid}").exists():
        return None
    pids = descendants(pid) if children else [pid]
    return TreeSample(
        round(sum(rss_bytes(p) for p in pids) / 2**20, 1),
        sum(open_fds(p) for p in pids),
        len(pids),
    )


def postgres_tables_bytes(url: str) -> int:
    """Bytes the tables of ``url``'s database take on disk, indexes and TOAST included."""
    import psycopg

    from .backends import libpq_url

    with psycopg.connect(libpq_url(url)) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'public' AND c.relkind = 'r'"
        ).fetchone()
    return int(row[0]) if row else 0


def folder_bytes(path: Path) -> int:
    """Bytes of the files under ``path``."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total


def latency_window(values_s: Sequence[float]) -> dict[str, float | int]:
    """Count and p50/p95/p99 (milliseconds) of one window of latencies in seconds."""
    ms = [v * 1000 for v in values_s]
    return {
        "n": len(ms),
        "p50": round(pct(ms, 50), 2),
        "p95": round(pct(ms, 95), 2),
        "p99": round(pct(ms, 99), 2),
    }


def slope_per_hour(points: Iterable[tuple[float, float]]) -> float | None:
    """Least-squares slope of ``(seconds, value)`` points, per hour (``None``: under three
    points)."""
    pts = [(t, v) for t, v in points if v == v]  # NaN-free
    if len(pts) < 3 or len({t for t, _ in pts}) < 2:
        return None
    fit = statistics.linear_regression([t for t, _ in pts], [v for _, v in pts])
    return fit.slope * 3600


def plot(
    samples: list[dict[str, Any]],
    warmup_s: float,
    out: Path,
    title: str,
    spans: Sequence[tuple[float, float]] = (),
    transient: str = "",
) -> Path:
    """Four panels over time: RSS and open descriptors per long-lived component (not the
    ``transient`` one), the WAL's and the lake's size, push and pull latency percentiles; a
    dotted line where warm-up ends and shaded ``spans`` (seconds: the pipeline's runs)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    minutes = [s["t"] / 60 for s in samples]
    components = sorted({c for s in samples for c in s["processes"]} - {transient})
    fig, axes = plt.subplots(2, 2, figsize=(13, 8), sharex=True)
    (rss, fds), (size, latency) = axes
    for comp in components:
        pts = [(m, s["processes"].get(comp)) for m, s in zip(minutes, samples, strict=True)]
        xs = [m for m, p in pts if p]
        rss.plot(xs, [p["rss_mb"] for _, p in pts if p], label=comp)
        fds.plot(xs, [p["fds"] for _, p in pts if p], label=comp)
    rss.set_ylabel("RSS (MB)")
    fds.set_ylabel("open file descriptors")
    size.plot(minutes, [s["wal_mb"] for s in samples], label="WAL (PostgreSQL tables)")
    size.plot(minutes, [s["lake_mb"] for s in samples], label="lake (warehouse files)")
    size.set_ylabel("MB on disk (shaded: pipeline runs)")
    for kind, style in (("push", "-"), ("pull", "--")):
        for q in ("p50", "p99"):
            ys = [s[kind][q] if s[kind]["n"] else float("nan") for s in samples]
            latency.plot(minutes, ys, style, label=f"{kind} {q}")
    latency.set_ylabel("latency (ms)")
    latency.set_yscale("log")
    for ax in axes.flat:
        ax.axvline(warmup_s / 60, color="grey", linestyle=":", linewidth=1)
        for start, end in spans:
            ax.axvspan(start / 60, end / 60, color="tab:purple", alpha=0.06, linewidth=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    for ax in axes[1]:
        ax.set_xlabel("minutes")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
