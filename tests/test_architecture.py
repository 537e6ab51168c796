"""The layering rules of ARCHITECTURE.md §2, enforced.

* ``lakesync_platform.core`` is pure: importing any of its modules loads no I/O, network,
  database, concurrency or framework library.
* ``lakesync_platform`` never imports the applications built on it (``gateway``, ``assets``,
  ``sensors``) nor their frameworks (Litestar, Dagster).
"""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import lakesync_platform
import lakesync_platform.core

ROOT = Path(lakesync_platform.__file__).resolve().parent

FORBIDDEN_IN_CORE = (
    "sqlite3",
    "sqlalchemy",
    "socket",
    "http",
    "urllib.request",
    "requests",
    "httpx",
    "litestar",
    "dagster",
    "pyspark",
    "asyncio",
    "threading",
    "subprocess",
)
# No exceptions are needed: the stdlib modules core uses (json, hashlib, hmac, base64, re,
# struct, unicodedata, dataclasses, functools) and msgspec load none of the above. Note that
# `_thread` (the C module) is not `threading` and is loaded by the interpreter itself.

FORBIDDEN_IN_PACKAGE = ("gateway", "assets", "sensors", "litestar", "dagster")
LAZY_EDGE_IMPORTS = {"cli/gateway.py": ("gateway",)}
"""The CLI is a process edge like the gateway: its ``gateway`` command may load the app, but only
inside the command (never when the package is imported)."""

_PROBE = """
import importlib, json, sys
sys.path.insert(0, {source_root!r})  # the checkout under test, not an installed copy
forbidden = {forbidden!r}
baseline = sorted(m for m in forbidden if m in sys.modules)
seen = set(baseline)
loaded = {{}}
for name in {modules!r}:
    importlib.import_module(name)
    loaded[name] = sorted(m for m in forbidden if m in sys.modules and m not in seen)  # new ones
    seen.update(loaded[name])
print(json.dumps({{"baseline": baseline, "loaded": loaded}}))
"""


def core_modules() -> list[str]:
    """Every module of ``lakesync_platform.core`` (found on disk, so new ones are covered)."""
    found = ["lakesync_platform.core"]
    for info in pkgutil.walk_packages(lakesync_platform.core.__path__, "lakesync_platform.core."):
        found.append(info.name)
    return found


def test_core_has_the_expected_modules() -> None:
    names = set(core_modules())
    for module in (
        "ids",
        "extract",
        "sync_rules",
        "schema",
        "auth",
        "proto",
        "actions",
        "hlc",
        "merge",
    ):
        assert f"lakesync_platform.core.{module}" in names


def test_core_imports_no_io_library() -> None:
    modules = core_modules()
    probe = _PROBE.format(
        forbidden=FORBIDDEN_IN_CORE, modules=modules, source_root=str(ROOT.parent)
    )
    # -I: isolated mode, so no user site or environment variable can pre-load anything.
    result = subprocess.run(
        [sys.executable, "-I", "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT.parent,
        timeout=120,
    )
    report = json.loads(result.stdout)
    assert report["baseline"] == [], f"the bare interpreter already loaded {report['baseline']}"
    offenders = {name: mods for name, mods in report["loaded"].items() if mods}
    assert offenders == {}, f"core modules pulled in forbidden libraries: {offenders}"
    assert set(report["loaded"]) == set(modules)


def _imported_names(tree: ast.AST) -> list[tuple[int, str]]:
    names: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append((node.lineno, node.module))
        elif (
            isinstance(node, ast.Call)
            and (
                (isinstance(node.func, ast.Name) and node.func.id == "__import__")
                or (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
            )
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names.append((node.lineno, node.args[0].value))
    return names


def test_package_never_imports_apps_or_their_frameworks() -> None:
    files = sorted(ROOT.rglob("*.py"))
    assert files, "no sources found"
    violations = []
    for path in files:
        tree = ast.parse(path.read_text("utf-8"), str(path))
        allowed = LAZY_EDGE_IMPORTS.get(path.relative_to(ROOT).as_posix(), ())
        lazy = _function_level_lines(tree)
        violations += [
            f"{path.relative_to(ROOT.parent)}:{line}: {name}"
            for line, name in _imported_names(tree)
            if name.split(".")[0] in FORBIDDEN_IN_PACKAGE
            and not (name.split(".")[0] in allowed and line in lazy)
        ]
    assert violations == []


def _function_level_lines(tree: ast.AST) -> set[int]:
    """Lines of the import statements inside function bodies."""
    return {
        node.lineno
        for fn in ast.walk(tree)
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
        for node in ast.walk(fn)
        if isinstance(node, (ast.Import, ast.ImportFrom))
    }


def test_import_scanner_sees_every_form() -> None:
    source = (
        "import dagster.core\n"
        "from litestar import Litestar\n"
        "from . import gateway\n"  # relative: lakesync_platform's own module, allowed
        "import importlib\n"
        "importlib.import_module('sensors.jobs')\n"
        "__import__('assets')\n"
    )
    found = [name for _, name in _imported_names(ast.parse(source))]
    assert found == ["dagster.core", "litestar", "importlib", "sensors.jobs", "assets"]
