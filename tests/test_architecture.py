"""The layering rules of ARCHITECTURE.md §2, enforced.

* ``lakesync_platform.core`` is pure: importing any of its modules loads no I/O, network,
  database, concurrency or framework library; it imports the standard library, msgspec and the
  libraries of ``CORE_LIBRARIES``, none of which does I/O.
* ``lakesync_platform`` never imports the applications built on it (``gateway``, ``assets``,
  ``sensors``) nor their frameworks (Litestar, Dagster).
"""

from __future__ import annotations

import ast
import json
import pkgutil
import re
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
# The stdlib modules core uses (json, hashlib, binascii, re, struct, unicodedata, dataclasses,
# functools) and msgspec load none of the above. Note that `_thread` (the C module) is not
# `threading` and is loaded by the interpreter itself.
CORE_LIBRARIES: dict[str, tuple[str, ...]] = {
    # The protobuf runtime (core/proto.py): its descriptor modules guard lazily built descriptor
    # state with a threading.Lock; it starts no thread and does no I/O.
    "google.protobuf.descriptor": ("threading",),
    # JWT signing and verification (core/auth.py): pure computation over bytes. Its dependency
    # cryptography imports x509.general_name, which imports the stdlib email.utils (parseaddr),
    # which imports socket; no network code is loaded or run (python -X importtime). PyJWT was
    # not taken for this: `import jwt` loads its JWKS HTTP client (urllib.request, http, ssl,
    # socket, threading).
    "joserfc.jwt": ("socket",),
    # Cron expressions (core/connectors.py checks a connector's schedule): croniter imports the
    # stdlib platform module, which imports subprocess to read the OS version on request; no
    # process is started.
    "croniter": ("subprocess",),
}
"""Third-party libraries core may import, with the forbidden modules each loads by itself (and
why that is harmless); anything further a core module loads is an offence."""

FORBIDDEN_IN_PACKAGE = ("gateway", "assets", "sensors", "litestar", "dagster", "prometheus_client")
"""The package never loads the edges, their frameworks, or the gateway's metrics library (the WAL
reports group commits to an observer the gateway passes in)."""
LAZY_EDGE_IMPORTS = {"cli/gateway.py": ("gateway",)}
"""The CLI is a process edge like the gateway: its ``gateway`` command may load the app, but only
inside the command (never when the package is imported)."""

_PROBE = """
import importlib, json, sys
sys.path.insert(0, {source_root!r})  # the checkout under test, not an installed copy
forbidden = {forbidden!r}
baseline = sorted(m for m in forbidden if m in sys.modules)
seen = set(baseline)
libraries = {{}}
for name in {libraries!r}:
    importlib.import_module(name)
    libraries[name] = sorted(m for m in forbidden if m in sys.modules and m not in seen)
    seen.update(libraries[name])
loaded = {{}}
for name in {modules!r}:
    importlib.import_module(name)
    loaded[name] = sorted(m for m in forbidden if m in sys.modules and m not in seen)  # new ones
    seen.update(loaded[name])
print(json.dumps({{"baseline": baseline, "libraries": libraries, "loaded": loaded}}))
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
        forbidden=FORBIDDEN_IN_CORE,
        libraries=list(CORE_LIBRARIES),
        modules=modules,
        source_root=str(ROOT.parent),
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
    assert report["libraries"] == {lib: sorted(m) for lib, m in CORE_LIBRARIES.items()}
    offenders = {name: mods for name, mods in report["loaded"].items() if mods}
    assert offenders == {}, f"core modules pulled in forbidden libraries: {offenders}"
    assert set(report["loaded"]) == set(modules)


def test_core_imports_only_the_stdlib_and_its_libraries() -> None:
    """The probe above cannot see a core module import what a library loaded already (``socket``
    after joserfc): core's sources are checked too."""
    packages = {"lakesync_platform", "msgspec"} | {lib.rsplit(".", 1)[0] for lib in CORE_LIBRARIES}

    def allowed(name: str) -> bool:
        if any(name == f or name.startswith(f + ".") for f in FORBIDDEN_IN_CORE):
            return False
        in_package = any(name == p or name.startswith(p + ".") for p in packages)
        return in_package or name.split(".")[0] in sys.stdlib_module_names

    violations = [
        f"{path.relative_to(ROOT.parent)}:{line}: {name}"
        for path in sorted((ROOT / "core").rglob("*.py"))
        for line, name in _imported_names(ast.parse(path.read_text("utf-8")))
        if not allowed(name)
    ]
    assert violations == []


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


# ---------------------------------------------------------------- rooms of the package

ROOM_IMPORTS: dict[str, set[str]] = {
    "core": set(),
    "sync": {"core"},
    "wal": {"core"},
    "client": {"core"},
    "adapters": {"core"},
    "connectors": {"core"},
    "install": {"core"},
    "declarations": {"core"},
    "settings": set(),
    "testing": {"core", "settings"},
    "fakes": set(),
    "testing_cluster": {"testing"},
    "spark": {"core", "adapters", "install", "wal.export"},
    "pipeline": {
        "core",
        "adapters",
        "connectors",
        "declarations",
        "settings",
        "spark",
        "sync",
        "wal",
    },
    "cli": {
        *("core", "install", "pipeline", "settings", "sync", "wal", "testing", "declarations"),
        "adapters",  # lakesync doctor reaches the declared destinations
    },
}
"""What each room of ``lakesync_platform`` may import of the others (ARCHITECTURE.md §2): the
model is pure; the sync engine and the WAL meet only in the model (``core.wal``: the port and its
records); the client never reaches the server; Spark reads the WAL only through the export query
beside its tables; the pipeline composes; the CLI is the edge that may use everything."""


