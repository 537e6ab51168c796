"""The cost curve of a Dagster sync run: seconds against lake rows, today's code beside the new.

Issue 27, deliverable 6: a Dagster ``sync_<gw>`` run (flush the WAL to Iceberg → MERGE into the
state table → materialise into the destination, plus the asset checks) with nothing new and
after 200 updates, on lakes of 10k, 300k and 3M rows, measured side by side in one run for

* **old** — today's code, the commit before the issue's work (``--old``, default ``5ce1425``;
  its packages written out with ``git archive``): each run starts an in-process Spark driver,
  a JVM per run process;
* **new** — a code tree (``--new``, default this checkout; its packages copied at start, so
  edits meanwhile do not leak in) whose runs connect to a Spark Connect server the benchmark
  starts for the lake (``lakesync spark-server`` of that tree) with
  ``LAKESYNC_SPARK_REMOTE=sc://127.0.0.1:PORT``; ``--new-spark local`` (or ``server,local``)
  measures the same tree with ``LAKESYNC_SPARK_REMOTE=local`` (an in-process driver per run)
  as variant **new-local**.

Each run is a fresh process, as Dagster's default run launcher makes one:
``dagster job execute -m assets.definitions -a defs -j sync_cost`` with the variant's tree on
``PYTHONPATH``, ``LAKESYNC_*`` pointing at the lake and a Dagster instance per variant. Two
figures per run, kept apart everywhere:

* ``process_s`` — the run process from launch to exit (wall clock): what a run launcher's run
  costs (Python, Dagster and the code location load, the run, teardown);
* ``run_s`` — the run's own duration from Dagster's run record (start → end, the UI's figure),
  with each step's seconds from the event log (``steps_s``; asset steps and check steps).

The lake: one declared table (gateway ``cost``, table ``todos`` as the demo's, an SQLite
destination in the data directory). Per size it is built once — N rows pushed through
``SyncService.push`` (:mod:`benchmarks.harness.wal_writes`, in a child process of the build
tree), then one initial sync (``lakesync run sync``) — and copied for each variant. Iceberg
metadata holds absolute paths, so every copy runs at the same path: a variant's copy is renamed
into place for its runs and back afterwards (the server of the ``new`` variant stays up
throughout; it is idle while another variant's copy is in place).

Protocol per size: each variant's first run (a no-op; first-touch costs, reported apart), then
``--rounds`` rounds, alternating the variants' order; each round, per variant: a no-op run, then
200 updates of distinct random rows pushed through ``SyncService.push`` (child process of the
variant's tree), then a run; the destination is checked for the 200 new titles. Figures are
medians over the rounds; a run that fails is recorded with its error and the rounds go on.
On the smallest lake, ``lakesync query "SELECT count(*) FROM todos" --gw cost`` is timed
(``--query-rounds``): old without a server, new with its server running. Before each timed
process the benchmark waits up to ``--quiet-wait`` s for the machine to calm down and records
the load it saw; each run also records its process tree's CPU, the server's, and the rest of
the machine's.

Targets (issue 27), on the new variant: a no-op run ≤ 3 s and a 200-update run ≤ 5 s on 10k
rows; the 3M-row 200-update run ≤ 1.3× the 10k-row one; ``lakesync query`` of a small table
≤ 1 s with the server running. Each is shown against ``run_s`` and ``process_s``.

Usage::

    python benchmarks/bench_cost_curve.py [--sizes 10000,300000,3000000] [--rounds 3]
        [--old 5ce1425] [--new PATH] [--new-spark server[,local]] [--quick] [--keep]

``--quick``: lakes of 2k and 20k rows, one round (a smoke run). Prints tables, writes
``benchmarks/results/cost_curve.json`` and ``cost_curve.png``. Needs the jar folder filled
(``lakesync setup``; ``LAKESYNC_JAR_DIR``, default ``data/jars`` of this checkout).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.harness.connect_server import ConnectServer
from benchmarks.harness.cpu import host_cpu, wait_for_quiet
from benchmarks.harness.job_runs import (
    dagster_home,
    execute_job,
    run_child,
    tail,
    traceback_summary,
)
from benchmarks.harness.output import RESULTS, cell, fmt_count, log, table, write_json
from benchmarks.harness.snapshot import ROOT, code_hash, copy_packages, export_commit, git_info

GW = "cost"
TABLE = "todos"
JOB = "sync_cost"
UPDATES = 200
WAL_WRITES = Path(__file__).resolve().parent / "harness" / "wal_writes.py"
DEFS_YAML = f"""\
# The cost-curve benchmark's lake: the demo's todos table on gateway {GW!r}, materialised into
# an SQLite file in the data directory.
gateway: {GW}
tables:
  - table: {TABLE}
    columns:
      - {{name: title, type: string}}
      - {{name: completed, type: boolean}}
      - {{name: priority, type: number}}
      - {{name: tags, type: json}}
    softDelete: true
