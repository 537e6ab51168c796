"""Dagster job runs as Dagster's default run launcher makes them: a fresh process per run.

:func:`execute_job` runs ``dagster job execute -m assets.definitions -a defs -j JOB`` in a new
process (its own session, so a timeout can stop it and the JVM it started) with the code
version under test first on ``PYTHONPATH`` and a Dagster instance of its own
(:func:`dagster_home`: runs and event logs in SQLite, telemetry off). Afterwards it reads the
run back from that instance, so each run reports two kinds of figures:

* ``process_s`` — the whole process, launch to exit, by the wall clock: what a run launcher's
  run costs the machine (Python and Dagster start, the code location loads, the run, teardown);
* the run's own figures from Dagster's run record and event log: ``run_s`` (run start → end, as
  the UI shows a run's duration), ``steps_s`` (each step's start → end) and their sum, and the
  steps that did not succeed (``failed_steps``).

A run that fails — or a process that dies before it created a run — comes back with
``status`` and ``error`` (the failed steps' innermost exception and where it was raised, or the
process's last lines of output), never as an exception. The benchmark goes on.

Dagster is imported here (the benchmark process reads the instances); nothing of the product.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .cpu import TreeCpuSampler

__all__ = [
    "dagster_home",
    "execute_job",
    "kill_session",
    "read_run",
    "run_child",
    "tail",
    "traceback_summary",
]

_PRODUCT_FRAMES = ("/lakesync_platform/", "/assets/", "/resources/", "/sensors/")
_FRAME = re.compile(r'File "[^"]*?/((?:lakesync_platform|assets|resources|sensors|gateway)/[^"]+)"')


def dagster_home(path: Path) -> Path:
    """A Dagster instance directory at ``path`` (SQLite storage, telemetry off)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    return path


def run_child(
    cmd: list[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    log_path: Path,
    timeout_s: float,
) -> dict[str, Any]:
    """Run ``cmd`` in a new session, output to ``log_path``; its wall seconds, exit status,
    CPU seconds of its process tree and whether it timed out (then its whole session was
    killed)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as out:
        started = time.perf_counter()
        proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            env=dict(env),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        timed_out = False
        with TreeCpuSampler(proc.pid) as cpu:
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                kill_session(proc)
        wall = time.perf_counter() - started
    return {
        "wall_s": round(wall, 3),
        "returncode": proc.returncode,
        "timed_out": timed_out,
        "cpu_s": cpu.cpu_s,
    }


def kill_session(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM ``proc``'s session (it was started with ``start_new_session``), SIGKILL after
    10 s; waits for ``proc``."""
    for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=grace)
            break
        except subprocess.TimeoutExpired:
            continue
    # Members of the session that outlived its leader (a JVM): gone with the group signal.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def execute_job(
    job: str,
    *,
    tree: Path,
    env: Mapping[str, str],
    home: Path,
    log_path: Path,
    timeout_s: float = 3600.0,
) -> dict[str, Any]:
    """Run ``job`` of the code location ``assets.definitions`` in ``tree`` in a fresh process
    (``env`` plus ``PYTHONPATH=tree`` and ``DAGSTER_HOME=home``); the run's figures."""
    cmd = [sys.executable, "-m", "dagster", "job", "execute"]
    cmd += ["-m", "assets.definitions", "-a", "defs", "-j", job]
    child_env = {**env, "PYTHONPATH": str(tree), "DAGSTER_HOME": str(home)}
    since = time.time()
    proc = run_child(cmd, cwd=tree, env=child_env, log_path=log_path, timeout_s=timeout_s)
    out: dict[str, Any] = {
        "process_s": proc["wall_s"],
        "process_cpu_s": proc["cpu_s"],
        "returncode": proc["returncode"],
    }
    out.update(read_run(home, job, since))
    if proc["timed_out"]:
        out["status"] = "TIMEOUT"
        out["error"] = f"killed after {timeout_s:.0f} s"
    elif out.get("status") != "SUCCESS" and not out.get("error"):
        out["error"] = traceback_summary(log_path)
    if out.get("status") != "SUCCESS":
        out["log"] = str(log_path)
    return out