def _room_of(path: Path) -> str:
    rel = path.relative_to(ROOT)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _package_targets(path: Path, tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, "room[.module]")`` for every import of ``lakesync_platform`` in ``path``."""
    rel = path.relative_to(ROOT)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level > 0:
            base = list(rel.parts[:-1])
            base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
            parts = base + (node.module.split(".") if node.module else [])
            if parts:
                found.append((node.lineno, ".".join(parts[:2])))
            else:  # ``from . import x`` at the package root
                found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
            "lakesync_platform."
        ):
            found.append((node.lineno, ".".join(node.module.split(".")[1:3])))
        elif isinstance(node, ast.Import):
            found += [
                (node.lineno, ".".join(a.name.split(".")[1:3]))
                for a in node.names
                if a.name.startswith("lakesync_platform.")
            ]
    return found


def test_each_room_imports_only_what_it_may() -> None:
    rooms = {_room_of(p) for p in ROOT.rglob("*.py") if p.name != "__init__.py" or p.parent != ROOT}
    unknown = rooms - set(ROOM_IMPORTS) - {"__init__"}
    assert unknown == set(), f"rooms without a rule (add them to ROOM_IMPORTS): {unknown}"
    violations = []
    for path in sorted(ROOT.rglob("*.py")):
        room = _room_of(path)
        if room == "__init__":
            continue
        allowed = ROOM_IMPORTS[room] | {room}
        for line, target in _package_targets(path, ast.parse(path.read_text("utf-8"))):
            if target.split(".")[0] not in allowed and target not in allowed:
                violations.append(f"{path.relative_to(ROOT.parent)}:{line}: {room} -> {target}")
    assert violations == []


def test_room_scanner_resolves_relative_and_absolute_imports(tmp_path: Path) -> None:
    sample = ROOT / "spark" / "example.py"
    tree = ast.parse(
        "from ..wal.export import q\n"
        "from ..core import delta\n"
        "from . import layout\n"
        "import lakesync_platform.sync.plan\n"
        "from lakesync_platform.settings import DataLayout\n"
    )
    assert [t for _, t in _package_targets(sample, tree)] == [
        "wal.export",
        "core",
        "spark",
        "sync.plan",
        "settings",
    ]


# ---------------------------------------------------------------- no launching by string

_SOURCE_DIRS = ("lakesync_platform", "gateway", "assets", "sensors", "resources", "benchmarks")
_IMPORT_STRING = re.compile(r"^(lakesync_platform|gateway|assets|sensors|resources)(\.\w+)*:\w+$")


def _launch_by_string(tree: ast.AST) -> list[tuple[int, str]]:
    """Import strings of our packages (``"gateway.asgi:app"``) and server calls (``run``,
    ``Config``) whose app is given as a string."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if _IMPORT_STRING.match(node.value):
                found.append((node.lineno, node.value))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("run", "Config")
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "uvicorn"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append((node.lineno, f"uvicorn.{node.func.attr}({node.args[0].value!r})"))
    return found


def test_nothing_is_launched_by_import_string() -> None:
    """Apps are built by calling their factory with a settings object (``create_app(settings)``),
    never named as ``"module:attr"`` for a server to import with settings in the environment."""
    violations = [
        f"{path.relative_to(ROOT.parent)}:{line}: {what}"
        for folder in _SOURCE_DIRS
        for path in sorted((ROOT.parent / folder).rglob("*.py"))
        for line, what in _launch_by_string(ast.parse(path.read_text("utf-8")))
    ]
    assert violations == []


def test_launch_scanner_sees_import_strings_and_factories() -> None:
    tree = ast.parse(
        'uvicorn.run("gateway.asgi:app", factory=True)\n'
        'uvicorn.Config("app", port=1)\n'
        "uvicorn.Config(functools.partial(make, settings), factory=True)\n"
        'print("a:b", "x.y")\n'
    )
    assert sorted(w for _, w in _launch_by_string(tree)) == [
        "gateway.asgi:app",
        "uvicorn.Config('app')",
        "uvicorn.run('gateway.asgi:app')",
    ]


# ---------------------------------------------------------------- the applications


def _top_level_imports(folder: str) -> dict[str, set[str]]:
    """Top-level package names each module of ``folder`` (a sibling of the package) imports."""
    return {
        path.name: {name.split(".")[0] for _, name in _imported_names(ast.parse(path.read_text()))}
        for path in sorted((ROOT.parent / folder).rglob("*.py"))
    }


def test_sensors_and_assets_share_through_resources_not_each_other() -> None:
    assert all("assets" not in names for names in _top_level_imports("sensors").values())
    # Only the code location's Definitions composes the two.
    composing = {f for f, names in _top_level_imports("assets").items() if "sensors" in names}
    assert composing == {"definitions.py"}
    for names in _top_level_imports("resources").values():
        assert not {"assets", "sensors", "gateway"} & names


def test_gateway_never_imports_the_pipeline_apps() -> None:
    for module, names in _top_level_imports("gateway").items():
        assert not {"assets", "sensors", "resources", "dagster", "pyspark"} & names, module


def test_no_module_imports_another_modules_private_names() -> None:
    """What two modules share has a public name in a home of its own (the CLI's progress lines
    in ``cli/progress.py``, not ``run._Progress``); private modules (``client/_outbox.py``) are
    fine, private names in them are not."""
    violations = [
        f"{path.relative_to(ROOT.parent)}:{node.lineno}: {alias.name} from {node.module}"
        for folder in ("lakesync_platform", "gateway", "assets", "sensors", "resources")
        for path in sorted((ROOT.parent / folder).rglob("*.py"))
        if "_pb" not in path.parts  # protoc's output
        for node in ast.walk(ast.parse(path.read_text("utf-8")))
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.name.startswith("_") and not alias.name.startswith("__")
    ]
    assert violations == []