destinations:
  - name: local
    kind: sqlite
    url: "sqlite:///${{LAKESYNC_DATA_DIR}}/destination.db"
    tables: [{TABLE}]
"""
KINDS = ("noop", "update")
"""The two runs of a round: nothing new, then after :data:`UPDATES` updates."""


@dataclass
class Variant:
    """A code version as the benchmark runs it: its tree and how its runs get Spark."""

    name: str
    tree: Path
    spark: str
    """``in-process`` (old code: a driver per run), ``server`` or ``local``
    (``LAKESYNC_SPARK_REMOTE=local``: a driver per run)."""
    info: dict[str, Any] = field(default_factory=dict)
    server: ConnectServer | None = None


class Lake:
    """One size's lake: a copy per variant, each renamed to :attr:`path` while it is used."""

    def __init__(self, work: Path, rows: int) -> None:
        self.rows = rows
        self.path = work / f"lake-{fmt_count(rows)}"
        self.slots = work / "slots" / fmt_count(rows)

    def slot(self, variant: str) -> Path:
        """Where ``variant``'s copy waits while another is in place."""
        return self.slots / variant

    def distribute(self, variants: list[str]) -> None:
        """Copy the freshly built lake at :attr:`path` for every variant (the first takes the
        original)."""
        self.slots.mkdir(parents=True, exist_ok=True)
        for name in variants[1:]:
            shutil.copytree(self.path, self.slot(name), symlinks=True)
        self.path.rename(self.slot(variants[0]))

    @contextmanager
    def placed(self, variant: str) -> Iterator[Path]:
        """``variant``'s copy at :attr:`path` for the block."""
        self.slot(variant).rename(self.path)
        try:
            yield self.path
        finally:
            self.path.rename(self.slot(variant))

    def remove(self) -> None:
        """Delete every copy."""
        shutil.rmtree(self.slots, ignore_errors=True)
        shutil.rmtree(self.path, ignore_errors=True)


