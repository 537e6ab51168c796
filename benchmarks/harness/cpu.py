"""CPU accounting from /proc: what the server tree, Postgres and the rest of the host used.

The benchmarks run on shared machines, so every figure is reported beside the CPU other
processes used meanwhile, and a measurement can wait for the host to calm down first.
"""

from __future__ import annotations

import os
import threading
import time

from .backends import RUN_PREFIX

_TICK = os.sysconf("SC_CLK_TCK")
_PG_AUX = ("walwriter", "checkpointer", "background writer", "wal writer")


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


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) ``pid`` has used so far (0 if it is gone)."""
    st = _stat(pid)
    return st[2] if st is not None else 0.0


def host_cpu() -> tuple[float, float]:
    """(busy, steal) CPU seconds of the whole machine so far: busy is time spent running code
    on all CPUs (user, nice, system, irq, softirq), steal what the hypervisor gave to other
    VMs."""
    with open("/proc/stat") as fh:
        f = [int(x) for x in fh.readline().split()[1:9]]
    # user nice system idle iowait irq softirq steal
    return (f[0] + f[1] + f[2] + f[5] + f[6]) / _TICK, f[7] / _TICK


def _is_bench_postgres(pid: int) -> bool:
    """A backend serving a benchmark database, or a WAL/checkpoint helper (shared, but driven
    by our commits); other sessions' backends on the same server are not counted."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            title = fh.read().decode(errors="replace")
    except OSError:
        return False
    return RUN_PREFIX + "_" in title or any(a in title for a in _PG_AUX)


def _tree(stats: dict[int, tuple[str, int, float]], root: int) -> list[int]:
    """``root`` and its descendants among ``stats`` (those alive)."""
    children: dict[int, list[int]] = {}
    for pid, (_, ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    found = []
    todo = [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _tree_cpu(stats: dict[int, tuple[str, int, float]], root: int) -> float:
    return sum(stats[pid][2] for pid in _tree(stats, root))


def tree_cpu(pid: int) -> float:
    """CPU seconds used so far by ``pid`` and its live descendants (0 if it is gone)."""
    return _tree_cpu(_all_stats(), pid)


class TreeCpuSampler:
    """The CPU seconds a process tree uses while it runs (a run process and the JVM it
    starts), sampled every ``interval_s`` in a thread: each process's last reading is kept
    after it exits, so children that come and go count (up to one interval of their end).

    ``with TreeCpuSampler(pid) as s: proc.wait()`` then ``s.cpu_s``.
    """

    def __init__(self, pid: int, interval_s: float = 0.5) -> None:
        self.pid = pid
        self.interval_s = interval_s
        self._seen: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        stats = _all_stats()
        for pid in _tree(stats, self.pid):
            self._seen[pid] = stats[pid][2]

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval_s)

    def __enter__(self) -> TreeCpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def cpu_s(self) -> float:
        """CPU seconds of every process seen in the tree."""
        return round(sum(self._seen.values()), 2)


def cpu_snapshot(server_pid: int | None) -> dict[str, float]:
    """CPU seconds used so far by the server process tree and by every postgres process."""
    stats = _all_stats()
    server = _tree_cpu(stats, server_pid) if server_pid is not None else 0.0
    pg = sum(
        cpu
        for pid, (comm, _, cpu) in stats.items()
        if comm.startswith("postgres") and _is_bench_postgres(pid)
    )
    busy, steal = host_cpu()
    return {"server": server, "postgres": pg, "busy": busy, "steal": steal}


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


def spark_jvm_pid(spark: object) -> int | None:
    """The pid of the JVM that runs ``spark``'s work when it is this process's child (a classic
    session: asked through py4j); ``None`` for a Spark Connect client, whose JVM is the server's
    (measure that process where it was started)."""
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        return None
    jvm = getattr(spark, "_jvm", None)
    return None if jvm is None else int(jvm.java.lang.ProcessHandle.current().pid())
