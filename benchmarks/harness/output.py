"""Progress lines, results JSON (``benchmarks/results/*.json``) and plain-text tables."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from .snapshot import ROOT

RESULTS = ROOT / "benchmarks" / "results"
"""Where results are written (git-ignored)."""


def log(msg: str) -> None:
    """A time-stamped progress line on stderr."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def write_json(path: Path | str, data: Any) -> Path:
    """Write ``data`` as indented JSON (values JSON cannot hold as their ``str``); returns the
    path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2, default=str) + "\n")
    return out


def table(headers: list[str], rows: list[list[Any]]) -> str:
    """Right-aligned columns under a dashed rule; numbers formatted by :func:`cell`."""
    cells = [[str(h) for h in headers]] + [[cell(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(r: list[str]) -> str:
        return "  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True))

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), sep, *(line(r) for r in cells[1:])])


def cell(v: Any) -> str:
    """A table cell: thousands separated, small floats with at most two decimals."""
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.2f}".rstrip("0").rstrip(".") or "0"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def fmt_count(n: int) -> str:
    """``1000000`` -> ``1M``, ``10000`` -> ``10k`` (round counts only)."""
    if n >= 1_000_000 and n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    if n >= 1000 and n % 1000 == 0:
        return f"{n // 1000}k"
    return str(n)