def tail(path: Path, lines: int = 12) -> str:
    """The last ``lines`` lines of a log file."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def traceback_summary(path: Path) -> str:
    """What a child process's log says went wrong: the last exception line of its last
    traceback and the last product frame it passed through; else the log's last lines."""
    text = path.read_text(errors="replace") if path.exists() else ""
    start = text.rfind("Traceback (most recent call last):")
    if start < 0:
        return tail(path)
    lines = text[start:].splitlines()
    frames = [ln.strip() for ln in lines if ln.strip().startswith("File ") and _product_frame(ln)]
    errors = [ln for ln in lines[1:] if ln and not ln.startswith(" ")]
    found = errors[-1] if errors else lines[-1]
    return _short_paths(found + (f" (at {frames[-1]})" if frames else ""))


def _short_paths(text: str) -> str:
    """Frames' file names from the package on (``lakesync_platform/spark/x.py``)."""
    return _FRAME.sub(r'File "\1"', text)


def read_run(home: Path, job: str, since: float) -> dict[str, Any]:
    """The latest run of ``job`` in the instance at ``home`` created after ``since`` (epoch
    seconds): status, run and step seconds, check outcomes, and the error of a failed run."""
    import dagster as dg

    with dg.DagsterInstance.from_config(str(home)) as instance:
        records = instance.get_run_records(filters=dg.RunsFilter(job_name=job), limit=1)
        if not records or records[0].create_timestamp.timestamp() < since - 1:
            return {"status": "NO_RUN", "run_id": None}
        record = records[0]
        run_id = record.dagster_run.run_id
        out: dict[str, Any] = {"status": record.dagster_run.status.value, "run_id": run_id}
        if record.start_time and record.end_time:
            out["run_s"] = round(record.end_time - record.start_time, 3)
            out["launch_s"] = round(record.start_time - record.create_timestamp.timestamp(), 3)
        stats = instance.get_run_step_stats(run_id)
        steps = {
            s.step_key: round(s.end_time - s.start_time, 3)
            for s in stats
            if s.start_time and s.end_time
        }
        out["steps_s"] = steps
        out["failed_steps"] = [s.step_key for s in stats if s.status.value != "SUCCESS"]
        out["steps_total_s"] = round(sum(steps.values()), 3)
        checks = {}
        for entry in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION):
            data = entry.dagster_event.event_specific_data
            checks[f"{data.asset_key.to_user_string()}:{data.check_name}"] = bool(data.passed)
        out["checks_passed"] = checks
        errors = [
            f"{entry.step_key}: {describe_error(entry.dagster_event.step_failure_data.error)}"
            for entry in instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_FAILURE)
            if entry.dagster_event is not None and entry.dagster_event.step_failure_data.error
        ]
        if not errors and out["status"] == "FAILURE":
            errors = [
                entry.dagster_event.message or ""
                for entry in instance.all_logs(run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
                if entry.dagster_event is not None
            ]
        if errors:
            out["error"] = "\n".join(errors)
        return out


def describe_error(error: Any) -> str:
    """The innermost cause of a Dagster ``SerializableErrorInfo`` (``cls: message``) and the
    last product frame it passed through."""
    inner = error
    while getattr(inner, "cause", None) is not None:
        inner = inner.cause
    message = (inner.message or "").strip().splitlines()
    text = message[0] if message else inner.cls_name or "error"
    frames = [f for f in inner.stack or [] if _product_frame(f)]
    frames = frames or [f for f in error.stack or [] if _product_frame(f)]
    if frames:
        text += f" (at {frames[-1].strip().splitlines()[0]})"
    return _short_paths(text)


def _product_frame(frame: str) -> bool:
    return any(p in frame for p in _PRODUCT_FRAMES) and "site-packages" not in frame