class Bench:
    """The benchmark's state: the work folder, the variants, the settings every child gets."""

    def __init__(self, args: argparse.Namespace, work: Path, variants: list[Variant]) -> None:
        self.args = args
        self.work = work
        self.variants = variants
        self.defs = work / "defs"
        self.defs.mkdir(parents=True, exist_ok=True)
        (self.defs / f"{GW}.yaml").write_text(DEFS_YAML)
        self.logs = work / "logs"
        self.jar_dir = Path(args.jar_dir).resolve()
        self.homes = {v.name: dagster_home(work / "dagster" / v.name) for v in variants}
        self._log_seq = 0

    def env(
        self, variant: Variant | None, data_dir: Path, remote: str | None = None
    ) -> dict[str, str]:
        """The environment of a child process: this one's without LakeSync or Dagster
        settings, plus the lake's and the variant's Spark (``remote`` when no variant)."""
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("LAKESYNC_", "DAGSTER_")) and k != "PYTHONPATH"
        }
        env.update(
            LAKESYNC_DATA_DIR=str(data_dir),
            LAKESYNC_DEFS_DIR=str(self.defs),
            LAKESYNC_JAR_DIR=str(self.jar_dir),
        )
        if variant is not None and variant.spark == "server" and variant.server is not None:
            remote = variant.server.url
        elif variant is not None and variant.spark == "local":
            remote = "local"
        if remote is not None:
            env["LAKESYNC_SPARK_REMOTE"] = remote
        return env

    def log_path(self, label: str) -> Path:
        """A fresh log file for one child process."""
        self._log_seq += 1
        return self.logs / f"{self._log_seq:03d}-{label}.log"

    def quiet(self) -> float:
        """Wait (up to ``--quiet-wait`` s) for other processes to calm down; the load seen."""
        return wait_for_quiet(self.args.quiet_wait) if self.args.quiet_wait > 0 else -1.0

    # ------------------------------------------------------------------ the lake

    def wal_write(self, tree: Path, env: dict[str, str], what: str, **opts: int) -> dict[str, Any]:
        """Run :mod:`benchmarks.harness.wal_writes` with ``tree``'s code; its JSON line."""
        cmd = [sys.executable, str(WAL_WRITES), what, "--gw", GW, "--table", TABLE]
        for key, value in opts.items():
            cmd += [f"--{key}", str(value)]
        path = self.log_path(f"wal-{what}")
        done = run_child(
            cmd,
            cwd=tree,
            env={**env, "PYTHONPATH": str(tree)},
            log_path=path,
            timeout_s=self.args.run_timeout,
        )
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.startswith("{")]
        if done["returncode"] != 0 or not lines:
            raise RuntimeError(f"wal_writes {what} failed: {traceback_summary(path)}")
        return {**json.loads(lines[-1]), "process_s": done["wall_s"]}

    def build(self, lake: Lake) -> dict[str, Any]:
        """Fill the lake's WAL with ``rows`` rows and sync it once with the build tree; copy it
        for every variant."""
        builder = next(v for v in self.variants if v.name == self.args.build_with)
        env = self.env(None, lake.path, remote="local")  # no server yet (a new tree's build)
        shutil.rmtree(lake.path, ignore_errors=True)
        lake.path.mkdir(parents=True)
        out: dict[str, Any] = {"with": builder.name}
        log(f"{fmt_count(lake.rows)}: pushing {lake.rows:,} rows through SyncService …")
        out["fill"] = self.wal_write(builder.tree, env, "fill", rows=lake.rows)
        log(f"{fmt_count(lake.rows)}: initial sync (lakesync run sync, {builder.name} code) …")
        cmd = [sys.executable, "-m", "lakesync_platform.cli", "run", "sync", "--gw", GW]
        path = self.log_path("initial-sync")
        done = run_child(
            cmd,
            cwd=builder.tree,
            env={**env, "PYTHONPATH": str(builder.tree)},
            log_path=path,
            timeout_s=self.args.run_timeout,
        )
        if done["returncode"] != 0:
            raise RuntimeError(f"the initial sync failed: {traceback_summary(path)}")
        out["initial_sync_s"] = done["wall_s"]
        out["destination_rows"] = destination_rows(lake.path)
        if out["destination_rows"] != lake.rows:
            raise RuntimeError(f"the initial sync delivered {out['destination_rows']} rows")
        started = time.perf_counter()
        lake.distribute([v.name for v in self.variants])
        out["copy_s"] = round(time.perf_counter() - started, 2)
        out["lake_bytes"] = folder_bytes(lake.slot(self.variants[0].name))
        return out

    # ------------------------------------------------------------------ runs

    def run(self, variant: Variant, lake: Lake, label: str) -> dict[str, Any]:
        """One Dagster run of the sync job on ``variant``'s copy (in place)."""
        if variant.spark == "server" and variant.server is None:
            return {"status": "NOT_RUN", "error": variant.info.get("server_error", "no server")}
        background = self.quiet()
        server0 = variant.server.cpu_s() if variant.server else 0.0
        busy0 = sum(host_cpu())
        out = execute_job(
            JOB,
            tree=variant.tree,
            env=self.env(variant, lake.path),
            home=self.homes[variant.name],
            log_path=self.log_path(f"{fmt_count(lake.rows)}-{variant.name}-{label}"),
            timeout_s=self.args.run_timeout,
        )
        wall = out["process_s"]
        server = (variant.server.cpu_s() if variant.server else 0.0) - server0
        busy = sum(host_cpu()) - busy0
        out["background_cores"] = background
        out["server_cpu_s"] = round(server, 2)
        out["other_cpu_cores"] = round(max(0.0, busy - out["process_cpu_s"] - server) / wall, 2)
        return out

    def round(self, variant: Variant, lake: Lake, seed: int) -> dict[str, Any]:
        """A no-op run, 200 updates, a run; and whether the destination has the updates."""
        out: dict[str, Any] = {"noop": self.run(variant, lake, "noop")}
        env = self.env(variant, lake.path)
        try:
            out["push"] = self.wal_write(
                variant.tree, env, "update", rows=lake.rows, count=UPDATES, seed=seed
            )
        except RuntimeError as exc:
            out["push"] = {"error": str(exc)}
            out["update"] = {"status": "NOT_RUN", "error": "the updates were not pushed"}
            return out
        out["update"] = self.run(variant, lake, "update")
        out["delivered"] = delivered(lake.path, seed)
        if out["update"].get("status") == "SUCCESS" and out["delivered"] != UPDATES:
            out["update"]["status"] = "INCOMPLETE"
            out["update"]["error"] = f"the destination has {out['delivered']} of the updates"
        return out

    def query(self, variant: Variant, lake: Lake) -> dict[str, Any]:
        """``lakesync query "SELECT count(*) FROM todos" --gw cost`` in a fresh process."""
        if variant.spark == "server" and variant.server is None:
            return {"ok": False, "error": variant.info.get("server_error", "no server")}
        background = self.quiet()
        cmd = [sys.executable, "-m", "lakesync_platform.cli", "query"]
        cmd += [f"SELECT count(*) FROM {TABLE}", "--gw", GW, "--data-dir", str(lake.path)]
        env = {**self.env(variant, lake.path), "PYTHONPATH": str(variant.tree)}
        path = self.log_path(f"query-{variant.name}")
        done = run_child(cmd, cwd=variant.tree, env=env, log_path=path, timeout_s=600)
        out: dict[str, Any] = {
            "s": done["wall_s"],
            "cpu_s": done["cpu_s"],
            "ok": done["returncode"] == 0,
            "background_cores": background,
        }
        text = path.read_text(errors="replace")
        if not out["ok"]:
            out["error"] = traceback_summary(path)
        elif str(lake.rows) not in text.replace(",", "").replace(" ", ""):
            out["ok"] = False
            out["error"] = f"no count of {lake.rows} in the output:\n{tail(path, 5)}"
        return out


