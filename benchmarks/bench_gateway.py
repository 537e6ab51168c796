"""Gateway benchmark: durable push throughput and pull latency, over HTTP, against a real
``lakesync gateway`` (uvicorn) subprocess on 127.0.0.1.

Sections
  1. push   — durable push throughput (deltas/s), SQLite and Postgres WAL, 1/4/16 concurrent
              clients, batches of 100 and 500 new-row deltas (4 columns), ``--workers`` 1 and 2.
              Every configuration gets a fresh WAL (new SQLite file / new Postgres database).
  2. pull   — pull latency p50/p99 of 1 000-delta pages (``limit=1000``; TS format and
              ``format=stamped``) at random cursors, one sequential client.
  3. scale  — push throughput (4 clients x 500) and pull latency with 10k and with 1M deltas
              already in the WAL, and the slowdown between the two.  (Section 2's numbers are
              the pull measurements of this section.)

How the WAL is filled for section 3 (also printed and stored in the JSON): in-process, through
``SyncService(WriteAheadLog.open(url), clock).push`` with batches of 2 000 real deltas (content
ids from ``delta_id``), i.e. exactly the server's write path without HTTP, on both backends (the
same deltas; Postgres is ANALYZEd every 100k deltas, as autovacuum would).  ``--pg-fill copy``
instead bulk-copies the SQLite WAL into Postgres with COPY (faster, but the indexes are then
built from sorted keys, denser than after organic growth, so 1M numbers are optimistic).

Shared hosts: every row reports the CPU used by other processes ("other cpu"); section 3 keeps
the best of ``--repeat`` rounds per state (full: 2) and ``--wait-quiet S`` waits up to S seconds
before each measurement for the host to calm down.

Code under test: the product packages are copied at start (``--no-snapshot`` to run the live
tree), so a repository edited during the run still yields one coherent measurement; the commit,
a hash of the code and whether the live tree changed meanwhile are stored in the JSON.

Load generation: one forked process per client (http.client, keep-alive), request bodies are
pre-built before the timed window; generator, server and Postgres CPU are all reported (the
machine has 2 cores shared by all three).

Usage (from the repository root):
    .venv/bin/python benchmarks/bench_gateway.py --quick      # ~1 minute
    .venv/bin/python benchmarks/bench_gateway.py              # full run, ~8-9 minutes
    .venv/bin/python benchmarks/bench_gateway.py --profile    # + py-spy profiles (~1 min)
    .venv/bin/python benchmarks/bench_gateway.py --profile-only   # py-spy profiles only
Results: a table on stdout and JSON in benchmarks/results/gateway.json (``--out``).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import hashlib
import http.client
import json
import math
import multiprocessing as mp
import os
import platform
import random
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

ROOT = Path(__file__).resolve().parents[1]
_PACKAGES = ("lakesync_platform", "gateway", "assets", "sensors")


def _snapshot_code() -> Path | None:
    """Copy the product packages so one run measures one version of the code, even if the
    repository is edited meanwhile (servers and in-process fills import the copy).
    ``--no-snapshot`` runs the live tree instead."""
    if __name__ != "__main__" or "--no-snapshot" in sys.argv:
        return None  # imported as a module, or asked for the live tree
    snap = Path(tempfile.mkdtemp(prefix="lakesync-bench-code-"))
    for pkg in _PACKAGES:
        if (ROOT / pkg).is_dir():
            shutil.copytree(ROOT / pkg, snap / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    pid = os.getpid()
    # removed at exit of this process only (forked workers leave through os._exit)
    atexit.register(lambda: os.getpid() == pid and shutil.rmtree(snap, ignore_errors=True))
    return snap


CODE = _snapshot_code()
CODE_DIR = CODE or ROOT
sys.path.insert(0, str(CODE_DIR))

from lakesync_platform.core.auth import sign_token  # noqa: E402
from lakesync_platform.core.delta import ColumnDelta, RowDelta  # noqa: E402
from lakesync_platform.core.hlc import HLC  # noqa: E402
from lakesync_platform.core.ids import delta_id  # noqa: E402
from lakesync_platform.core.schema import parse_table_schema  # noqa: E402

SECRET = "bench-secret-not-for-production"
GW = "bench"
TABLE = "orders"
SCHEMA = {
    "table": TABLE,
    "columns": [
        {"name": "customer", "type": "string"},
        {"name": "amount", "type": "number"},
        {"name": "quantity", "type": "number"},
        {"name": "status", "type": "string"},
    ],
}
PG_DB_PREFIX = "lakesync_bench"
RUN_PREFIX = f"{PG_DB_PREFIX}_{os.getpid()}"
"""This run's databases: ``lakesync_bench_<pid>_<label>_<hex>`` (concurrent runs never touch
each other's databases; leftovers of dead runs are dropped)."""
RESULTS = ROOT / "benchmarks" / "results"

TARGET_SQLITE = 20_000
TARGET_PG = 10_000
TARGET_PULL_P50_MS = 10.0
TARGET_SLOWDOWN_PCT = 20.0

_enc = msgspec.json.Encoder()
_dec = msgspec.json.Decoder()


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_token(sub: str, role: str = "client") -> str:
    return sign_token(
        {"sub": sub, "gw": GW, "role": role}, SECRET, now_s=int(time.time()), ttl_s=6 * 3600
    )


