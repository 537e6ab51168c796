"""Load on a running gateway: the gateway under test, forked pushers and the pull loop.

The gateway is :class:`lakesync_platform.testing.GatewayProcess` started on the code under
test (the snapshot, see :mod:`.snapshot`). Load generation: one forked process per client
(http.client, keep-alive), request bodies pre-built before the timed window; pulls come from
one sequential client.
"""

from __future__ import annotations

import http.client
import multiprocessing as mp
import os
import random
import statistics
import time
from pathlib import Path
from typing import Any

import msgspec

from lakesync_platform.testing import GatewayProcess, dev_token, free_port

from .corpus import GW, ORDERS, Corpus, push_body
from .cpu import cpu_delta, cpu_snapshot
from .snapshot import code_dir
from .stats import pct

SECRET = "bench-secret-not-for-production"

_enc = msgspec.json.Encoder()
_dec = msgspec.json.Decoder()


def token(sub: str, role: str = "client") -> str:
    """A token for ``sub`` on the benchmark gateway."""
    return dev_token(sub, GW, SECRET, role)


def gateway(wal_url: str, workers: int, workdir: Path) -> GatewayProcess:
    """``lakesync gateway`` of the code under test on ``wal_url`` (not started yet); its data
    directory and log under ``workdir``."""
    port = free_port()
    code = str(code_dir())
    path = os.environ.get("PYTHONPATH")
    return GatewayProcess(
        workdir / f"gw-data-{port}",
        SECRET,
        wal_url=wal_url,
        workers=workers,
        env={"PYTHONPATH": os.pathsep.join([code, *([path] if path else [])])},
        cwd=Path(code),
        port=port,
    )


def server_pid(server: GatewayProcess) -> int | None:
    """The gateway's process id (the root of its process tree)."""
    return server.proc.pid if server.proc else None


def register_schema(server: GatewayProcess) -> None:
    """Declare the ``orders`` table on the benchmark gateway."""
    status, body = server.request(
        "POST", f"/v1/admin/schema/{GW}", _enc.encode(ORDERS), token("bench-admin", "admin")
    )
    if status != 200:
        raise RuntimeError(f"schema registration failed: {status} {body[:300]!r}")


def max_cursor(server: GatewayProcess) -> int:
    """The benchmark gateway's last cursor (how many deltas its WAL holds)."""
    status, body = server.request(
        "GET", f"/v1/admin/metrics/{GW}", None, token("bench-admin", "admin")
    )
    if status != 200:
        raise RuntimeError(f"admin metrics failed: {status} {body[:300]!r}")
    return int(_dec.decode(body)["cursor"])


def warm_up(server: GatewayProcess, deltas: list[bytes], connections: int = 4) -> None:
    """A few pushes on fresh connections (compiles SQLAlchemy statements, fills pools; with
    several workers the connections spread over them)."""
    tok = token("bench-warm")
    per = max(1, len(deltas) // connections)
    for i in range(0, len(deltas), per):
        status, body = server.request(
            "POST", f"/v1/sync/{GW}/push", push_body("bench-warm", deltas[i : i + per]), tok
        )
        if status != 200:
            raise RuntimeError(f"warm-up push failed: {status} {body[:300]!r}")


def _pusher(
    port: int,
    tok: str,
    bodies: list[tuple[bytes, int]],
    barrier: Any,
    limit_s: float,
    results: Any,
    slot: int,
) -> None:
    """One load-generator client: a keep-alive connection, pre-built bodies, timed loop."""
    path = f"/v1/sync/{GW}/push"
    headers = {"Authorization": f"Bearer {tok}", "Content-Type": "application/json"}
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
    server: GatewayProcess,
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
            args=(server.port, token(cid), bodies, barrier, limit_s, results, slot),
            daemon=True,
        )
        p.start()
        procs.append(p)
    barrier.wait(timeout=120)
    w0 = time.perf_counter()
    c0 = cpu_snapshot(server_pid(server))
    got = [results.get(timeout=limit_s + 300) for _ in procs]
    w1 = time.perf_counter()
    c1 = cpu_snapshot(server_pid(server))
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


def run_pulls(
    server: GatewayProcess,
    samples: int,
    stamped: bool,
    max_cursor: int,
    seed: int = 7,
    limit: int = 1000,
) -> dict[str, Any]:
    """Sequential pulls of ``limit`` deltas at random cursors from one client."""
    client = "bench-puller"
    rows_needed = limit if stamped else limit // 2
    hi = max(0, max_cursor - rows_needed - 50)
    rnd = random.Random(seed)
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    headers = {"Authorization": f"Bearer {token(client)}"}
    fmt = "&format=stamped" if stamped else ""
    lat: list[float] = []
    sizes: list[int] = []
    short = 0
    c0 = w0 = None
    own0 = 0.0
    for i in range(samples + 5):  # 5 warm-up pulls, not recorded
        if i == 5:
            c0 = cpu_snapshot(server_pid(server))
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
    c1 = cpu_snapshot(server_pid(server))
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