def destination_rows(data_dir: Path) -> int:
    """Rows of the destination table."""
    with sqlite3.connect(data_dir / "destination.db") as conn:
        return int(conn.execute(f"SELECT count(*) FROM {TABLE}").fetchone()[0])


def delivered(data_dir: Path, seed: int) -> int:
    """How many of the updates pushed with ``seed`` the destination holds."""
    try:
        with sqlite3.connect(data_dir / "destination.db") as conn:
            sql = f"SELECT count(*) FROM {TABLE} WHERE title LIKE ?"
            return int(conn.execute(sql, (f"update {seed}-%",)).fetchone()[0])
    except sqlite3.Error:
        return -1


def folder_bytes(path: Path) -> int:
    """Bytes of the files under ``path``."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


# ---------------------------------------------------------------------- figures


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def summarise(rounds: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    """Medians over the rounds' successful ``kind`` runs; each step's median over every run in
    which that step succeeded (so a run whose checks fail still shows what its asset steps
    cost); the errors."""
    ok = [r[kind] for r in rounds if r[kind].get("status") == "SUCCESS"]
    steps: dict[str, list[float]] = {}
    for run in (r[kind] for r in rounds):  # a failed run's steps that succeeded count too
        for step, seconds in run.get("steps_s", {}).items():
            if step not in run.get("failed_steps", ()):
                steps.setdefault(step, []).append(seconds)
    return {
        "runs": len(rounds),
        "succeeded": len(ok),
        "process_s": _median([r["process_s"] for r in ok]),
        "run_s": _median([r["run_s"] for r in ok if "run_s" in r]),
        "steps_total_s": _median([r["steps_total_s"] for r in ok]),
        "steps_s": {k: _median(v) for k, v in steps.items()},
        "process_cpu_s": _median([r["process_cpu_s"] for r in ok]),
        "errors": sorted({r[kind].get("error", "") for r in rounds if r[kind] not in ok}),
    }


def ratio(a: float | None, b: float | None) -> float | None:
    """``a / b``, or ``None`` when either is missing."""
    return round(a / b, 2) if a and b else None


def targets(report: dict[str, Any], new: str) -> list[dict[str, Any]]:
    """Issue 27's targets for variant ``new``, against ``run_s`` and ``process_s``."""
    sizes = report["sizes"]
    if not sizes:
        return []
    small, large = sizes[0], sizes[-1]

    def fig(size: dict[str, Any], kind: str, metric: str) -> float | None:
        found = size.get("variants", {}).get(new, {}).get(kind, {})
        return found.get(metric) if isinstance(found, dict) else None

    out = []
    for metric in ("run_s", "process_s"):
        n_small, u_small = fig(small, "noop", metric), fig(small, "update", metric)
        u_large = fig(large, "update", metric)
        curve = ratio(u_large, u_small)
        out += [
            _target(f"no-op run, {fmt_count(small['rows'])} rows", metric, n_small, 3.0, "s"),
            _target(f"200-update run, {fmt_count(small['rows'])} rows", metric, u_small, 5.0, "s"),
        ]
        if large is not small:
            label = f"200-update run, {fmt_count(large['rows'])} / {fmt_count(small['rows'])}"
            out.append(_target(label, metric, curve, 1.3, "×"))
    q = report.get("query", {}).get(new, {}).get("median_s")
    out.append(
        _target(f"lakesync query, {fmt_count(small['rows'])} rows", "process_s", q, 1.0, "s")
    )
    return out