def pct(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return float("nan")
    s = sorted(values)
    k = max(0, min(len(s) - 1, math.ceil(q / 100 * len(s)) - 1))
    return s[k]


# --------------------------------------------------------------------------- CPU accounting

_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[str, int, float] | None:
    """(comm, ppid, cpu seconds) of ``pid``."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            raw = fh.read()
    except OSError:
        return None
    comm = raw[raw.index("(") + 1 : raw.rindex(")")]
    f = raw[raw.rindex(")") + 2 :].split()
    return comm, int(f[1]), (int(f[11]) + int(f[12])) / _TICK


def _all_stats() -> dict[int, tuple[str, int, float]]:
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(int(name))
            if st is not None:
                out[int(name)] = st
    return out


def cpu_snapshot(server_pid: int | None) -> dict[str, float]:
    """CPU seconds used so far by the server process tree and by every postgres process."""
    stats = _all_stats()
    children: dict[int, list[int]] = {}
    for pid, (_, ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    server = 0.0
    if server_pid is not None:
        todo = [server_pid]
        while todo:
            pid = todo.pop()
            if pid in stats:
                server += stats[pid][2]
            todo.extend(children.get(pid, []))
    pg = sum(
        cpu
        for pid, (comm, _, cpu) in stats.items()
        if comm.startswith("postgres") and _is_bench_postgres(pid)
    )
    with open("/proc/stat") as fh:
        f = [int(x) for x in fh.readline().split()[1:9]]
    # user nice system idle iowait irq softirq steal
    busy = (f[0] + f[1] + f[2] + f[5] + f[6]) / _TICK  # all CPUs: time spent running code
    return {"server": server, "postgres": pg, "busy": busy, "steal": f[7] / _TICK}


_PG_AUX = ("walwriter", "checkpointer", "background writer", "wal writer")


def _is_bench_postgres(pid: int) -> bool:
    """A backend serving a benchmark database, or a WAL/checkpoint helper (shared, but driven
    by our commits); other sessions' backends on the same server are not counted."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            title = fh.read().decode(errors="replace")
    except OSError:
        return False
    return RUN_PREFIX + "_" in title or any(a in title for a in _PG_AUX)


def background_cores(seconds: float = 1.0) -> float:
    """Cores busy on the whole machine over ``seconds`` (nothing of ours running)."""
    c0 = cpu_snapshot(None)
    time.sleep(seconds)
    c1 = cpu_snapshot(None)
    return (c1["busy"] - c0["busy"]) / seconds


def wait_for_quiet(max_wait: float, threshold: float = 0.5) -> float:
    """Wait up to ``max_wait`` s for other processes to use < ``threshold`` cores; return the
    last background level seen."""
    deadline = time.monotonic() + max_wait
    level = background_cores(0.5)
    while level >= threshold and time.monotonic() < deadline:
        level = background_cores(1.0)
    return round(level, 2)


def cpu_delta(
    c0: dict[str, float], c1: dict[str, float], wall: float, generator_s: float = 0.0
) -> dict[str, float]:
    """Average cores used during ``wall`` seconds: server tree, postgres, generators, and
    everything else on the machine (other processes: the host is shared)."""
    server = max(0.0, c1["server"] - c0["server"]) / wall
    pg = max(0.0, c1["postgres"] - c0["postgres"]) / wall
    gen = generator_s / wall
    busy = (c1["busy"] - c0["busy"]) / wall
    return {
        "server_cpu_cores": round(server, 2),
        "postgres_cpu_cores": round(pg, 2),
        "generator_cpu_cores": round(gen, 2),
        "other_cpu_cores": round(max(0.0, busy - server - pg - gen), 2),
        "steal_cores": round((c1["steal"] - c0["steal"]) / wall, 2),
    }


# --------------------------------------------------------------------------- corpus

FIRST = [
    "Ada",
    "Grace",
    "Linus",
    "Margaret",
    "Ken",
    "Barbara",
    "Dennis",
    "Frances",
    "Edsger",
    "Radia",
    "Alan",
    "Katherine",
    "Guido",
    "Sophie",
    "Bjarne",
    "Hedy",
    "Tim",
    "Adele",
    "Donald",
    "Shafi",
    "Niklaus",
    "Leslie",
    "Anita",
    "John",
    "Mary",
    "Yukihiro",
]
LAST = [
    "Lovelace",
    "Hopper",
    "Torvalds",
    "Hamilton",
    "Thompson",
    "Liskov",
    "Ritchie",
    "Allen",
    "Dijkstra",
    "Perlman",
    "Turing",
    "Johnson",
    "van Rossum",
    "Wilson",
    "Stroustrup",
    "Lamarr",
    "Berners-Lee",
    "Goldberg",
    "Knuth",
    "Goldwasser",
    "Wirth",
    "Lamport",
    "Borg",
    "McCarthy",
    "Shaw",
    "Matsumoto",
]
STATUS = ["pending", "paid", "packed", "shipped", "delivered", "cancelled", "refunded"]


def _gen_deltas(task: tuple[str, int, int, bool]) -> tuple[str, list[Any]]:
    """``n`` new-row deltas of ``client_id``: real HLCs (wall clock) and real content ids.

    Returns pre-encoded wire JSON per delta (``as_objects=False``) or RowDelta objects.
    """
    client_id, n, seed, as_objects = task
    rnd = random.Random(seed)
    clock = HLC(wall_ms)
    out: list[Any] = []
    for _ in range(n):
        row_id = str(uuid.UUID(int=rnd.getrandbits(128), version=4))
        cols = (
            ColumnDelta("customer", f"{rnd.choice(FIRST)} {rnd.choice(LAST)}"),
            ColumnDelta("amount", round(rnd.uniform(1, 2500), 2)),
            ColumnDelta("quantity", rnd.randint(1, 50)),
            ColumnDelta("status", rnd.choice(STATUS)),
        )
        hlc = clock.now()
        did = delta_id(client_id, hlc, TABLE, row_id, cols)
        if as_objects:
            out.append(RowDelta("INSERT", TABLE, row_id, client_id, cols, hlc, did))
        else:
            out.append(
                _enc.encode(
                    {
                        "op": "INSERT",
                        "table": TABLE,
                        "rowId": row_id,
                        "clientId": client_id,
                        "columns": [{"column": c.column, "value": c.value} for c in cols],
                        "hlc": str(hlc),
                        "deltaId": did,
                    }
                )
            )
    return client_id, out


def push_body(client_id: str, encoded: Sequence[bytes]) -> bytes:
    return b'{"clientId":%s,"deltas":[%s]}' % (_enc.encode(client_id), b",".join(encoded))


@dataclass
class Corpus:
    """Pre-encoded deltas per load-generator slot (slot i = client ``bench-client-i``)."""

    slots: list[list[bytes]]
    warm: list[bytes]

    @staticmethod
    def client(slot: int) -> str:
        return f"bench-client-{slot}"


def build_corpus(sizes: list[int], warm: int, procs: int) -> Corpus:
    tasks = [(Corpus.client(i), n, 1000 + i, False) for i, n in enumerate(sizes)]
    tasks.append(("bench-warm", warm, 999, False))
    ctx = mp.get_context("fork")
    with ctx.Pool(procs) as pool:
        done = dict(pool.imap_unordered(_gen_deltas, tasks))
    return Corpus([done[Corpus.client(i)] for i in range(len(sizes))], done["bench-warm"])


# --------------------------------------------------------------------------- backends


class Backend:
    name = ""

    def fresh(self, label: str) -> str:  # returns a WAL URL
        raise NotImplementedError

    def drop(self, url: str) -> None:
        raise NotImplementedError

    def analyze(self, url: str) -> None:
        pass


class SqliteBackend(Backend):
    name = "sqlite"

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir

    def fresh(self, label: str) -> str:
        d = self.workdir / f"sqlite-{label}-{uuid.uuid4().hex[:6]}"
        d.mkdir(parents=True)
        return f"sqlite:///{d / 'wal.db'}"

    @staticmethod
    def path(url: str) -> Path:
        return Path(url[len("sqlite:///") :])

    def drop(self, url: str) -> None:
        shutil.rmtree(self.path(url).parent, ignore_errors=True)


class PostgresBackend(Backend):
    name = "postgres"

    def __init__(self, admin_url: str) -> None:
        import psycopg

        self.psycopg = psycopg
        self.admin_url = admin_url
        self.base = admin_url.rsplit("/", 1)[0]
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute("select 1")

    def _admin(self) -> Any:
        return self.psycopg.connect(self.admin_url, autocommit=True)

    def fresh(self, label: str) -> str:
        name = f"{RUN_PREFIX}_{label}_{uuid.uuid4().hex[:6]}".lower().replace("-", "_")
        with self._admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"{self.base}/{name}"

    def drop(self, url: str) -> None:
        name = url.rsplit("/", 1)[1]
        with self._admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def drop_leftovers(self) -> None:
        """Drop this run's databases and those of benchmark runs that are no longer alive."""
        with self._admin() as conn:
            names = [
                r[0]
                for r in conn.execute(
                    "select datname from pg_database where datname like %s", (PG_DB_PREFIX + "_%",)
                )
            ]
            for name in names:
                pid = name[len(PG_DB_PREFIX) + 1 :].split("_", 1)[0]
                if not pid.isdigit():
                    continue  # not ours
                if int(pid) == os.getpid() or not Path(f"/proc/{pid}").exists():
                    conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def analyze(self, url: str) -> None:
        with self.psycopg.connect(url, autocommit=True) as conn:
            conn.execute("ANALYZE")


# --------------------------------------------------------------------------- the server


@dataclass
class Server:
    """``lakesync gateway`` in a subprocess (the CLI the product ships)."""

    wal_url: str
    workers: int
    workdir: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> Server:
        data_dir = self.workdir / f"gw-data-{self.port}"
        data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.workdir / f"gateway-{self.port}.log"
        args = [
            sys.executable,
            "-m",
            "lakesync_platform.cli",
            "gateway",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--data-dir",
            str(data_dir),
            "--wal-url",
            self.wal_url,
            "--jwt-secret",
            SECRET,
            "--workers",
            str(self.workers),
            "--log-level",
            "warning",
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESYNC_")}
        env["PYTHONPATH"] = os.pathsep.join(
            [str(CODE_DIR), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
        )
        with open(self.log_path, "ab") as fh:
            self.proc = subprocess.Popen(
                args, cwd=CODE_DIR, stdout=fh, stderr=fh, env=env, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        ready_hits = 0
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gateway exited:\n{self.tail()}")
            try:
                status, _ = self.request("GET", "/ready", timeout=2)
                if status == 200:
                    ready_hits += 1
                    # with several workers, give the others a moment to finish their startup
                    if ready_hits >= (1 if self.workers == 1 else 2 * self.workers):
                        return self
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"gateway did not become ready:\n{self.tail()}")

    def tail(self) -> str:
        try:
            return self.log_path.read_text()[-3000:]
        except OSError:
            return ""

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        token: str | None = None,
        timeout: float = 60,
    ) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            headers = {"Content-Type": "application/json"}
            if token:
                headers["Authorization"] = f"Bearer {token}"
            conn.request(method, path, body, headers)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def register_schema(self) -> None:
        status, body = self.request(
            "POST",
            f"/v1/admin/schema/{GW}",
            _enc.encode(SCHEMA),
            make_token("bench-admin", "admin"),
        )
        if status != 200:
            raise RuntimeError(f"schema registration failed: {status} {body[:300]!r}")

    def max_cursor(self) -> int:
        status, body = self.request(
            "GET", f"/v1/admin/metrics/{GW}", None, make_token("bench-admin", "admin")
        )
        if status != 200:
            raise RuntimeError(f"admin metrics failed: {status} {body[:300]!r}")
        return int(_dec.decode(body)["cursor"])


# --------------------------------------------------------------------------- push load


def _pusher(
    port: int,
    token: str,
    bodies: list[tuple[bytes, int]],
    barrier: Any,
    limit_s: float,
    results: Any,
    slot: int,
) -> None:
    """One load-generator client: a keep-alive connection, pre-built bodies, timed loop."""
    path = f"/v1/sync/{GW}/push"
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.connect()
    lat: list[float] = []
    sent = 0
    error = None
    barrier.wait()
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    for body, n in bodies:
        if time.perf_counter() - t0 >= limit_s:
            break
        ts = time.perf_counter()
        try:
            conn.request("POST", path, body, headers)
            resp = conn.getresponse()
            data = resp.read()
        except (OSError, http.client.HTTPException) as exc:
            error = f"{type(exc).__name__}: {exc}"
            break
        lat.append(time.perf_counter() - ts)
        if resp.status != 200:
            error = f"HTTP {resp.status}: {data[:300]!r}"
            break
        sent += n
    t1 = time.perf_counter()
    cpu = time.process_time() - cpu0
    conn.close()
    results.put(
        {
            "slot": slot,
            "deltas": sent,
            "requests": len(lat),
            "lat": lat,
            "cpu": cpu,
            "t0": t0,
            "t1": t1,
            "error": error,
        }
    )


def run_push(
    server: Server,
    corpus: Corpus,
    clients: int,
    batch: int,
    limit_s: float,
    ranges: list[tuple[int, int]] | None = None,
) -> dict[str, Any]:
    """Push from ``clients`` forked processes for at most ``limit_s`` (or until their share of
    the corpus is used up); returns throughput, latency and CPU figures."""
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(clients + 1)
    results = ctx.Queue()
    procs = []
    for slot in range(clients):
        lo, hi = ranges[slot] if ranges else (0, len(corpus.slots[slot]))
        deltas = corpus.slots[slot][lo:hi]
        cid = Corpus.client(slot)
        bodies = [
            (push_body(cid, deltas[i : i + batch]), len(deltas[i : i + batch]))
            for i in range(0, len(deltas), batch)
        ]
        p = ctx.Process(
            target=_pusher,
            args=(server.port, make_token(cid), bodies, barrier, limit_s, results, slot),
            daemon=True,
        )
        p.start()
        procs.append(p)
    barrier.wait(timeout=120)
    w0 = time.perf_counter()
    c0 = cpu_snapshot(server.proc.pid if server.proc else None)
    got = [results.get(timeout=limit_s + 300) for _ in procs]
    w1 = time.perf_counter()
    c1 = cpu_snapshot(server.proc.pid if server.proc else None)
    for p in procs:
        p.join(10)
    errors = [r["error"] for r in got if r["error"]]
    start = min(r["t0"] for r in got)
    end = max(r["t1"] for r in got)
    elapsed = end - start
    deltas = sum(r["deltas"] for r in got)
    lat = [x for r in got for x in r["lat"]]
    wall = w1 - w0
    return {
        "clients": clients,
        "batch": batch,
        "deltas": deltas,
        "requests": len(lat),
        "elapsed_s": round(elapsed, 3),
        "deltas_per_s": round(deltas / elapsed, 1) if elapsed > 0 else 0.0,
        "push_p50_ms": round(pct(lat, 50) * 1000, 2),
        "push_p99_ms": round(pct(lat, 99) * 1000, 2),
        "server_cpu_us_per_delta": round(1e6 * (c1["server"] - c0["server"]) / max(deltas, 1), 1),
        **cpu_delta(c0, c1, wall, sum(r["cpu"] for r in got)),
        "errors": errors,
    }


def warm_up(server: Server, deltas: list[bytes], connections: int = 4) -> None:
    """A few pushes on fresh connections (compiles SQLAlchemy statements, fills pools; with
    several workers the connections spread over them)."""
    token = make_token("bench-warm")
    per = max(1, len(deltas) // connections)
    for i in range(0, len(deltas), per):
        status, body = server.request(
            "POST", f"/v1/sync/{GW}/push", push_body("bench-warm", deltas[i : i + per]), token
        )
        if status != 200:
            raise RuntimeError(f"warm-up push failed: {status} {body[:300]!r}")


# --------------------------------------------------------------------------- pull


def run_pulls(
    server: Server, samples: int, stamped: bool, max_cursor: int, seed: int = 7, limit: int = 1000
) -> dict[str, Any]:
    """Sequential pulls of ``limit`` deltas at random cursors from one client."""
    client = "bench-puller"
    token = make_token(client)
    rows_needed = limit if stamped else limit // 2
    hi = max(0, max_cursor - rows_needed - 50)
    rnd = random.Random(seed)
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    headers = {"Authorization": f"Bearer {token}"}
    fmt = "&format=stamped" if stamped else ""
    lat: list[float] = []
    sizes: list[int] = []
    short = 0
    c0 = w0 = None
    own0 = 0.0
    for i in range(samples + 5):  # 5 warm-up pulls, not recorded
        if i == 5:
            c0 = cpu_snapshot(server.proc.pid if server.proc else None)
            w0 = time.perf_counter()
            own0 = time.process_time()  # this client's own CPU (it decodes every page)
        since = rnd.randint(0, hi)
        path = f"/v1/sync/{GW}/pull?since={since}&clientId={client}&limit={limit}{fmt}"
        ts = time.perf_counter()
        conn.request("GET", path, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        dt = time.perf_counter() - ts
        if resp.status != 200:
            raise RuntimeError(f"pull failed: {resp.status} {data[:300]!r}")
        if i < 5:
            continue
        lat.append(dt)
        sizes.append(len(data))
        page = _dec.decode(data)
        if len(page["deltas"]) != limit:
            short += 1
    assert c0 is not None and w0 is not None
    wall = time.perf_counter() - w0
    c1 = cpu_snapshot(server.proc.pid if server.proc else None)
    own = time.process_time() - own0
    conn.close()
    return {
        "format": "stamped" if stamped else "ts",
        "samples": samples,
        "p50_ms": round(pct(lat, 50) * 1000, 2),
        "p90_ms": round(pct(lat, 90) * 1000, 2),
        "p99_ms": round(pct(lat, 99) * 1000, 2),
        "mean_ms": round(statistics.fmean(lat) * 1000, 2),
        "page_bytes": int(statistics.fmean(sizes)),
        "short_pages": short,
        "server_cpu_ms_per_page": round(1000 * (c1["server"] - c0["server"]) / samples, 2),
        **cpu_delta(c0, c1, wall, own),
    }


# --------------------------------------------------------------------------- WAL fill


def fill_chunks(total: int, procs: int, chunk: int = 10_000) -> Iterator[list[RowDelta]]:
    """``total`` fill deltas (RowDelta objects) in chunks, generated by a process pool while
    the caller consumes them; each chunk is one filler client."""
    tasks = [
        (f"bench-filler-{k}", min(chunk, total - k * chunk), 50_000 + k, True)
        for k in range((total + chunk - 1) // chunk)
    ]
    ctx = mp.get_context("fork")
    with ctx.Pool(procs) as pool:
        for _, deltas in pool.imap(_gen_deltas, tasks):
            yield deltas


def fill_service(url: str, chunks: Iterator[list[RowDelta]], batch: int = 2000) -> dict[str, Any]:
    """Push every chunk in-process through ``SyncService.push`` (the server's write path)."""
    from lakesync_platform.sync.service import SyncService
    from lakesync_platform.wal.store import WriteAheadLog

    wal = WriteAheadLog.open(url, now_ms=wall_ms())
    try:
        svc = SyncService(wal, wall_ms)
        svc.save_schema(GW, parse_table_schema(SCHEMA))
        t0 = time.perf_counter()
        n = 0
        for deltas in chunks:
            for i in range(0, len(deltas), batch):
                part = deltas[i : i + batch]
                svc.push(GW, part[0].client_id, part)
                n += len(part)
        el = time.perf_counter() - t0
        return {
            "deltas": n,
            "seconds": round(el, 1),
            "deltas_per_s": round(n / el, 1),
            "cursor": wal.max_cursor(GW),
        }
    finally:
        wal.close()


def copy_sqlite_to_pg(sqlite_url: str, pg_url: str) -> dict[str, Any]:
    """Copy every WAL table of a SQLite WAL into a (migrated, empty) Postgres WAL with COPY."""
    import psycopg

    from lakesync_platform.wal import tables as t
    from lakesync_platform.wal.store import WriteAheadLog

    WriteAheadLog.open(pg_url, now_ms=wall_ms()).close()  # migrate
    t0 = time.perf_counter()
    counts = {}
    src = sqlite3.connect(SqliteBackend.path(sqlite_url))
    try:
        with psycopg.connect(pg_url) as dst:
            for table in t.metadata.sorted_tables:
                if table.name == t.schema_version.name:
                    continue
                cols = [c.name for c in table.columns]
                qcols = ", ".join(f'"{c}"' for c in cols)
                dst.execute(f'TRUNCATE "{table.name}"')
                n = 0
                with dst.cursor().copy(f'COPY "{table.name}" ({qcols}) FROM STDIN') as cp:
                    for row in src.execute(f'SELECT {qcols} FROM "{table.name}"'):
                        cp.write_row(row)
                        n += 1
                counts[table.name] = n
            dst.commit()
    finally:
        src.close()
    return {"rows": counts, "seconds": round(time.perf_counter() - t0, 1)}


# --------------------------------------------------------------------------- sections


@dataclass
class Plan:
    quick: bool
    backends: list[str]
    workers: list[int]
    clients: list[int]
    batches: list[int]
    push_seconds: float
    slot_sizes: list[int]
    warm: int
    pull_samples: int
    scale_small: int
    scale_big: int
    scale_push_per_client: int
    scale_limit_s: float
    repeat: int = 1
    wait_quiet: float = 0.0


def git_info() -> dict[str, Any]:
    """The commit under test and whether the product code differs from it (read-only git)."""

    def run(*cmd: str) -> str:
        try:
            return subprocess.run(
                ["git", *cmd], cwd=ROOT, capture_output=True, text=True, timeout=10
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    dirty = run("status", "--porcelain", "--", *_PACKAGES)
    return {
        "commit": run("rev-parse", "HEAD"),
        "subject": run("log", "-1", "--format=%s"),
        "product_code_dirty": [line for line in dirty.splitlines() if line],
        "code_snapshot": CODE is not None,
        "code_hash": code_hash(CODE_DIR),
    }


def code_hash(base: Path) -> str:
    """sha256 over the product packages' .py files (to tell whether code changed)."""
    h = hashlib.sha256()
    for pkg in _PACKAGES:
        for f in sorted((base / pkg).rglob("*.py")):
            h.update(str(f.relative_to(base)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


def make_plan(args: argparse.Namespace) -> Plan:
    if args.quick:
        plan = Plan(
            quick=True,
            backends=[],
            workers=[1],
            clients=[1, 4, 16],
            batches=[100, 500],
            push_seconds=1.2,
            slot_sizes=[12_000] + [10_000] * 3 + [3_000] * 12,
            warm=6_000,
            pull_samples=40,
            scale_small=10_000,
            scale_big=50_000,
            scale_push_per_client=2_500,
            scale_limit_s=10.0,
            repeat=1,
        )
    else:
        plan = Plan(
            quick=False,
            backends=[],
            workers=[1, 2],
            clients=[1, 4, 16],
            batches=[100, 500],
            push_seconds=4.0,
            slot_sizes=[50_000] + [40_000] * 3 + [10_000] * 12,
            warm=6_000,
            pull_samples=200,
            scale_small=10_000,
            scale_big=1_000_000,
            scale_push_per_client=10_000,
            scale_limit_s=12.0,
            repeat=2,
        )
    plan.backends = args.backends.split(",")
    if args.workers:
        plan.workers = [int(w) for w in args.workers.split(",")]
    if args.clients:
        plan.clients = [int(c) for c in args.clients.split(",")]
    if args.batches:
        plan.batches = [int(b) for b in args.batches.split(",")]
    if args.scale_max:
        plan.scale_big = args.scale_max
    if args.push_seconds:
        plan.push_seconds = args.push_seconds
    if args.repeat:
        plan.repeat = args.repeat
    need = 2 * plan.repeat * plan.scale_push_per_client
    for i in range(4):  # slots 0-3 feed the scale pushes: one fresh slice per state x round
        plan.slot_sizes[i] = max(plan.slot_sizes[i], need)
    plan.wait_quiet = args.wait_quiet
    return plan


def section_push(
    plan: Plan, backends: dict[str, Backend], corpus: Corpus, workdir: Path, analyze: bool
) -> list[dict[str, Any]]:
    rows = []
    for bname in plan.backends:
        backend = backends[bname]
        for workers in plan.workers:
            for batch in plan.batches:
                for clients in plan.clients:
                    url = backend.fresh(f"push{clients}x{batch}w{workers}")
                    server = Server(url, workers, workdir)
                    try:
                        server.start()
                        server.register_schema()
                        warm_up(server, corpus.warm[:2000])
                        if analyze:
                            backend.analyze(url)
                        quiet = wait_for_quiet(plan.wait_quiet)
                        res = run_push(server, corpus, clients, batch, plan.push_seconds)
                        res["background_cores_before"] = quiet
                    finally:
                        server.stop()
                        backend.drop(url)
                    res = {"backend": bname, "workers": workers, **res}
                    rows.append(res)
                    log(
                        f"push {bname:8s} w={workers} c={clients:2d} b={batch}: "
                        f"{res['deltas_per_s']:>9,.0f} deltas/s  p50 {res['push_p50_ms']} ms  "
                        f"srv {res['server_cpu_cores']} gen {res['generator_cpu_cores']} "
                        f"pg {res['postgres_cpu_cores']} other {res['other_cpu_cores']} cores"
                        + (f"  ERRORS {res['errors'][:1]}" if res["errors"] else "")
                    )
    return rows


def measure_state(
    backend: Backend,
    url: str,
    workdir: Path,
    corpus: Corpus,
    plan: Plan,
    slice_no: int,
    label: str,
    analyze: bool,
) -> dict[str, Any]:
    """Pull latency (both formats) then push throughput (4 x 500) on the WAL at ``url``.

    ``plan.repeat`` rounds; the reported figures are the best round (noise from other
    processes on a shared host only ever slows a round down); every round is kept."""
    if analyze:
        backend.analyze(url)
    server = Server(url, 1, workdir)
    rounds: list[dict[str, Any]] = []
    try:
        server.start()
        size = server.max_cursor()
        # warm the push path once (distinct warm deltas per state)
        warm_up(server, corpus.warm[2000 * (slice_no + 1) : 2000 * (slice_no + 2)])
        per = plan.scale_push_per_client
        for r in range(plan.repeat):
            quiet = wait_for_quiet(plan.wait_quiet)
            pulls = [
                run_pulls(server, plan.pull_samples, stamped, size, seed=100 * slice_no + r)
                for stamped in (False, True)
            ]
            for p in pulls:
                p["background_cores_before"] = quiet
            lo = (slice_no * plan.repeat + r) * per
            quiet_push = wait_for_quiet(plan.wait_quiet)
            push = run_push(server, corpus, 4, 500, plan.scale_limit_s, ranges=[(lo, lo + per)] * 4)
            push["background_cores_before"] = quiet_push
            rounds.append({"pull": pulls, "push": push})
        after = server.max_cursor()
    finally:
        server.stop()
    best_push = max((rd["push"] for rd in rounds), key=lambda p: p["deltas_per_s"])
    best_pulls = [
        min((rd["pull"][i] for rd in rounds), key=lambda p: p["p50_ms"]) for i in range(2)
    ]
    log(
        f"scale {backend.name:8s} {label:>5s} (WAL {size:,}): push "
        f"{best_push['deltas_per_s']:,.0f}/s  pull ts p50 {best_pulls[0]['p50_ms']} ms, "
        f"stamped p50 {best_pulls[1]['p50_ms']} ms  (best of {len(rounds)})"
    )
    return {
        "backend": backend.name,
        "state": label,
        "wal_deltas_before": size,
        "wal_deltas_after": after,
        "pull": best_pulls,
        "push": best_push,
        "rounds": rounds,
    }


def section_scale(
    plan: Plan,
    backends: dict[str, Backend],
    corpus: Corpus,
    workdir: Path,
    args: argparse.Namespace,
) -> dict[str, Any]:
    small_label = _fmt_count(plan.scale_small)
    big_label = _fmt_count(plan.scale_big)
    fill_chunk = 10_000
    first_chunk: list[RowDelta] | None = None
    states: list[dict[str, Any]] = []
    fills: dict[str, Any] = {}
    pg = backends.get("postgres") if "postgres" in plan.backends else None
    sq = backends.get("sqlite") if "sqlite" in plan.backends else None
    # the big fill is generated once and, when both backends fill through the service, kept
    # in memory for the second one (same deltas in both WALs)
    keep_big = pg is not None and sq is not None and args.pg_fill == "service"
    big_cache: list[list[RowDelta]] = []

    def first_fill() -> list[RowDelta]:
        nonlocal first_chunk
        if first_chunk is None:
            first_chunk = [
                d for c in fill_chunks(plan.scale_small, args.procs, fill_chunk) for d in c
            ]
        return first_chunk

    def big_chunks(total: int, on_chunk: Callable[[int], None] | None = None) -> Iterator[Any]:
        """``total`` fill deltas beyond the small fill, in chunks (cached, then generated)."""
        done = 0
        if total <= 0:
            return
        for i, chunk in enumerate(_big_source()):
            part = chunk[: total - done]
            done += len(part)
            if on_chunk is not None:
                on_chunk(i)
            yield part
            if done >= total:
                return

    def _big_source() -> Iterator[list[RowDelta]]:
        yield from list(big_cache)
        k0 = len(big_cache)
        n_tasks = (plan.scale_big + fill_chunk - 1) // fill_chunk
        tasks = [
            (f"bench-filler-big-{k}", fill_chunk, 90_000 + k, True) for k in range(k0, n_tasks)
        ]
        ctx = mp.get_context("fork")
        with ctx.Pool(args.procs) as pool:
            for _, deltas in pool.imap(_gen_deltas, tasks):
                if keep_big:
                    big_cache.append(deltas)
                yield deltas

    pg_big_url = None
    try:
        if pg is not None:
            url = pg.fresh("scale_small")
            try:
                fills["postgres_small"] = {
                    "method": "in-process SyncService.push",
                    **fill_service(url, iter([first_fill()])),
                }
                states.append(
                    measure_state(
                        pg, url, workdir, corpus, plan, 0, small_label, not args.no_analyze
                    )
                )
            finally:
                pg.drop(url)
        if sq is not None:
            url = sq.fresh("scale")
            try:
                fills["sqlite_small"] = {
                    "method": "in-process SyncService.push",
                    **fill_service(url, iter([first_fill()])),
                }
                states.append(measure_state(sq, url, workdir, corpus, plan, 0, small_label, False))
                from lakesync_platform.wal.store import WriteAheadLog

                wal = WriteAheadLog.open(url, now_ms=wall_ms())
                have = wal.max_cursor(GW)
                wal.close()
                need = max(0, plan.scale_big - have)
                log(f"filling SQLite WAL in-process: {have:,} -> {plan.scale_big:,} deltas ...")
                fills["sqlite_big"] = {
                    "method": "in-process SyncService.push (batches of 2000)",
                    **fill_service(url, big_chunks(need)),
                }
                log(f"  filled: {fills['sqlite_big']}")
                if pg is not None and args.pg_fill == "copy":
                    pg_big_url = pg.fresh("scale_big")
                    log("copying the SQLite WAL into Postgres (COPY) ...")
                    fills["postgres_big"] = {
                        "method": "COPY of the SQLite WAL tables written by SyncService, "
                        "then ANALYZE",
                        **copy_sqlite_to_pg(url, pg_big_url),
                    }
                    log(f"  copied: {fills['postgres_big']['rows']}")
                states.append(measure_state(sq, url, workdir, corpus, plan, 1, big_label, False))
            finally:
                sq.drop(url)
        if pg is not None:
            if pg_big_url is None:
                pg_big_url = pg.fresh("scale_big")
                big_url = pg_big_url
                log(f"filling Postgres WAL in-process: 0 -> {plan.scale_big:,} deltas ...")

                def analyze_now(i: int) -> None:
                    if i % 10 == 9 and not args.no_analyze:
                        pg.analyze(big_url)  # what autovacuum does while a table grows

                def pg_chunks() -> Iterator[list[RowDelta]]:
                    yield first_fill()
                    yield from big_chunks(plan.scale_big - plan.scale_small, analyze_now)

                fills["postgres_big"] = {
                    "method": "in-process SyncService.push (batches of 2000), ANALYZE every "
                    "100k deltas",
                    **fill_service(pg_big_url, pg_chunks()),
                }
                big_cache.clear()
                log(f"  filled: {fills['postgres_big']}")
            try:
                states.append(
                    measure_state(
                        pg, pg_big_url, workdir, corpus, plan, 1, big_label, not args.no_analyze
                    )
                )
            finally:
                pg.drop(pg_big_url)
    finally:
        if pg is not None and pg_big_url is not None:
            with contextlib.suppress(Exception):
                pg.drop(pg_big_url)
    return {
        "small": plan.scale_small,
        "big": plan.scale_big,
        "repeat": plan.repeat,
        "fills": fills,
        "states": states,
    }


def _fmt_count(n: int) -> str:
    if n >= 1_000_000 and n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    if n >= 1000 and n % 1000 == 0:
        return f"{n // 1000}k"
    return str(n)


# --------------------------------------------------------------------------- profiling

_CATEGORIES: list[tuple[str, Callable[[str], bool]]] = [
    (
        "db: driver execute (SQLite C / PG wait)",
        lambda f: _fn(f) in ("do_execute", "do_executemany") or "/psycopg/" in f,
    ),
    ("sqlalchemy: python overhead", lambda f: "/sqlalchemy/" in f),
    ("core.merge", lambda f: "/core/merge.py" in f),
    ("sync (push/pull logic)", lambda f: "/lakesync_platform/sync/" in f),
    ("wal (store: row building, SQL)", lambda f: "/lakesync_platform/wal/" in f),
    ("wire decode/validate", lambda f: "/core/wire.py" in f or "/core/delta.py" in f),
    ("schema check", lambda f: "/core/schema.py" in f),
    ("auth (JWT)", lambda f: "/core/auth.py" in f or "/gateway/auth.py" in f),
    ("hashlib/json/msgspec", lambda f: "hashlib" in f or "/json/" in f or "msgspec" in f),
    ("gateway routes", lambda f: "/gateway/" in f),
    (
        "http/asgi (uvicorn, litestar, anyio, asyncio)",
        lambda f: any(
            s in f
            for s in (
                "/uvicorn/",
                "/litestar/",
                "/anyio/",
                "/asyncio/",
                "httptools",
                "/uvloop/",
                "/starlette/",
            )
        ),
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


def _fn(frame: str) -> str:
    """Bare function name of a py-spy frame ``Class.func (file:line)``."""
    return frame.split(" (", 1)[0].rsplit(".", 1)[-1]


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
    share = lambda c: {k: round(100 * v / total, 1) for k, v in c.most_common(top)}  # noqa: E731
    return {
        "samples": total,
        "focus": focus,
        "categories_pct": share(cats),
        "self_pct": share(leaf_self),
        "inclusive_pct": share(inclusive),
    }


def _short(frame: str) -> str:
    """``func (/long/path/site-packages/pkg/mod.py:12)`` -> ``func (pkg/mod.py:12)``."""
    name, _, where = frame.partition(" (")
    where = where.rstrip(")")
    for marker in ("site-packages/", f"{ROOT}/", f"{CODE_DIR}/", "python3.11/"):
        if marker in where:
            where = where.split(marker, 1)[1]
            break
    return f"{name} ({where})"


def pyspy_record(pid: int, seconds: float, out: Path, idle: bool) -> subprocess.Popen[bytes]:
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


def section_profile(
    plan: Plan,
    backends: dict[str, Backend],
    corpus: Corpus,
    workdir: Path,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """py-spy the server under 4 x 500 push load (CPU and wall/idle), and under pull load."""
    out: dict[str, Any] = {}
    seconds = 6
    for bname in plan.backends:
        backend = backends[bname]
        url = backend.fresh("profile")
        server = Server(url, 1, workdir)
        try:
            server.start()
            server.register_schema()
            warm_up(server, corpus.warm[:2000])
            if not args.no_analyze:
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
            size = server.max_cursor()
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


# --------------------------------------------------------------------------- report


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    cells = [[str(h) for h in headers]] + [[_cell(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    line = lambda r: "  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True))  # noqa: E731
    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), sep, *(line(r) for r in cells[1:])])


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.2f}".rstrip("0").rstrip(".") or "0"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def evaluate(result: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    push = result.get("push", [])
    for bname, target in (("sqlite", TARGET_SQLITE), ("postgres", TARGET_PG)):
        for r in push:
            if r["backend"] == bname and r["clients"] == 4 and r["batch"] == 500:
                out.append(
                    {
                        "target": f"push {bname} 4x500 w{r['workers']} >= {target:,}/s",
                        "value": r["deltas_per_s"],
                        "met": r["deltas_per_s"] >= target,
                    }
                )
    scale = result.get("scale", {}).get("states", [])
    for st in scale:
        for p in st["pull"]:
            out.append(
                {
                    "target": f"pull {st['backend']} {p['format']} @{st['state']} "
                    f"p50 <= {TARGET_PULL_P50_MS:g} ms",
                    "value": p["p50_ms"],
                    "met": p["p50_ms"] <= TARGET_PULL_P50_MS,
                }
            )
    for bname in ("sqlite", "postgres"):
        mine = [s for s in scale if s["backend"] == bname]
        if len(mine) != 2:
            continue
        small, big = mine
        drop = 100 * (1 - big["push"]["deltas_per_s"] / small["push"]["deltas_per_s"])
        out.append(
            {
                "target": f"push slowdown {bname} {small['state']}->{big['state']} "
                f"<= {TARGET_SLOWDOWN_PCT:g}%",
                "value": round(drop, 1),
                "met": drop <= TARGET_SLOWDOWN_PCT,
            }
        )
        for ps, pb in zip(small["pull"], big["pull"], strict=True):
            up = 100 * (pb["p50_ms"] / ps["p50_ms"] - 1)
            out.append(
                {
                    "target": f"pull {ps['format']} p50 slowdown {bname} "
                    f"{small['state']}->{big['state']} <= {TARGET_SLOWDOWN_PCT:g}%",
                    "value": round(up, 1),
                    "met": up <= TARGET_SLOWDOWN_PCT,
                }
            )
    return out


def report(result: dict[str, Any]) -> str:
    parts = []
    meta = result.get("meta", {})
    git = meta.get("git", {})
    parts.append(
        f"LakeSync gateway benchmark ({meta.get('mode')}), commit {git.get('commit', '')[:10]} "
        f"{'+ uncommitted changes ' if git.get('product_code_dirty') else ''}"
        f"(code {git.get('code_hash')}{', snapshot' if git.get('code_snapshot') else ''})"
        f" — {meta.get('cpus')} CPUs, other processes used "
        f"{meta.get('background_cores_at_start')} cores at start\n"
    )
    push = result.get("push", [])
    if push:
        parts.append("== 1. Durable push throughput (fresh WAL per row, new rows, 4 columns)")
        parts.append(
            _table(
                [
                    "backend",
                    "workers",
                    "clients",
                    "batch",
                    "deltas/s",
                    "req/s",
                    "p50 ms",
                    "p99 ms",
                    "srv cpu",
                    "srv us/delta",
                    "gen cpu",
                    "pg cpu",
                    "other cpu",
                    "steal",
                    "deltas",
                    "errors",
                ],
                [
                    [
                        r["backend"],
                        r["workers"],
                        r["clients"],
                        r["batch"],
                        r["deltas_per_s"],
                        r["requests"] / r["elapsed_s"] if r["elapsed_s"] else 0.0,
                        r["push_p50_ms"],
                        r["push_p99_ms"],
                        r["server_cpu_cores"],
                        r["server_cpu_us_per_delta"],
                        r["generator_cpu_cores"],
                        r["postgres_cpu_cores"],
                        r["other_cpu_cores"],
                        r["steal_cores"],
                        r["deltas"],
                        len(r["errors"]),
                    ]
                    for r in push
                ],
            )
        )
        parts.append(
            f"   (cpu columns: average cores used during the timed window by the server "
            f"tree / load generators / postgres / every other process on the host; steal: "
            f"CPU the hypervisor gave to other VMs; the machine has {os.cpu_count()})"
        )
    scale = result.get("scale")
    if scale and scale.get("states"):
        parts.append(
            "\n== 2. Pull latency, 1 000-delta pages at random cursors "
            "(sequential client, workers=1)"
        )
        parts.append(
            _table(
                [
                    "backend",
                    "WAL",
                    "format",
                    "p50 ms",
                    "p90 ms",
                    "p99 ms",
                    "mean ms",
                    "KiB/page",
                    "srv cpu ms/page",
                    "srv cpu",
                    "client cpu",
                    "pg cpu",
                    "other cpu",
                    "steal",
                ],
                [
                    [
                        s["backend"],
                        s["wal_deltas_before"],
                        p["format"],
                        p["p50_ms"],
                        p["p90_ms"],
                        p["p99_ms"],
                        p["mean_ms"],
                        p["page_bytes"] / 1024,
                        p["server_cpu_ms_per_page"],
                        p["server_cpu_cores"],
                        p["generator_cpu_cores"],
                        p["postgres_cpu_cores"],
                        p["other_cpu_cores"],
                        p["steal_cores"],
                    ]
                    for s in scale["states"]
                    for p in s["pull"]
                ],
            )
        )
        parts.append(
            f"\n== 3. Scale {_fmt_count(scale['small'])} -> "
            f"{_fmt_count(scale['big'])} deltas in the WAL (push 4 clients x 500; "
            f"sections 2 and 3: best of {scale.get('repeat', 1)} round(s))"
        )
        parts.append(
            _table(
                [
                    "backend",
                    "state",
                    "WAL before",
                    "deltas/s",
                    "p50 ms",
                    "p99 ms",
                    "srv cpu",
                    "srv us/delta",
                    "gen cpu",
                    "pg cpu",
                    "other cpu",
                    "steal",
                ],
                [
                    [
                        s["backend"],
                        s["state"],
                        s["wal_deltas_before"],
                        s["push"]["deltas_per_s"],
                        s["push"]["push_p50_ms"],
                        s["push"]["push_p99_ms"],
                        s["push"]["server_cpu_cores"],
                        s["push"]["server_cpu_us_per_delta"],
                        s["push"]["generator_cpu_cores"],
                        s["push"]["postgres_cpu_cores"],
                        s["push"]["other_cpu_cores"],
                        s["push"]["steal_cores"],
                    ]
                    for s in scale["states"]
                ],
            )
        )
        for name, f in scale["fills"].items():
            extra = {k: v for k, v in f.items() if k not in ("method",)}
            parts.append(f"   fill {name}: {f['method']}  {extra}")
    targets = result.get("targets", [])
    if targets:
        parts.append("\n== Targets")
        parts.append(
            _table(
                ["target", "value", "status"],
                [[t["target"], t["value"], "met" if t["met"] else "MISSED"] for t in targets],
            )
        )
    prof = result.get("profile")
    if prof:
        parts.append(
            "\n== Profiles (py-spy on the server, workers=1; raw stacks in "
            "benchmarks/results/profile-*.txt)"
        )
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
    return "\n".join(parts)


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small run (~1-2 min)")
    ap.add_argument("--backends", default="sqlite,postgres")
    ap.add_argument(
        "--workers", default="", help="server --workers values for section 1 (full: 1,2; quick: 1)"
    )
    ap.add_argument("--clients", default="", help="section 1 client counts (default 1,4,16)")
    ap.add_argument("--batches", default="", help="section 1 batch sizes (default 100,500)")
    ap.add_argument(
        "--pg-url",
        default=os.environ.get("BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres"),
        help="admin URL; benchmark databases are created next to it and dropped",
    )
    ap.add_argument(
        "--pg-fill",
        choices=["copy", "service"],
        default="service",
        help="how the 1M Postgres WAL is filled (see module doc)",
    )
    ap.add_argument(
        "--no-analyze",
        action="store_true",
        help="do not ANALYZE Postgres after warm-up/fill (shows cold-stats plans)",
    )
    ap.add_argument("--sections", default="push,scale", help="push,scale (and/or profile)")
    ap.add_argument("--profile", action="store_true", help="also record py-spy profiles")
    ap.add_argument("--profile-only", action="store_true")
    ap.add_argument("--scale-max", type=int, default=0, help="override the big WAL size")
    ap.add_argument("--push-seconds", type=float, default=0.0)
    ap.add_argument(
        "--repeat", type=int, default=0, help="rounds per scale state, best kept (full: 2)"
    )
    ap.add_argument(
        "--wait-quiet",
        type=float,
        default=0.0,
        help="before each measurement wait up to this many seconds for other processes on "
        "the host to use < 0.5 cores (shared machines); the level seen is recorded",
    )
    ap.add_argument(
        "--procs", type=int, default=os.cpu_count() or 2, help="processes generating deltas"
    )
    ap.add_argument("--workdir", default=None, help="where SQLite WALs and logs go (tmp)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument(
        "--no-snapshot",
        action="store_true",
        help="run the live source tree (default: a copy taken at start, so edits made to the "
        "repository during the run do not mix code versions)",
    )
    ap.add_argument("--out", default=str(RESULTS / "gateway.json"))
    args = ap.parse_args(argv)

    plan = make_plan(args)
    sections = set(args.sections.split(","))
    if args.profile:
        sections.add("profile")
    if args.profile_only:
        sections = {"profile"}
    RESULTS.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="lakesync-bench-", dir=args.workdir))
    started = time.time()
    backends: dict[str, Backend] = {}
    if "sqlite" in plan.backends:
        backends["sqlite"] = SqliteBackend(workdir)
    if "postgres" in plan.backends:
        pgb = PostgresBackend(args.pg_url)
        pgb.drop_leftovers()
        backends["postgres"] = pgb
    result: dict[str, Any] = {
        "meta": {
            "mode": "quick" if plan.quick else "full",
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "host": platform.node(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "argv": sys.argv[1:],
            "git": git_info(),
            "background_cores_at_start": round(background_cores(2.0), 2),
            "plan": plan.__dict__,
            "notes": [
                "Every section-1 row runs on a fresh WAL (new SQLite file / Postgres database).",
                "Deltas are new rows (INSERT, 4 columns), content ids from core.ids.delta_id, "
                "HLCs from core.hlc.HLC over the wall clock at corpus generation time.",
                "Postgres is ANALYZEd after the warm-up pushes unless --no-analyze.",
                "Push latency is per request (batch), client side; CPU columns are average "
                "cores used by the server process tree / load generators / all postgres "
                "processes during the timed window.",
            ],
        }
    }
    try:
        log(
            f"workdir {workdir}; mode {'quick' if plan.quick else 'full'}; "
            f"generating corpus ({sum(plan.slot_sizes) + plan.warm:,} deltas) ..."
        )
        corpus = build_corpus(plan.slot_sizes, plan.warm, args.procs)
        log("corpus ready")
        if "push" in sections:
            result["push"] = section_push(plan, backends, corpus, workdir, not args.no_analyze)
        if "scale" in sections:
            result["scale"] = section_scale(plan, backends, corpus, workdir, args)
        if "profile" in sections:
            result["profile"] = section_profile(plan, backends, corpus, workdir, args)
        result["targets"] = evaluate(result)
    finally:
        result["meta"]["duration_s"] = round(time.time() - started, 1)
        live = code_hash(ROOT)
        result["meta"]["git"]["live_code_changed_during_run"] = (
            live != result["meta"]["git"]["code_hash"]
        )
        if CODE is not None:
            shutil.rmtree(CODE, ignore_errors=True)
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2, default=str) + "\n")
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        if "postgres" in backends:
            with contextlib.suppress(Exception):
                backends["postgres"].drop_leftovers()  # type: ignore[attr-defined]
    print(report(result))
    print(f"\nJSON: {out}   ({result['meta']['duration_s']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
