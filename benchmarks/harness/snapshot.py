"""The code under test: a copy of the product packages taken at start, its hash and git state.

A script that measures a running gateway calls :func:`activate` before it imports anything of
the product, so that one run measures one version of the code even if the repository is edited
meanwhile: servers and in-process fills import the copy. This module imports nothing of the
product.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
"""The repository root."""

PACKAGES = ("lakesync_platform", "gateway", "assets", "sensors", "resources")
"""The product packages: what the snapshot copies and the code hash covers (``resources``: the
Dagster resources, which ``assets`` imports)."""

_active: list[Path | None] = []  # [snapshot dir or None] once activate() has run


def activate(snapshot: bool) -> Path | None:
    """Put the code under test first on ``sys.path``: a fresh copy of the product packages when
    ``snapshot``, else the live tree. Only the first call decides; later ones return its
    snapshot directory (``None``: the live tree)."""
    if not _active:
        snap = _take_snapshot() if snapshot else None
        _active.append(snap)
        sys.path.insert(0, str(snap or ROOT))
    return _active[0]


def snapshot_dir() -> Path | None:
    """The active snapshot's directory, or ``None`` when the live tree is measured."""
    return _active[0] if _active else None


def code_dir() -> Path:
    """Where the code under test is: the snapshot, or the repository."""
    return snapshot_dir() or ROOT


def remove_snapshot() -> None:
    """Delete the snapshot's copy (at the end of a run)."""
    snap = snapshot_dir()
    if snap is not None:
        shutil.rmtree(snap, ignore_errors=True)


def copy_packages(source: Path, dest: Path) -> Path:
    """Copy the product packages of the tree at ``source`` (uncommitted edits included) into
    ``dest``; returns ``dest``."""
    for pkg in PACKAGES:
        if (source / pkg).is_dir():
            shutil.copytree(source / pkg, dest / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def export_commit(rev: str, dest: Path) -> dict[str, str]:
    """Write the product packages as commit ``rev`` of this repository has them into ``dest``
    (``git archive``: no worktree, nothing of the repository changes); returns the commit's
    full id and subject. Raises ``RuntimeError`` for an unknown ``rev``."""
    found = subprocess.run(
        ["git", "log", "-1", "--format=%H%n%s", rev, "--"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if found.returncode != 0 or not found.stdout.strip():
        raise RuntimeError(f"no commit {rev!r} in {ROOT}: {found.stderr.strip()}")
    commit, subject = [*found.stdout.splitlines(), ""][:2]
    listed = subprocess.run(
        ["git", "ls-tree", "--name-only", commit],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.Popen(
        ["git", "archive", commit, *[p for p in PACKAGES if p in listed]],
        cwd=ROOT,
        stdout=subprocess.PIPE,
    )
    assert archive.stdout is not None
    with archive.stdout:
        subprocess.run(["tar", "-x", "-C", str(dest)], stdin=archive.stdout, check=True)
    if archive.wait() != 0:
        raise RuntimeError(f"git archive {commit} failed")
    return {"commit": commit, "subject": subject}


def _take_snapshot() -> Path:
    snap = copy_packages(ROOT, Path(tempfile.mkdtemp(prefix="lakesync-bench-code-")))
    pid = os.getpid()

    def remove() -> None:  # at exit of this process only (forked workers leave by os._exit)
        if os.getpid() == pid:
            shutil.rmtree(snap, ignore_errors=True)

    atexit.register(remove)
    return snap


def code_hash(base: Path) -> str:
    """sha256 over the product packages' .py files under ``base`` (to tell whether code
    changed)."""
    h = hashlib.sha256()
    for pkg in PACKAGES:
        for f in sorted((base / pkg).rglob("*.py")):
            h.update(str(f.relative_to(base)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


def git_info() -> dict[str, Any]:
    """The commit under test and whether the product code differs from it (read-only git)."""

    def run(*cmd: str) -> str:
        try:
            return subprocess.run(
                ["git", *cmd], cwd=ROOT, capture_output=True, text=True, timeout=10
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    dirty = run("status", "--porcelain", "--", *PACKAGES)
    return {
        "commit": run("rev-parse", "HEAD"),
        "subject": run("log", "-1", "--format=%s"),
        "product_code_dirty": [line for line in dirty.splitlines() if line],
        "code_snapshot": snapshot_dir() is not None,
        "code_hash": code_hash(code_dir()),
    }