def _target(what: str, metric: str, value: float | None, limit: float, unit: str) -> dict[str, Any]:
    return {
        "target": what,
        "metric": metric,
        "limit": limit,
        "unit": unit,
        "measured": value,
        "met": None if value is None else value <= limit,
    }


# ---------------------------------------------------------------------- the run


def make_variants(args: argparse.Namespace, work: Path) -> list[Variant]:
    """The old tree (from ``--old``) and the new tree's variants (``--new``, ``--new-spark``)."""
    old_dir = Path(args.old)
    if old_dir.is_dir():
        old_tree = copy_packages(old_dir.resolve(), work / "code-old")
        old_info: dict[str, Any] = {"tree": str(old_dir.resolve())}
    else:
        old_tree = work / "code-old"
        old_info = export_commit(args.old, old_tree)
    old_info["code_hash"] = code_hash(old_tree)
    new_src = Path(args.new).resolve()
    new_tree = copy_packages(new_src, work / "code-new")
    new_info = {"tree": str(new_src), "code_hash": code_hash(new_tree)}
    if new_src == ROOT:
        new_info.update(git_info())
    variants = [Variant("old", old_tree, "in-process", old_info)]
    for mode in args.new_spark.split(","):
        name = "new" if mode == "server" else f"new-{mode}"
        variants.append(Variant(name, new_tree, mode, dict(new_info)))
    return variants


def bench_size(bench: Bench, rows: int, query: bool) -> dict[str, Any]:
    """One size: its lake, servers, runs (and the query timings); everything started for it
    is stopped and, without ``--keep``, its lake copies removed. A lake that cannot be built
    or a server error is recorded as the size's ``error``."""
    started = time.perf_counter()
    lake = Lake(bench.work, rows)
    out: dict[str, Any] = {"rows": rows}
    try:
        return _bench_size(bench, lake, out, query)
    except RuntimeError as exc:  # the lake could not be built, or a server went wrong
        out["error"] = str(exc)
        log(f"{fmt_count(rows)}: {exc}")
        return out
    finally:
        for v in bench.variants:
            if v.server is not None:
                v.server.stop()
                v.server = None
        if not bench.args.keep:
            lake.remove()
        out["elapsed_s"] = round(time.perf_counter() - started, 1)


