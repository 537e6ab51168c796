"""Soak: the scaled-out topology under steady mixed load for a long time — does it hold?

Topology (as docs/deploy.md and docker-compose.yml, on one machine): a fresh PostgreSQL WAL,
``--gateways`` gateway processes behind HAProxy (``deploy/haproxy.cfg``), and the pipeline run
by ``lakesync run`` every ``--pipeline-every`` seconds on a data directory of its own (local
Spark, the embedded catalog and warehouse). Load, all through the balancer:

* ``--writers`` clients pushing ``--push-rate`` batches a second each (new rows, then updates
  of their rows and some deletes; a batch is pushed again until acknowledged);
* ``--readers`` clients pulling pages from their cursor ``--pull-rate`` times a second;
* ``--sockets`` Python clients' WebSocket transports (``WebSocketTransport``) receiving the
  broadcasts.

Every ``--sample-every`` seconds it samples each long-lived process's resident memory and
open file descriptors (process trees: gateways, HAProxy, this load generator), the WAL's size
on disk, the lake's, and the push and pull latency percentiles of the window. At the end it
stops the load, runs the pipeline once more and checks that nothing acknowledged was lost:
every pushed delta id is in the WAL, the lake's change log holds every WAL entry once, and the
destination holds the WAL's live rows. It reports the slopes of RSS and descriptors after
warm-up (``--warmup`` seconds), writes ``benchmarks/results/soak.json`` and a plot
(``soak.png``).

The pipeline stages run each period are :data:`PIPELINE` — one ``lakesync run`` command line
each; add a stage (upkeep, tiering) with one line there.

Usage (from the repository root):
    .venv/bin/python benchmarks/soak.py --seconds 60 --warmup 20     # smoke, about 2 minutes
    .venv/bin/python benchmarks/soak.py --seconds 1800               # the published figures
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.harness import snapshot

snapshot.activate(__name__ == "__main__" and "--no-snapshot" not in sys.argv)

from benchmarks.harness.backends import PostgresBackend  # noqa: E402
from benchmarks.harness.output import RESULTS, log, table, write_json  # noqa: E402
from benchmarks.harness.sampling import (  # noqa: E402
    folder_bytes,
    latency_window,
    plot,
    postgres_tables_bytes,
    sample_tree,
    slope_per_hour,
)
from benchmarks.harness.soak_load import Reader, Timings, Writer, paced  # noqa: E402
from lakesync_platform.client import WebSocketTransport  # noqa: E402
from lakesync_platform.testing import GatewayProcess, dev_token  # noqa: E402
from lakesync_platform.testing_cluster import LoadBalancer  # noqa: E402

ROOT = snapshot.ROOT
GW = "soak"
SECRET = "soak-secret-not-for-production"
PIPELINE: list[list[str]] = [
    ["sync"],  # flush → state → materialise
    ["lifecycle"],  # trim the hot WAL of what the lake holds (then destination tiering)
    ["compact"],  # lake upkeep: compaction, snapshot expiry, orphan removal
    ["checkpoint"],  # an initial-sync checkpoint of the state
]
"""The ``lakesync run`` command lines run each pipeline period, in order."""
LOAD_GENERATOR = "load generator"
PIPELINE_RUN = "pipeline run"
DEFS = f"""\
gateway: {GW}
tables:
  - table: items
    columns:
      - {{name: title, type: string}}
      - {{name: n, type: number}}
      - {{name: done, type: boolean}}
destinations:
  - {{name: out, kind: sqlite, url: "sqlite:///${{LAKESYNC_DATA_DIR}}/out.db"}}
