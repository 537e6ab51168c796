"""Scale-out benchmark (docs/deploy.md): the figures of moving from one machine to a cluster.

Sections (``--sections``, default all):

* ``balancer`` — push throughput and pull latency through HAProxy (``deploy/haproxy.cfg``)
  with one and with three gateway processes on one PostgreSQL WAL: ``--clients`` forked
  pushers of ``--batch`` new-row deltas for ``--push-seconds``, then ``--pulls`` pulls of
  1 000-delta pages (TypeScript format) at random cursors; the gateways' CPU per delta.
* ``pipeline`` — ``lakesync run sync`` on the same WAL (``--deltas`` new rows) in three set-ups:
  local mode with the embedded catalog and a file warehouse; local mode with the PostgreSQL
  catalog and a bucket (moto's S3 server); and a Spark standalone master with two workers
  (one core, 1 GB each) with that catalog and bucket. Each run is a fresh lake; the times are
  the stages' own and the command's wall time (JVM start included).
* ``failover`` — writers pushing through the balancer to three gateways while one is killed
  (``kill -9``) ``--kills`` times and, separately, while each is restarted in turn (SIGTERM,
  draining): how long clients could not push (from the kill to each writer's next
  acknowledged push), the failed attempts, and the longest push.

The machine is shared: every section records the load average, and figures are the median
of ``--repeat`` rounds where a section repeats.

Usage (from the repository root):
    .venv/bin/python benchmarks/bench_scale_out.py --quick
    .venv/bin/python benchmarks/bench_scale_out.py
Results: tables on stdout and JSON in benchmarks/results/scale_out.json (``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.harness import snapshot

snapshot.activate(__name__ == "__main__" and "--no-snapshot" not in sys.argv)

import httpx  # noqa: E402

from benchmarks.harness.backends import PostgresBackend  # noqa: E402
from benchmarks.harness.corpus import GW, ORDERS, build_corpus, fill_chunks, push_body  # noqa: E402
from benchmarks.harness.cpu import process_cpu  # noqa: E402
from benchmarks.harness.fill import fill_service  # noqa: E402
from benchmarks.harness.load import (  # noqa: E402
    SECRET,
    gateway,
    max_cursor,
    register_schema,
    run_pulls,
    run_push,
    token,
    warm_up,
)
from benchmarks.harness.output import RESULTS, log, table, write_json  # noqa: E402
from benchmarks.harness.sampling import descendants  # noqa: E402
from lakesync_platform.testing import GatewayProcess, S3Server  # noqa: E402
from lakesync_platform.testing_cluster import LoadBalancer, SparkMaster, SparkWorker  # noqa: E402

ROOT = snapshot.ROOT
CONFIG = ROOT / "deploy" / "haproxy.cfg"
DRAIN = ["--drain-seconds", "1.5"]


def loadavg() -> float:
    """The 1-minute load average."""
    return float(Path("/proc/loadavg").read_text().split()[0])


@dataclass
class Endpoint:
    """The balancer as ``harness.load`` addresses a server: a port (and no process of its
    own to account CPU to; the gateways' CPU is taken apart)."""

    port: int
    proc: None = None


def tree_cpu(procs: list[GatewayProcess]) -> float:
    """CPU seconds the gateways' process trees have used so far."""
    return sum(process_cpu(p) for g in procs if g.proc for p in descendants(g.proc.pid))


def topology(
    stack: ExitStack, work: Path, wal_url: str, n: int, check: str = "500ms"
) -> tuple[list[GatewayProcess], LoadBalancer]:
    """``n`` gateways of the code under test on ``wal_url`` behind HAProxy, all up."""
    gateways = []
    for _ in range(n):
        g = gateway(wal_url, 1, work)
        g.extra_args = DRAIN
        gateways.append(stack.enter_context(g))
    lb = LoadBalancer(
        CONFIG,
        [f"127.0.0.1:{g.port}" for g in gateways],
        work / f"haproxy-{n}.log",
        check_interval=check,
        rise=1,
    )
    stack.enter_context(lb)
    lb.wait_for({f"gw{i + 1}": "UP" for i in range(n)})
    return gateways, lb


# ---------------------------------------------------------------------------- balancer


def section_balancer(args: argparse.Namespace, backend: PostgresBackend, work: Path) -> Any:
    per_client = int(args.push_seconds * 60_000 / args.clients) + args.batch
    corpus = build_corpus([per_client] * args.clients, 400, 2)
    rounds: dict[int, list[dict[str, Any]]] = {1: [], 3: []}
    for _ in range(args.repeat):
        for n in (1, 3):
            url = backend.fresh(f"lb{n}")
            with ExitStack() as stack:
                stack.callback(backend.drop, url)
                gateways, lb = topology(stack, work / f"lb{n}-{len(rounds[n])}", url, n)
                register_schema(gateways[0])
                warm_up(gateways[0], corpus.warm)
                cpu0 = tree_cpu(gateways)
                push = run_push(
                    Endpoint(lb.port), corpus, args.clients, args.batch, args.push_seconds
                )
                cpu = tree_cpu(gateways) - cpu0
                pulls = run_pulls(Endpoint(lb.port), args.pulls, False, max_cursor(gateways[0]))
                rounds[n].append(
                    {
                        "gateways": n,
                        "deltas_per_s": push["deltas_per_s"],
                        "push_p50_ms": push["push_p50_ms"],
                        "push_p99_ms": push["push_p99_ms"],
                        "gateway_cpu_us_per_delta": round(1e6 * cpu / max(push["deltas"], 1), 1),
                        "pull_p50_ms": pulls["p50_ms"],
                        "pull_p99_ms": pulls["p99_ms"],
                        "errors": push["errors"],
                        "loadavg": loadavg(),
                    }
                )
                log(f"balancer, {n} gateway(s): {rounds[n][-1]}")
    medians = {n: _median_row(r, "deltas_per_s") for n, r in rounds.items()}
    return {"rounds": rounds, "median": medians}


def jdbc_url(url: str) -> str:
    """The JDBC URL of a PostgreSQL SQLAlchemy URL, its user as a parameter."""
    from sqlalchemy.engine import make_url

    u = make_url(url)
    return f"jdbc:postgresql://{u.host}:{u.port or 5432}/{u.database}?user={u.username}"


def _median_row(rows: list[dict[str, Any]], key: str) -> dict[str, Any]:
    return sorted(rows, key=lambda r: r[key])[len(rows) // 2]


# ---------------------------------------------------------------------------- pipeline


def _declare(defs: Path) -> None:
    columns = "".join(
        f"      - {{name: {c['name']}, type: {c['type']}}}\n" for c in ORDERS["columns"]
    )
    defs.mkdir(parents=True)
    (defs / "orders.yaml").write_text(
        f"gateway: {GW}\ntables:\n  - table: {ORDERS['table']}\n    columns:\n{columns}"
        "destinations:\n"
        '  - {name: out, kind: sqlite, url: "sqlite:///${LAKESYNC_DATA_DIR}/out.db"}\n'
    )


def run_sync(env: dict[str, str], cwd: Path) -> dict[str, Any]:
    """``lakesync run sync --json``: the stages' seconds and the wall time."""
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "lakesync_platform.cli", "run", "sync", "--gw", GW, "--json"],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise RuntimeError(f"lakesync run sync failed:\n{proc.stderr[-3000:]}")
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    stages: dict[str, float] = {}
    for r in doc["results"]:
        stages[r["kind"]] = round(stages.get(r["kind"], 0.0) + r["seconds"], 2)
    return {
        "wall_s": round(wall, 1),
        **{f"{k}_s": v for k, v in stages.items()},
        "entries": doc["results"][0].get("entries"),
        "loadavg": loadavg(),
    }


def section_pipeline(args: argparse.Namespace, backend: PostgresBackend, work: Path) -> Any:
    url = backend.fresh("pipe")
    results: dict[str, list[dict[str, Any]]] = {
        "local": [],
        "local, S3 + PG catalog": [],
        "cluster": [],
    }
    with ExitStack() as stack:
        stack.callback(backend.drop, url)
        log(f"filling the WAL with {args.deltas} deltas")
        fill_service(url, fill_chunks(args.deltas, 2))
        defs = work / "defs"
        _declare(defs)
        s3 = stack.enter_context(S3Server())
        master = stack.enter_context(SparkMaster(work / "master"))
        for i in range(2):
            stack.enter_context(SparkWorker(master, work / f"worker{i}", memory="1g"))
        base = {k: v for k, v in os.environ.items() if not k.startswith(("LAKESYNC_", "AWS_"))}
        base |= {
            "PYTHONPATH": str(snapshot.code_dir()),
            "LAKESYNC_DEFS_DIR": str(defs),
            "LAKESYNC_WAL_URL": url,
            "LAKESYNC_JAR_DIR": str(ROOT / "data" / "jars"),
        }
        for r in range(args.repeat):
            for i, setup in enumerate(results):
                data = work / f"data-{r}-{i}"
                data.mkdir()
                env = base | {"LAKESYNC_DATA_DIR": str(data)}
                if setup != "local":
                    catalog = backend.fresh(f"cat{r}")
                    stack.callback(backend.drop, catalog)
                    bucket = f"lake-{r}-{i}"
                    s3.create_bucket(bucket)
                    env |= s3.env | {
                        "LAKESYNC_CATALOG_URI": jdbc_url(catalog),
                        "LAKESYNC_WAREHOUSE": f"s3://{bucket}/warehouse",
                    }
                if setup == "cluster":
                    env |= {
                        "LAKESYNC_SPARK_MASTER": master.url,
                        "LAKESYNC_SPARK_DRIVER_HOST": "127.0.0.1",
                    }
                results[setup].append(run_sync(env, data))
                log(f"pipeline, {setup}: {results[setup][-1]}")
    return {
        "deltas": args.deltas,
        "rounds": results,
        "median": {k: _median_row(v, "wall_s") for k, v in results.items()},
    }


# ---------------------------------------------------------------------------- failover


class Pusher(threading.Thread):
    """Pushes small batches through the balancer back to back, each until acknowledged;
    records every attempt as ``(started, ended, acknowledged)``."""

    def __init__(self, url: str, slot: int, deltas: list[bytes], stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.client = f"bench-client-{slot}"
        self.deltas, self.stop = deltas, stop
        self.attempts: list[tuple[float, float, bool]] = []
        self.http = httpx.Client(
            base_url=url,
            timeout=httpx.Timeout(30.0, connect=5.0),
            headers={
                "Authorization": f"Bearer {token(self.client)}",
                "Content-Type": "application/json",
            },
        )

    def run(self) -> None:
        for i in range(0, len(self.deltas), 10):
            if self.stop.is_set():
                break
            body = push_body(self.client, self.deltas[i : i + 10])
            while True:
                t0 = time.monotonic()
                try:
                    ok = self.http.post(f"/v1/sync/{GW}/push", content=body).status_code == 200
                except httpx.TransportError:
                    ok = False
                self.attempts.append((t0, time.monotonic(), ok))
                if ok:
                    break
                time.sleep(0.02)
        self.http.close()


def _disrupted(pushers: list[Pusher], at: float) -> dict[str, Any]:
    """For a disruption at ``at``: until when no writer's push was acknowledged, per writer."""
    waits = []
    for p in pushers:
        after = [end for start, end, ok in p.attempts if ok and end > at]
        if after:
            waits.append(after[0] - at)
    return {"max_wait_s": round(max(waits), 3), "median_wait_s": round(statistics.median(waits), 3)}


def section_failover(args: argparse.Namespace, backend: PostgresBackend, work: Path) -> Any:
    corpus = build_corpus([60_000] * 4, 400, 2)
    out: dict[str, Any] = {}
    for kind in ("kill -9", "rolling restart"):
        url = backend.fresh("fo")
        with ExitStack() as stack:
            stack.callback(backend.drop, url)
            gateways, lb = topology(stack, work / f"fo-{kind[:4]}", url, 3)
            register_schema(gateways[0])
            stop = threading.Event()
            pushers = [Pusher(lb.url, i, corpus.slots[i], stop) for i in range(4)]
            for p in pushers:
                p.start()
            events = []
            time.sleep(2)
            for k in range(args.kills if kind == "kill -9" else 3):
                g = gateways[k % 3]
                events.append(time.monotonic())
                if kind == "kill -9":
                    g.kill()
                    lb.wait_for({f"gw{k % 3 + 1}": "DOWN"})
                else:
                    g.stop(timeout=30)
                g.start(timeout=120)
                lb.wait_for({f"gw{k % 3 + 1}": "UP"})
                time.sleep(2)
            stop.set()
            for p in pushers:
                p.join(60)
            attempts = [a for p in pushers for a in p.attempts]
            out[kind] = {
                "events": [_disrupted(pushers, at) for at in events],
                "pushes": sum(ok for *_, ok in attempts),
                "failed_attempts": sum(not ok for *_, ok in attempts),
                "longest_push_s": round(max(e - s for s, e, _ in attempts), 3),
                "loadavg": loadavg(),
            }
            log(f"failover, {kind}: {out[kind]}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sections", default="balancer,pipeline,failover")
    ap.add_argument("--quick", action="store_true", help="small sizes, one round")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--batch", type=int, default=200)
    ap.add_argument("--push-seconds", type=float, default=10.0)
    ap.add_argument("--pulls", type=int, default=200)
    ap.add_argument("--deltas", type=int, default=200_000)
    ap.add_argument("--kills", type=int, default=3)
    ap.add_argument("--pg", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    ap.add_argument("--out", type=Path, default=RESULTS / "scale_out.json")
    ap.add_argument("--no-snapshot", action="store_true", help="measure the live tree")
    args = ap.parse_args()
    if args.quick:
        args.repeat, args.push_seconds, args.pulls, args.deltas = 1, 5.0, 100, 20_000
    backend = PostgresBackend(args.pg)
    result: dict[str, Any] = {
        "benchmark": "scale_out",
        "git": snapshot.git_info(),
        "args": {k: str(v) for k, v in vars(args).items()},
        "loadavg_before": loadavg(),
        "secret": SECRET[:4] + "…",
    }
    sections = {
        "balancer": section_balancer,
        "pipeline": section_pipeline,
        "failover": section_failover,
    }
    with tempfile.TemporaryDirectory(prefix="lakesync-scale-out-") as tmp:
        for name in args.sections.split(","):
            work = Path(tmp) / name
            work.mkdir()
            result[name] = sections[name](args, backend, work)
    result["loadavg_after"] = loadavg()
    out = write_json(args.out, result)
    if "balancer" in result:
        rows = [
            [
                n,
                m["deltas_per_s"],
                m["push_p50_ms"],
                m["push_p99_ms"],
                m["gateway_cpu_us_per_delta"],
                m["pull_p50_ms"],
                m["pull_p99_ms"],
                m["loadavg"],
            ]
            for n, m in result["balancer"]["median"].items()
        ]
        print(
            table(
                [
                    "gateways",
                    "push deltas/s",
                    "push p50 ms",
                    "p99",
                    "CPU µs/delta",
                    "pull p50 ms",
                    "p99",
                    "load",
                ],
                rows,
            )
        )
    if "pipeline" in result:
        rows = [
            [
                k,
                m["wall_s"],
                m.get("flush_s"),
                m.get("state_s"),
                m.get("materialise_s"),
                m["loadavg"],
            ]
            for k, m in result["pipeline"]["median"].items()
        ]
        print(table(["sync job", "wall s", "flush s", "state s", "materialise s", "load"], rows))
    for kind, f in result.get("failover", {}).items():
        print(
            f"{kind}: clients waited {[e['max_wait_s'] for e in f['events']]} s at most "
            f"(medians {[e['median_wait_s'] for e in f['events']]}); "
            f"{f['failed_attempts']} failed attempts of {f['pushes']} pushes; "
            f"longest push {f['longest_push_s']} s; load {f['loadavg']}"
        )
    print(f"results: {out}")


if __name__ == "__main__":
    main()