def _bench_size(bench: Bench, lake: Lake, out: dict[str, Any], query: bool) -> dict[str, Any]:
    """Build the lake, start the servers, run the first runs, the rounds and the queries."""
    rows = lake.rows
    out["build"] = bench.build(lake)
    log(f"{fmt_count(rows)}: built ({out['build']})")
    out["servers"] = {}
    for v in bench.variants:
        if v.spark != "server":
            continue
        server = ConnectServer(
            v.tree, lake.path, bench.env(None, lake.path), bench.log_path(f"server-{v.name}")
        )
        with lake.placed(v.name):
            try:
                out["servers"][v.name] = {"start_s": server.start(), "url": server.url}
                v.server = server
                v.info.pop("server_error", None)
            except RuntimeError as exc:
                v.info["server_error"] = f"the Spark Connect server did not start: {exc}"
                out["servers"][v.name] = {"error": v.info["server_error"]}
        log(f"{fmt_count(rows)}: server for {v.name}: {out['servers'][v.name]}")
    first: dict[str, Any] = {}
    for v in bench.variants:
        with lake.placed(v.name):
            first[v.name] = bench.run(v, lake, "first")
        log(f"{fmt_count(rows)}: first run of {v.name}: {brief(first[v.name])}")
    rounds: dict[str, list[dict[str, Any]]] = {v.name: [] for v in bench.variants}
    for r in range(bench.args.rounds):
        order = bench.variants if r % 2 == 0 else bench.variants[::-1]
        for v in order:
            with lake.placed(v.name):
                done = bench.round(v, lake, seed=rows + r)
            rounds[v.name].append(done)
            log(
                f"{fmt_count(rows)} round {r + 1} {v.name}: no-op {brief(done['noop'])}; "
                f"200 updates {brief(done['update'])}"
            )
    out["variants"] = {
        v.name: {
            "first_run": first[v.name],
            **{kind: summarise(rounds[v.name], kind) for kind in KINDS},
            "rounds": rounds[v.name],
        }
        for v in bench.variants
    }
    if query:
        out["query"] = query_rounds(bench, lake)
    return out


def query_rounds(bench: Bench, lake: Lake) -> dict[str, Any]:
    """``--query-rounds`` timings of ``lakesync query`` per variant, alternating."""
    runs: dict[str, list[dict[str, Any]]] = {v.name: [] for v in bench.variants}
    for r in range(bench.args.query_rounds):
        order = bench.variants if r % 2 == 0 else bench.variants[::-1]
        for v in order:
            with lake.placed(v.name):
                runs[v.name].append(bench.query(v, lake))
    out = {}
    for name, done in runs.items():
        ok = [q["s"] for q in done if q["ok"]]
        out[name] = {
            "median_s": _median(ok),
            "succeeded": len(ok),
            "runs": done,
            "errors": sorted({q["error"] for q in done if not q["ok"]}),
        }
        log(f"query {name}: median {out[name]['median_s']} s ({len(ok)}/{len(done)} ok)")
    return out


def brief(run: dict[str, Any]) -> str:
    """A run in a few words for the progress log."""
    if run.get("status") == "SUCCESS":
        return f"{run['process_s']:.1f} s process, {run.get('run_s', 0):.1f} s run"
    error = (run.get("error") or "").splitlines()
    return f"{run.get('status')}: {error[0][:160] if error else '?'}"


