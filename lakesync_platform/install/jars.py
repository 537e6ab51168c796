"""The local jar folder, filled from Maven Central with ``mvn`` as a JVM project would fill it.

``java/pom.xml`` (shipped in the package) is the one list of the jars the Spark session loads
on top of pyspark's own — the Iceberg Spark runtime, the Iceberg AWS bundle, Hadoop's S3A with
its AWS SDK, and the SQLite, PostgreSQL and MariaDB JDBC drivers — each pinned, with wildcard
exclusions so that Maven adds nothing the file does not name. :func:`ensure_maven_jars` runs::

    mvn -q -f <pom> dependency:copy-dependencies -DoutputDirectory=<jar folder>

unless the folder already holds every pinned jar (offline machines keep working once filled).
Maven's own settings apply (``~/.m2``, ``MAVEN_OPTS``, mirrors in ``settings.xml``).
:func:`ensure_jars` adds the lake's local filesystem jar
(:mod:`~lakesync_platform.install.local_fs`).
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from . import SetupError
from .local_fs import ensure_local_fs_jar

__all__ = [
    "POM",
    "JarSet",
    "MavenJar",
    "ensure_jars",
    "ensure_maven_jars",
    "maven_command",
    "missing_jars",
    "pinned_jars",
    "spark_packages",
]

POM = Path(__file__).resolve().parent / "java" / "pom.xml"
"""The Maven descriptor that pins every jar of the folder."""
_NS = {"m": "http://maven.apache.org/POM/4.0.0"}


@dataclass(frozen=True, slots=True)
class MavenJar:
    """One pinned artifact of :data:`POM`."""

    group: str
    artifact: str
    version: str

    @property
    def file_name(self) -> str:
        """The name ``dependency:copy-dependencies`` gives its jar."""
        return f"{self.artifact}-{self.version}.jar"

    @property
    def coordinate(self) -> str:
        """``group:artifact:version``, as ``spark.jars.packages`` takes it."""
        return f"{self.group}:{self.artifact}:{self.version}"


@cache
def pinned_jars(pom: Path = POM) -> tuple[MavenJar, ...]:
    """The artifacts ``pom`` pins, in its order (``${property}`` versions resolved)."""
    root = ET.parse(pom).getroot()
    props = {el.tag.split("}")[-1]: (el.text or "") for el in root.findall("m:properties/*", _NS)}
    jars = []
    for dep in root.findall("m:dependencies/m:dependency", _NS):
        version = dep.findtext("m:version", "", _NS)
        if version.startswith("${"):
            version = props[version[2:-1]]
        jars.append(
            MavenJar(
                dep.findtext("m:groupId", "", _NS), dep.findtext("m:artifactId", "", _NS), version
            )
        )
    return tuple(jars)


def spark_packages(pom: Path = POM) -> str:
    """The same jars as Maven coordinates for ``spark.jars.packages`` (``LAKESYNC_SPARK_PACKAGES``).

    Spark resolves these itself (with Ivy, transitively) instead of reading the jar folder.
    """
    return ",".join(jar.coordinate for jar in pinned_jars(pom))


@dataclass(frozen=True, slots=True)
class JarSet:
    """The jars a session needs, all inside one folder."""

    folder: Path
    maven: tuple[Path, ...]
    """The pinned jars of :data:`POM`, in its order."""
    local_fs: Path | None = None
    """The fork-free local filesystem (``None`` where no JDK could compile it)."""

    @property
    def all(self) -> tuple[Path, ...]:
        """Every jar, in the order ``spark.jars`` gets them."""
        extra = (self.local_fs,) if self.local_fs is not None else ()
        return (*self.maven, *extra)


def maven_command(jar_dir: Path, pom: Path = POM) -> list[str]:
    """The ``mvn`` command that copies the pinned jars into ``jar_dir``."""
    return [
        "mvn",
        "-q",
        "-B",
        "-f",
        str(pom),
        "dependency:copy-dependencies",
        f"-DoutputDirectory={jar_dir}",
    ]


def missing_jars(jar_dir: Path, pom: Path = POM) -> tuple[MavenJar, ...]:
    """The pinned jars not (yet) in ``jar_dir``."""
    return tuple(jar for jar in pinned_jars(pom) if not (jar_dir / jar.file_name).is_file())


def ensure_maven_jars(
    jar_dir: Path, env: Mapping[str, str], pom: Path = POM
) -> tuple[tuple[Path, ...], bool]:
    """Fill ``jar_dir`` with the jars ``pom`` pins; return them and whether ``mvn`` ran.

    Nothing runs when every pinned jar is already there. Otherwise ``mvn`` (looked up on
    ``env``'s ``PATH`` and run in ``env``) copies them into a scratch folder inside ``jar_dir``,
    and each jar is renamed into place, so an interrupted download never leaves a truncated jar
    under a pinned name. Raises :class:`SetupError` naming the command when ``mvn`` is missing
    or fails.
    """
    wanted = [jar_dir / jar.file_name for jar in pinned_jars(pom)]
    if not missing_jars(jar_dir, pom):
        return tuple(wanted), False
    command = maven_command(jar_dir, pom)
    mvn = shutil.which("mvn", path=env.get("PATH"))
    if mvn is None:
        raise SetupError(
            f"mvn not found: install Maven (apt-get install maven), then run "
            f"`{shlex.join(command)}` — or set LAKESYNC_SPARK_PACKAGES to let Spark fetch "
            "the jars itself"
        )
    jar_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".mvn-", dir=jar_dir) as scratch:
        result = subprocess.run(
            [mvn, *maven_command(Path(scratch), pom)[1:]],
            capture_output=True,
            text=True,
            env=dict(env),
            check=False,
        )
        if result.returncode != 0:
            output = (result.stdout + result.stderr).strip()[-2000:]
            raise SetupError(f"`{shlex.join(command)}` failed (exit {result.returncode}): {output}")
        for path in wanted:
            fetched = Path(scratch) / path.name
            if not fetched.is_file():
                raise SetupError(f"`{shlex.join(command)}` did not produce {path.name}")
            fetched.replace(path)
    return tuple(wanted), True


def ensure_jars(jar_dir: Path, env: Mapping[str, str]) -> JarSet:
    """The pinned jars (:func:`ensure_maven_jars`) and the lake's local filesystem jar in
    ``jar_dir``; idempotent. ``env`` is the process environment tools are looked up in."""
    maven, _ = ensure_maven_jars(jar_dir, env)
    return JarSet(jar_dir, maven, ensure_local_fs_jar(jar_dir, env))
