"""Gateway benchmark, profiles: py-spy on the server (workers=1) under 4 x 500 push load (CPU
samples and wall samples including waits) and under pull load (TS pages, random cursors).

Raw stacks go to ``benchmarks/results/profile-{push,pull}-<backend>-<mode>.txt``; the JSON and
the report hold each profile summarised by category (database driver, COMMIT, SQLAlchemy,
merge, wire decoding, HTTP stack, queueing for the writer, ...).

Usage (from the repository root):
    .venv/bin/python benchmarks/bench_gateway_profile.py --quick --backends sqlite
Results: a summary on stdout and JSON in benchmarks/results/gateway_profile.json (``--out``).
``benchmarks/bench_gateway.py --profile`` runs it after the other sections.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.harness import snapshot

snapshot.activate(__name__ == "__main__" and "--no-snapshot" not in sys.argv)

from benchmarks.harness.gateway_run import Run, Scenario, parser, run  # noqa: E402
from benchmarks.harness.load import (  # noqa: E402
    gateway,
    max_cursor,
    register_schema,
    run_pulls,
    run_push,
    warm_up,
)
from benchmarks.harness.output import RESULTS, log  # noqa: E402
from benchmarks.harness.snapshot import ROOT, code_dir  # noqa: E402

_HTTP_STACK = (
    "/uvicorn/",
    "/litestar/",
    "/anyio/",
    "/asyncio/",
    "httptools",
    "/uvloop/",
    "/starlette/",
)


def _fn(frame: str) -> str:
    """Bare function name of a py-spy frame ``Class.func (file:line)``."""
    return frame.split(" (", 1)[0].rsplit(".", 1)[-1]


_CATEGORIES: list[tuple[str, Callable[[str], bool]]] = [
    (
        "db: driver execute (SQLite C / PG wait)",
        lambda f: _fn(f) in ("do_execute", "do_executemany") or "/psycopg/" in f,
    ),
    ("sqlalchemy: python overhead", lambda f: "/sqlalchemy/" in f),
    ("core.merge", lambda f: "/core/merge.py" in f),
    ("sync (push/pull logic)", lambda f: "/lakesync_platform/sync/" in f),
    ("wal (row building, SQL)", lambda f: "/lakesync_platform/wal/" in f),
    ("wire decode/validate", lambda f: "/core/wire.py" in f or "/core/delta.py" in f),
    ("schema check", lambda f: "/core/schema.py" in f),
    ("auth (JWT)", lambda f: "/core/auth.py" in f or "/gateway/auth.py" in f),
    ("hashlib/json/msgspec", lambda f: "hashlib" in f or "/json/" in f or "msgspec" in f),
    ("gateway routes", lambda f: "/gateway/" in f),
    (
        "http/asgi (uvicorn, litestar, anyio, asyncio)",
        lambda f: any(s in f for s in _HTTP_STACK),
    ),
]


def _stack_category(frames: list[str]) -> str:
    """Whole-stack rules that the leaf alone cannot tell (lock waits, commits)."""
    names = [_fn(f) for f in frames]
    leaf = frames[-1]
    if "threading.py" in leaf and names[-1] in ("wait", "acquire", "_wait_for_tstate_lock"):
        return "queued: waiting for the writer (group commit / writer lock)"
    if names[-1] in ("flock", "lockf"):
        return "queued: flock (writer lock across processes)"
    leaf_in_db = _fn(frames[-1]) in ("do_execute", "do_executemany") or "/psycopg/" in frames[-1]
    if "do_commit" in names:
        return "db: COMMIT (WAL write + fsync)"
    if leaf_in_db and "_on_begin" in names:
        return "db: BEGIN IMMEDIATE (SQLite; includes any wait for the write lock)"
    if leaf_in_db and "_lock_gateway" in names:
        return "db: SELECT ... FOR UPDATE (gateway row lock + wait)"
    return "other"


def _short(frame: str) -> str:
    """``func (/long/path/site-packages/pkg/mod.py:12)`` -> ``func (pkg/mod.py:12)``."""
    name, _, where = frame.partition(" (")
    where = where.rstrip(")")
    for marker in ("site-packages/", f"{ROOT}/", f"{code_dir()}/", "python3.11/"):
        if marker in where:
            where = where.split(marker, 1)[1]
            break
    return f"{name} ({where})"


def summarize_profile(path: Path, focus: str | None = None, top: int = 22) -> dict[str, Any]:
    """Aggregate py-spy raw (collapsed) stacks: leaf categories, self and inclusive tops.

    ``focus``: only stacks containing a frame with this substring (e.g. ``SyncService.push``).
    """
    leaf_self: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    cats: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        if focus and not any(focus in f for f in frames):
            continue
        n = int(count)
        total += n
        leaf = frames[-1]
        leaf_self[_short(leaf)] += n
        for f in set(_short(x) for x in frames):
            inclusive[f] += n
        cat = _stack_category(frames)
        for fr in reversed(frames if cat == "other" else []):  # deepest categorised frame
            hit = next((name for name, test in _CATEGORIES if test(fr)), None)
            if hit:
                cat = hit
                break
        if cat.startswith("db: driver"):
            # which WAL operation is waiting on / running in the database driver
            op = next(
                (f.split(" (")[0] for f in reversed(frames) if "/lakesync_platform/wal/" in f), None
            )
            cat = f"db: driver execute in {op}" if op else cat
        cats[cat] += n
    if total == 0:
        return {"samples": 0}

    def share(c: Counter[str]) -> dict[str, float]:
        return {k: round(100 * v / total, 1) for k, v in c.most_common(top)}

    return {
        "samples": total,
        "focus": focus,
        "categories_pct": share(cats),
        "self_pct": share(leaf_self),
        "inclusive_pct": share(inclusive),
    }


def pyspy_record(pid: int, seconds: float, out: Path, idle: bool) -> subprocess.Popen[bytes]:
    """Start ``py-spy record`` (raw collapsed stacks, 200 Hz) on ``pid`` for ``seconds``."""
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    args = [
        exe,
        "record",
        "--pid",
        str(pid),
        "--duration",
        str(int(seconds)),
        "--rate",
        "200",
        "--format",
        "raw",
        "--full-filenames",
        "--output",
        str(out),
        "--nonblocking",
    ]
    if idle:
        args.append("--idle")
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def measure(ctx: Run) -> dict[str, Any]:
    """py-spy the server under 4 x 500 push load (CPU and wall/idle), and under pull load."""
    plan, corpus = ctx.plan, ctx.corpus
    out: dict[str, Any] = {}
    seconds = 6
    for bname in plan.backends:
        backend = ctx.backends[bname]
        url = backend.fresh("profile")
        server = gateway(url, 1, ctx.workdir)
        try:
            server.start()
            register_schema(server)
            warm_up(server, corpus.warm[:2000])
            if not ctx.args.no_analyze:
                backend.analyze(url)
            assert server.proc is not None
            res_by_mode = {}
            for mode, idle in (("cpu", False), ("wall", True)):
                raw = RESULTS / f"profile-push-{bname}-{mode}.txt"
                spy = pyspy_record(server.proc.pid, seconds, raw, idle)
                time.sleep(0.5)
                per = 15_000 if not plan.quick else 4_000
                lo = 0 if mode == "cpu" else per
                res = run_push(server, corpus, 4, 500, seconds - 1, ranges=[(lo, lo + per)] * 4)
                _, err = spy.communicate(timeout=120)
                if not raw.exists():
                    raise RuntimeError(f"py-spy failed: {err.decode()[-800:]}")
                res_by_mode[mode] = {
                    "throughput_under_profiler": res["deltas_per_s"],
                    "raw": str(raw.relative_to(ROOT)),
                    "whole_process": summarize_profile(raw),
                    "push_handler": summarize_profile(raw, focus="SyncService.push"),
                    # the group-commit writer thread (BEGIN .. jobs .. COMMIT), if the code has one
                    "push_writer": summarize_profile(raw, focus="GroupCommitter._commit"),
                }
                log(f"profiled push {bname} ({mode}): {raw.name}")
            # pull profile (TS format, random cursors)
            size = max_cursor(server)
            raw = RESULTS / f"profile-pull-{bname}-cpu.txt"
            spy = pyspy_record(server.proc.pid, seconds, raw, False)
            time.sleep(0.5)
            t_end = time.perf_counter() + seconds - 1
            n = 0
            while time.perf_counter() < t_end:
                run_pulls(server, 10, False, size, seed=n)
                n += 1
            spy.communicate(timeout=120)
            res_by_mode["pull_cpu"] = {
                "raw": str(raw.relative_to(ROOT)),
                "whole_process": summarize_profile(raw),
                "pull_handler": summarize_profile(raw, focus="SyncService.pull"),
            }
            log(f"profiled pull {bname}: {raw.name}")
            out[bname] = res_by_mode
        finally:
            server.stop()
            backend.drop(url)
    return out


def report(result: dict[str, Any]) -> list[str]:
    """Each profile's categories."""
    prof = result.get("profile")
    if not prof:
        return []
    parts = [
        "\n== Profiles (py-spy on the server, workers=1; raw stacks in "
        "benchmarks/results/profile-*.txt)"
    ]
    for bname, modes in prof.items():
        views = [
            ("push, CPU samples, whole process", modes["cpu"]["whole_process"]),
            (
                "push, wall samples (incl. waits) inside SyncService.push",
                modes["wall"]["push_handler"],
            ),
            (
                "push, wall samples of the WAL writer thread (GroupCommitter._commit)",
                modes["wall"].get("push_writer", {}),
            ),
            ("pull, CPU samples, whole process", modes["pull_cpu"]["whole_process"]),
        ]
        for title, summ in views:
            if not summ.get("samples"):
                continue
            parts.append(f"-- {bname}: {title} ({summ['samples']} samples)")
            for k, v in summ["categories_pct"].items():
                parts.append(f"     {v:5.1f}%  {k}")
    return parts


PROFILE = Scenario("profile", measure, report, after_targets=True)


def main(argv: list[str] | None = None) -> int:
    """Record the profiles alone."""
    ap = parser(__doc__, [PROFILE], "gateway_profile.json", quick_help="shorter pushes")
    return run(ap.parse_args(argv), [PROFILE])


if __name__ == "__main__":
    sys.exit(main())