"""


# ---------------------------------------------------------------------------- the run


@dataclass
class Soak:
    """One soak: its settings, the topology's processes and what was measured."""

    args: argparse.Namespace
    work: Path
    wal_url: str
    gateways: list[GatewayProcess] = field(default_factory=list)
    balancer: LoadBalancer | None = None
    pipeline_runs: list[dict[str, Any]] = field(default_factory=list)
    pipeline_pid: int | None = None
    samples: list[dict[str, Any]] = field(default_factory=list)
    push: Timings = field(default_factory=Timings)
    pull: Timings = field(default_factory=Timings)
    t0: float = 0.0

    @property
    def data_dir(self) -> Path:
        return self.work / "pipeline"

    def env(self) -> dict[str, str]:
        """The environment of the processes started: the code under test first on the path."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESYNC_")}
        path = os.environ.get("PYTHONPATH")
        env["PYTHONPATH"] = os.pathsep.join([str(snapshot.code_dir()), *([path] if path else [])])
        env["LAKESYNC_JAR_DIR"] = str(ROOT / "data" / "jars")
        # Retention short enough to show within the run (the defaults keep a day, 30 days).
        env["LAKESYNC_WAL_RETENTION_SECONDS"] = str(self.args.wal_retention)
        env["LAKESYNC_DEDUP_RETENTION_SECONDS"] = str(self.args.dedup_retention)
        return env

    def start(self, stack: ExitStack) -> None:
        code = snapshot.code_dir()
        for i in range(self.args.gateways):
            gateway = GatewayProcess(
                self.work / f"gateway{i}",
                SECRET,
                wal_url=self.wal_url,
                env={"PYTHONPATH": str(code)},
                cwd=code,
                extra_args=["--drain-seconds", "1"],
            )
            self.gateways.append(stack.enter_context(gateway))
        self.balancer = stack.enter_context(
            LoadBalancer(
                ROOT / "deploy" / "haproxy.cfg",
                [f"127.0.0.1:{g.port}" for g in self.gateways],
                self.work / "haproxy.log",
                check_interval="500ms",
            )
        )
        self.data_dir.mkdir()
        (self.work / "defs").mkdir()
        (self.work / "defs" / "soak.yaml").write_text(DEFS)

    # ------------------------------------------------------------------ the pipeline

    def run_stage(self, argv: list[str]) -> dict[str, Any]:
        """``lakesync run ARGV --gw soak --json`` on the WAL; its document and time."""
        command = [sys.executable, "-m", "lakesync_platform.cli", "run", *argv, "--gw", GW]
        command += ["--json", "--data-dir", str(self.data_dir), "--defs", str(self.work / "defs")]
        command += ["--wal-url", self.wal_url]
        started = time.monotonic()
        proc = subprocess.Popen(
            command,
            env=self.env(),
            cwd=self.work,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.pipeline_pid = proc.pid
        out, err = proc.communicate(timeout=900)
        self.pipeline_pid = None
        doc: dict[str, Any] = {"ok": False, "error": err[-2000:]}
        if out.strip():
            doc = json.loads(out.strip().splitlines()[-1])
        return {
            "stage": " ".join(argv),
            "at_s": round(started - self.t0, 1),
            "seconds": round(time.monotonic() - started, 2),
            "ok": proc.returncode == 0 and doc.get("ok", False),
            "entries": sum(r.get("entries", 0) for r in doc.get("results", [])),
            "error": doc.get("error"),
        }

    def pipeline_loop(self, stop: threading.Event) -> None:
        while not stop.is_set():
            started = time.monotonic()
            for argv in PIPELINE:
                run = self.run_stage(argv)
                self.pipeline_runs.append(run)
                outcome = "ok" if run["ok"] else "FAILED"
                log(f"pipeline {run['stage']}: {outcome} in {run['seconds']} s")
            stop.wait(max(0.0, self.args.pipeline_every - (time.monotonic() - started)))

    # ------------------------------------------------------------------ sampling

    def sample(self, own: dict[str, int | None]) -> dict[str, Any]:
        processes = {}
        for name, pid in {**own, PIPELINE_RUN: self.pipeline_pid}.items():
            # This process's children are the pipeline runs, sampled on their own.
            tree = sample_tree(pid, children=name != LOAD_GENERATOR)
            if tree is not None:
                processes[name] = {"rss_mb": tree.rss_mb, "fds": tree.fds, "n": tree.processes}
        return {
            "t": round(time.monotonic() - self.t0, 1),
            "processes": processes,
            "wal_mb": round(postgres_tables_bytes(self.wal_url) / 2**20, 2),
            "lake_mb": round(folder_bytes(self.data_dir / "warehouse") / 2**20, 2),
            "push": latency_window(self.push.take()),
            "pull": latency_window(self.pull.take()),
            "loadavg": float(Path("/proc/loadavg").read_text().split()[0]),
        }

    def sampler(self, stop: threading.Event) -> None:
        assert self.balancer is not None and self.balancer.proc is not None
        own: dict[str, int | None] = {
            f"gateway {i + 1}": g.proc.pid if g.proc else None for i, g in enumerate(self.gateways)
        }
        own["haproxy"] = self.balancer.proc.pid
        own[LOAD_GENERATOR] = os.getpid()
        while not stop.wait(self.args.sample_every):
            s = self.sample(own)
            self.samples.append(s)
            log(
                f"t={s['t']:.0f}s push p50 {s['push']['p50']} ms ({s['push']['n']}), "
                f"pull p50 {s['pull']['p50']} ms, WAL {s['wal_mb']} MB, "
                + ", ".join(
                    f"{n} {p['rss_mb']} MB/{p['fds']} fds" for n, p in s["processes"].items()
                )
            )

    # ------------------------------------------------------------------ the whole run

    def run(self) -> dict[str, Any]:
        args = self.args
        assert self.balancer is not None
        url = self.balancer.url
        writers = [
            Writer(url, GW, SECRET, f"writer{i}", args.batch, self.push)
            for i in range(args.writers)
        ]
        readers = [Reader(url, GW, SECRET, f"reader{i}", self.pull) for i in range(args.readers)]
        received = [0] * args.sockets

        def on_broadcast(i: int) -> Callable[[list[Any], int], None]:
            def count(rows: list[Any], _hlc: int) -> None:
                received[i] += len(rows)

            return count

        sockets = []
        for i in range(args.sockets):
            transport = WebSocketTransport(url, GW, token=dev_token(f"socket{i}", GW, SECRET))
            transport.on_broadcast(on_broadcast(i))
            sockets.append(transport)
        stop, pipeline_stop, sampler_stop = threading.Event(), threading.Event(), threading.Event()
        self.t0 = time.monotonic()
        threads = [
            threading.Thread(target=paced, args=(args.push_rate, stop, w.push)) for w in writers
        ]
        threads += [
            threading.Thread(target=paced, args=(args.pull_rate, stop, r.pull)) for r in readers
        ]
        side = [
            threading.Thread(target=self.pipeline_loop, args=(pipeline_stop,)),
            threading.Thread(target=self.sampler, args=(sampler_stop,)),
        ]
        for th in [*threads, *side]:
            th.start()
        try:
            stop.wait(args.seconds)
        finally:
            stop.set()
            for th in threads:
                th.join(60)
            sampler_stop.set()  # the series cover the load; the pipeline run in hand finishes
            side[1].join(60)
            pipeline_stop.set()
            side[0].join(900)
            for t in sockets:
                t.close()
            for c in [*writers, *readers]:
                c.close()
        log("load stopped; the last pipeline run, then the checks")
        final = self.run_stage(["sync"])
        pushed = sum(w.pushed for w in writers)
        return {"final_run": final, "checks": self.check(pushed), "broadcast_rows": received}

    def check(self, pushed: int) -> dict[str, Any]:
        """Nothing acknowledged lost: in the log, in the lake once, in the destination.

        Every delta the writers push wins (a fresh HLC on their own rows), so each one is one
        log entry and the log's head cursor must equal the deltas acknowledged; the lake's
        change log must hold every cursor up to it once — the hot WAL keeps only what its
        retention leaves (``wal_entries``, ``wal_delta_ids``: reported)."""
        import sqlite3

        import psycopg
        from pyiceberg.catalog.sql import SqlCatalog

        from benchmarks.harness.backends import libpq_url

        with psycopg.connect(libpq_url(self.wal_url)) as conn:
            ids = conn.execute(
                "SELECT count(*) FROM wal_delta_ids WHERE gateway_id = %s", (GW,)
            ).fetchone()
            entries = conn.execute(
                "SELECT (SELECT count(*) FROM wal_entries WHERE gateway_id = %(gw)s), "
                "last_cursor FROM wal_gateways WHERE gateway_id = %(gw)s",
                {"gw": GW},
            ).fetchone()
            live = conn.execute(
                "SELECT count(*) FROM wal_rows WHERE gateway_id = %s AND live = 1", (GW,)
            ).fetchone()
        catalog = SqlCatalog(
            "lakesync",
            uri=f"sqlite:///{self.data_dir / 'catalog.db'}",
            warehouse=(self.data_dir / "warehouse").as_uri(),
        )
        cursors = (
            catalog.load_table((GW, "lakesync_deltas"))
            .scan(selected_fields=("cursor",))
            .to_arrow()["cursor"]
            .to_pylist()
        )
        catalog.engine.dispose()
        with sqlite3.connect(self.data_dir / "out.db") as out:
            # Rows deleted after they were first materialised stay, soft-deleted.
            destination = out.execute(
                "SELECT count(*) FROM items WHERE deleted_at IS NULL"
            ).fetchone()[0]
        assert ids and entries and live
        result = {
            "acknowledged_deltas": pushed,
            "wal_delta_ids_kept": ids[0],
            "wal_entries_kept": entries[0],
            "wal_head": entries[1],
            "lake_log_rows": len(cursors),
            "lake_log_distinct_cursors": len(set(cursors)),
            "wal_live_rows": live[0],
            "destination_live_rows": destination,
        }
        result["nothing_lost"] = (
            pushed == entries[1] == len(cursors) == len(set(cursors))
            and result["destination_live_rows"] == result["wal_live_rows"]
        )
        return result


def summarise(samples: list[dict[str, Any]], warmup_s: float) -> dict[str, Any]:
    """Per component: RSS and descriptor slopes after warm-up; latency early vs late."""
    after = [s for s in samples if s["t"] >= warmup_s]
    components = sorted({c for s in after for c in s["processes"]} - {PIPELINE_RUN})
    window_h = (after[-1]["t"] - after[0]["t"]) / 3600 if len(after) > 1 else 0.0
    out: dict[str, Any] = {"window_s": round(window_h * 3600, 1), "components": {}}
    for comp in components:
        pts = [(s["t"], s["processes"][comp]) for s in after if comp in s["processes"]]
        rss = [p["rss_mb"] for _, p in pts]
        out["components"][comp] = {
            "rss_mb_first": rss[0] if rss else None,
            "rss_mb_last": rss[-1] if rss else None,
            "rss_mb_max": max(rss) if rss else None,
            "rss_mb_per_hour": _round(
                rss_slope := slope_per_hour((t, p["rss_mb"]) for t, p in pts)
            ),
            "rss_growth_mb_in_window": _round(
                rss_slope * window_h if rss_slope is not None else None
            ),
            "fds_first": pts[0][1]["fds"] if pts else None,
            "fds_last": pts[-1][1]["fds"] if pts else None,
            "fds_per_hour": _round(slope_per_hour((t, p["fds"]) for t, p in pts)),
        }
    out["wal_mb_per_hour"] = _round(slope_per_hour((s["t"], s["wal_mb"]) for s in after))
    third = max(1, len(after) // 3)
    for kind in ("push", "pull"):
        early, late = after[:third], after[-third:]
        out[kind] = {
            "p50_early_ms": _median(s[kind]["p50"] for s in early if s[kind]["n"]),
            "p50_late_ms": _median(s[kind]["p50"] for s in late if s[kind]["n"]),
            "p99_early_ms": _median(s[kind]["p99"] for s in early if s[kind]["n"]),
            "p99_late_ms": _median(s[kind]["p99"] for s in late if s[kind]["n"]),
        }
    return out


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


def _median(values: Any) -> float | None:
    vals = sorted(values)
    return vals[len(vals) // 2] if vals else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=1800.0, help="load duration (default 30 min)")
    ap.add_argument("--warmup", type=float, default=300.0, help="seconds before slopes are taken")
    ap.add_argument("--sample-every", type=float, default=10.0)
    ap.add_argument("--gateways", type=int, default=2)
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=5, help="deltas per push")
    ap.add_argument("--push-rate", type=float, default=10.0, help="pushes per second per writer")
    ap.add_argument("--readers", type=int, default=2)
    ap.add_argument("--pull-rate", type=float, default=5.0, help="pulls per second per reader")
    ap.add_argument("--sockets", type=int, default=8)
    ap.add_argument("--pipeline-every", type=float, default=60.0, help="seconds per period")
    ap.add_argument(
        "--wal-retention", type=float, default=120.0, help="seconds the hot WAL keeps entries"
    )
    ap.add_argument(
        "--dedup-retention", type=float, default=600.0, help="seconds delta ids are remembered"
    )
    ap.add_argument("--pg", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    ap.add_argument("--out", type=Path, default=RESULTS / "soak.json")
    ap.add_argument("--no-snapshot", action="store_true", help="measure the live tree")
    args = ap.parse_args()
    warmup = min(args.warmup, args.seconds / 3)

    import tempfile

    backend = PostgresBackend(args.pg)
    load_before = Path("/proc/loadavg").read_text().split()[:3]
    with tempfile.TemporaryDirectory(prefix="lakesync-soak-") as tmp, ExitStack() as stack:
        wal_url = backend.fresh("soak")
        stack.callback(backend.drop, wal_url)
        soak = Soak(args, Path(tmp), wal_url)
        soak.start(stack)
        log(f"{args.gateways} gateways behind HAProxy on {wal_url}; load for {args.seconds:.0f} s")
        outcome = soak.run()
        summary = summarise(soak.samples, warmup)
        result = {
            "benchmark": "soak",
            "git": snapshot.git_info(),
            "args": {k: str(v) for k, v in vars(args).items()},
            "warmup_s": warmup,
            "loadavg_before": load_before,
            "loadavg_after": Path("/proc/loadavg").read_text().split()[:3],
            "pushes": soak.push.total,
            "push_failures": soak.push.failures,
            "pulls": soak.pull.total,
            "pull_failures": soak.pull.failures,
            "pipeline_runs": soak.pipeline_runs,
            **outcome,
            "summary": summary,
            "samples": soak.samples,
        }
        out = write_json(args.out, result)
        png = plot(
            soak.samples,
            warmup,
            out.with_suffix(".png"),
            f"soak: {args.seconds / 60:.0f} min, {args.gateways} gateways, {args.writers}x"
            f"{args.push_rate:g} pushes/s of {args.batch}, {args.readers}x{args.pull_rate:g} "
            f"pulls/s, {args.sockets} sockets; load avg {result['loadavg_before'][0]}"
            f"→{result['loadavg_after'][0]}",
            spans=[(r["at_s"], r["at_s"] + r["seconds"]) for r in soak.pipeline_runs],
            transient=PIPELINE_RUN,
        )
    rows = [
        [
            name,
            c["rss_mb_first"],
            c["rss_mb_last"],
            c["rss_mb_per_hour"],
            c["fds_first"],
            c["fds_last"],
            c["fds_per_hour"],
        ]
        for name, c in summary["components"].items()
    ]
    print(
        table(["process", "RSS MB (warm)", "RSS MB (end)", "MB/h", "fds", "fds end", "fds/h"], rows)
    )
    for kind in ("push", "pull"):
        k = summary[kind]
        print(f"{kind}: p50 {k['p50_early_ms']} → {k['p50_late_ms']} ms, ", end="")
        print(f"p99 {k['p99_early_ms']} → {k['p99_late_ms']} ms (early → late after warm-up)")
    print(f"WAL growth after warm-up: {summary['wal_mb_per_hour']} MB/h")
    runs = soak.pipeline_runs
    print(f"pipeline: {sum(r['ok'] for r in runs)}/{len(runs)} runs ok")
    print(f"checks: {json.dumps(outcome['checks'])}")
    print(f"broadcast rows received per socket: {outcome['broadcast_rows']}")
    print(f"pushes {soak.push.total} ({soak.push.failures} failed attempts), ", end="")
    print(f"pulls {soak.pull.total} ({soak.pull.failures} failed)")
    print(f"results: {out}  plot: {png}")


if __name__ == "__main__":
    main()
