"""The local jar folder: the Iceberg runtime and the JDBC drivers, from PyPI and Debian alone.

1. ``iceberg-spark-runtime-3.5_2.12-1.10.2.jar`` is copied from the
   ``snowpark-connect-deps-iceberg`` wheel;
2. that repack lacks Iceberg's shaded Jackson, so ``iceberg-shaded-jackson.jar`` is rebuilt from
   pyspark's own Jackson 2.15.2 jars with Debian's ``jarjar``;
3. the SQLite, PostgreSQL and MariaDB JDBC drivers are copied from their Debian packages, which
   are ``apt-get install``-ed when missing;
4. the fork-free local filesystem is compiled where a JDK is present
   (:mod:`~lakesync_platform.install.local_fs`).

Every step is idempotent: a jar already in the folder is kept.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from . import SetupError, package_dir
from .debian import apt_install, dpkg_installed
from .jdk import find_java
from .local_fs import ensure_local_fs_jar

__all__ = [
    "APT_PACKAGES",
    "ICEBERG_RUNTIME_JAR",
    "JDBC_DRIVER_JARS",
    "SHADED_JACKSON_JAR",
    "JarSet",
    "ensure_jars",
]

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

_JACKSON_JARS = (
    "jackson-core-2.15.2.jar",
    "jackson-databind-2.15.2.jar",
    "jackson-annotations-2.15.2.jar",
    "jackson-datatype-jsr310-2.15.2.jar",
)
_JARJAR = Path("/usr/share/java/jarjar.jar")
_DEBIAN_JAVA = Path("/usr/share/java")


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


def _copy_if_missing(src: Path, dest: Path) -> Path:
    if not dest.exists():
        if not src.exists():
            raise SetupError(f"expected jar not found: {src}")
        tmp = dest.with_suffix(".tmp")
        shutil.copyfile(src, tmp)
        tmp.replace(dest)
    return dest


def _build_shaded_jackson(dest: Path, java: Path) -> None:
    jars = package_dir("pyspark") / "jars"
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


def ensure_jars(jar_dir: Path, env: Mapping[str, str], *, install_packages: bool = True) -> JarSet:
    """Fill ``jar_dir`` with the Iceberg runtime, shaded Jackson and JDBC drivers; idempotent.

    ``env`` is the process environment Java and the system tools are looked up (and run) in.
    ``install_packages=False`` fails instead of calling ``apt-get`` for missing Debian packages.
    """
    jar_dir.mkdir(parents=True, exist_ok=True)
    runtime = _copy_if_missing(
        package_dir("snowpark_connect_deps_iceberg") / "jars" / ICEBERG_RUNTIME_JAR,
        jar_dir / ICEBERG_RUNTIME_JAR,
    )
    needed_debs = [pkg for jar, pkg in JDBC_DRIVER_JARS.items() if not (jar_dir / jar).exists()]
    jackson = jar_dir / SHADED_JACKSON_JAR
    if not jackson.exists():
        needed_debs.append("libjarjar-java")
    if needed_debs:
        if install_packages:
            apt_install(needed_debs, env)
        else:
            missing = [p for p in needed_debs if not dpkg_installed(p)]
            if missing:
                raise SetupError(f"Debian packages missing: {' '.join(missing)}")
    drivers = tuple(_copy_if_missing(_DEBIAN_JAVA / jar, jar_dir / jar) for jar in JDBC_DRIVER_JARS)
    if not jackson.exists():
        _build_shaded_jackson(jackson, find_java(env).java)
    return JarSet(jar_dir, runtime, jackson, drivers, ensure_local_fs_jar(jar_dir, env))