def main() -> None:
    """Run the benchmark; write ``benchmarks/results/cost_curve.json`` and the plot."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes", default="10000,300000,3000000", help="lake rows, comma-separated"
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds per size (medians)")
    parser.add_argument("--old", default="5ce1425", help="today's code: a commit, or a tree")
    parser.add_argument("--new", default=str(ROOT), help="the new code's tree")
    parser.add_argument(
        "--new-spark",
        default="server",
        help="how the new code's runs get Spark: server (a Spark Connect server), local "
        "(LAKESYNC_SPARK_REMOTE=local), or both comma-separated",
    )
    parser.add_argument("--build-with", default="old", help="the variant that builds the lakes")
    parser.add_argument("--query-rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="2k and 20k rows, one round")
    parser.add_argument("--quiet-wait", type=float, default=10.0, help="max s to wait for calm")
    parser.add_argument("--run-timeout", type=float, default=3600.0, help="s per child process")
    parser.add_argument("--jar-dir", default=os.environ.get("LAKESYNC_JAR_DIR", ROOT / "data/jars"))
    parser.add_argument("--keep", action="store_true", help="keep the work folder (lakes, logs)")
    parser.add_argument("--out", default=str(RESULTS / "cost_curve.json"))
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.rounds, args.query_rounds = "2000,20000", 1, 2
    sizes = sorted(int(s) for s in args.sizes.split(","))
    if not any(Path(args.jar_dir).glob("iceberg-spark-runtime*.jar")):
        raise SystemExit(f"no jars in {args.jar_dir}: run `lakesync setup` (or --jar-dir)")

    def stop(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    work = Path(tempfile.mkdtemp(prefix="lakesync-cost-curve-"))
    started = time.perf_counter()
    report: dict[str, Any] = {
        "bench": "cost_curve",
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "loadavg_at_start": os.getloadavg(),
        },
        "protocol": {**vars(args), "sizes": sizes, "updates": UPDATES, "job": JOB},
        "sizes": [],
    }
    try:
        variants = make_variants(args, work)
        if args.build_with not in {v.name for v in variants}:
            raise SystemExit(f"--build-with {args.build_with}: no such variant")
        report["variants"] = {v.name: {"spark": v.spark, **v.info} for v in variants}
        bench = Bench(args, work, variants)
        log(f"work folder {work}; variants {', '.join(v.name for v in variants)}")
        for i, rows in enumerate(sizes):
            size = bench_size(bench, rows, query=i == 0)
            if "query" in size:
                report["query"] = size.pop("query")
            report["sizes"].append(size)
            write_json(args.out, report)  # what there is so far, in case a later size dies
    finally:
        report["elapsed_s"] = round(time.perf_counter() - started, 1)
        report["machine"]["loadavg_at_end"] = os.getloadavg()
        if args.keep:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    new = next((v for v in report.get("variants", {}) if v.startswith("new")), None)
    report["side_by_side"] = side_by_side(report)
    report["targets"] = targets(report, new) if new else []
    out = write_json(args.out, report)
    png = plot(report, out.with_suffix(".png"))
    print_report(report)
    log(f"wrote {out} and {png} in {report['elapsed_s']:.0f} s")


def side_by_side(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Per size, kind and new variant: old / new of the medians (the speed-up)."""
    out = []
    for size in report["sizes"]:
        found = size.get("variants", {})
        old = found.get("old")
        for name, new in found.items():
            if name == "old" or old is None:
                continue
            for kind in KINDS:
                out.append(
                    {
                        "rows": size["rows"],
                        "variant": name,
                        "kind": kind,
                        "run_speedup": ratio(old[kind]["run_s"], new[kind]["run_s"]),
                        "process_speedup": ratio(old[kind]["process_s"], new[kind]["process_s"]),
                    }
                )
    return out


def print_report(report: dict[str, Any]) -> None:
    """The figures as tables on stdout."""
    rows = []
    for size in report["sizes"]:
        for name, v in size.get("variants", {}).items():
            row: list[Any] = [fmt_count(size["rows"]), name]
            for kind in KINDS:
                k = v[kind]
                row += [
                    k["process_s"] if k["process_s"] is not None else "failed",
                    k["run_s"] if k["run_s"] is not None else "-",
                    f"{k['succeeded']}/{k['runs']}",
                ]
            rows.append(row)
    heads = ["rows", "code"]
    for kind in ("no-op", "200 upd"):
        heads += [f"{kind} process s", f"{kind} run s", "ok"]
    print("Dagster sync run, medians (process: launch → exit; run: Dagster's run start → end)")
    print(table(heads, rows))
    steps = []
    for size in report["sizes"]:
        for name, v in size.get("variants", {}).items():
            for step, seconds in v["update"]["steps_s"].items():
                steps.append([fmt_count(size["rows"]), name, step.split("__", 1)[-1], seconds])
    if steps:
        print("\n200-update run, each step that succeeded (median s, from Dagster's event log)")
        print(table(["rows", "code", "step", "s"], steps))
    if report["side_by_side"]:
        print("\nold / new (the same run's medians)")
        print(
            table(
                ["rows", "new", "run", "run-s speed-up", "process-s speed-up"],
                [
                    [fmt_count(r["rows"]), r["variant"], r["kind"], _cell(r["run_speedup"]),
                     _cell(r["process_speedup"])]
                    for r in report["side_by_side"]
                ],
            )
        )  # fmt: skip
    if report.get("query"):
        print('\nlakesync query "SELECT count(*) FROM todos" (fresh process, median s)')
        print(
            table(
                ["code", "median s", "ok"],
                [[n, _cell(q["median_s"]), f"{q['succeeded']}/{len(q['runs'])}"]
                 for n, q in report["query"].items()],
            )
        )  # fmt: skip
    if report["targets"]:
        print("\ntargets (issue 27)")
        print(
            table(
                ["target", "figure", "measured", "limit", "met"],
                [[t["target"], t["metric"], _cell(t["measured"]), f"{t['limit']} {t['unit']}",
                  {True: "yes", False: "NO", None: "not measured"}[t["met"]]]
                 for t in report["targets"]],
            )
        )  # fmt: skip
    errors = [
        (fmt_count(size["rows"]), name, kind, e)
        for size in report["sizes"]
        for name, v in size.get("variants", {}).items()
        for kind in KINDS
        for e in v[kind]["errors"]
    ]
    errors += [("query", n, "", e) for n, q in report.get("query", {}).items() for e in q["errors"]]
    if errors:
        print("\nfailures")
        for rows_, name, kind, e in errors:
            print(f"  {rows_} {name} {kind}: {e}")
    per_size = ", ".join(f"{fmt_count(s['rows'])} {s['elapsed_s']:.0f} s" for s in report["sizes"])
    print(f"\nelapsed {report['elapsed_s']:.0f} s; per size: {per_size}")


def _figure(
    size: dict[str, Any], variant: str, metric: str, kind: str | None = None
) -> float | None:
    """A size's median ``metric`` of ``variant``'s ``kind`` runs (either kind if ``None``)."""
    found = size.get("variants", {}).get(variant, {})
    values = [found.get(k, {}).get(metric) for k in ([kind] if kind else KINDS)]
    return next((v for v in values if v), None)


def _cell(v: float | None) -> str:
    return "-" if v is None else cell(v)


def plot(report: dict[str, Any], out: Path) -> Path:
    """Run seconds against lake rows (log-log), old and new, no-op and 200 updates: the
    Dagster run's own seconds (left) and the run process's (right); the targets dotted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import ticker

    fig, axes = plt.subplots(1, 2, figsize=(13, 5.5), sharey=True)
    names = list(report.get("variants", {}))
    colours = {name: f"C{i}" for i, name in enumerate(names)}
    for ax, metric, title in (
        (axes[0], "run_s", "Dagster run (start → end, the run's own seconds)"),
        (axes[1], "process_s", "run process (launch → exit, wall clock)"),
    ):
        for name in names:
            for kind, style, label in (("noop", "--", "no-op"), ("update", "-", "200 updates")):
                pts = [
                    (s["rows"], s["variants"][name][kind][metric])
                    for s in report["sizes"]
                    if _figure(s, name, metric, kind)
                ]
                if pts:
                    xs, ys = zip(*pts, strict=True)
                    ax.plot(xs, ys, style, marker="o", color=colours[name], label=f"{name} {label}")
                    for x, y in pts:
                        ax.annotate(f"{y:.1f}", (x, y), textcoords="offset points",
                                    xytext=(4, 4), fontsize=7)  # fmt: skip
        for limit, label in ((3.0, "target: no-op 3 s"), (5.0, "target: 200 updates 5 s")):
            ax.axhline(limit, color="grey", linestyle=":", linewidth=1)
            ax.annotate(label, (0.01, limit), xycoords=("axes fraction", "data"),
                        fontsize=7, va="bottom", color="grey")  # fmt: skip
        failed = [n for n in names if not any(_figure(s, n, metric) for s in report["sizes"])]
        if failed:
            note = f"no successful run: {', '.join(failed)}"
            ax.annotate(note, (0.99, 0.02), xycoords="axes fraction", ha="right", fontsize=8,
                        color="tab:red")  # fmt: skip
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.set_xlabel("lake rows")
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7, loc="upper left")
    axes[0].set_ylabel("seconds (median)")
    old = report.get("variants", {}).get("old", {})
    fig.suptitle(
        f"sync_{GW} cost curve — old {str(old.get('commit', old.get('tree', '')))[:10]} vs new "
        f"(Spark Connect server); {report['protocol']['rounds']} rounds, "
        f"{time.strftime('%Y-%m-%d')}",
        fontsize=10,
    )
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


if __name__ == "__main__":
    main()
