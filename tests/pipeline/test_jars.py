"""The jar folder's Maven descriptor: what it pins, and how ``mvn`` failures read."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest

from lakesync_platform.install import SetupError, package_dir
from lakesync_platform.install.jars import (
    POM,
    ensure_maven_jars,
    maven_command,
    pinned_jars,
    spark_packages,
)


def _artifact_and_version(jar_name: str) -> tuple[str, str]:
    match = re.fullmatch(r"(.+?)-(\d[\w.-]*)\.jar", jar_name)
    assert match, jar_name
    return match.group(1), match.group(2)


def test_the_pom_matches_pysparks_hadoop_and_doubles_none_of_its_jars() -> None:
    shipped = dict(
        _artifact_and_version(p.name) for p in (package_dir("pyspark") / "jars").glob("*.jar")
    )
    pinned = {jar.artifact: jar.version for jar in pinned_jars()}
    assert not set(pinned) & set(shipped)
    assert pinned["hadoop-aws"] == shipped["hadoop-client-api"] == "3.3.4"
    assert pinned["iceberg-spark-runtime-3.5_2.12"] == pinned["iceberg-aws-bundle"]
    assert pinned["iceberg-spark-runtime-3.5_2.12"].startswith("1.11.")
    assert {"sqlite-jdbc", "postgresql", "mariadb-java-client", "aws-java-sdk-bundle"} <= set(
        pinned
    )
    assert spark_packages().split(",") == [jar.coordinate for jar in pinned_jars()]
    # Every dependency excludes its transitive ones: the folder is exactly this list.
    assert POM.read_text().count("<artifactId>*</artifactId>") == len(pinned)


def test_the_docs_give_the_same_pins_as_packages() -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "pipeline.md").read_text()
    assert f"LAKESYNC_SPARK_PACKAGES={spark_packages()}" in docs


def test_setup_without_mvn_names_the_command(tmp_path: Path) -> None:
    with pytest.raises(SetupError) as err:
        ensure_maven_jars(tmp_path / "jars", {"PATH": str(tmp_path)})
    assert "mvn not found" in err.value.message
    assert shlex.join(maven_command(tmp_path / "jars")) in err.value.message
    assert "LAKESYNC_SPARK_PACKAGES" in err.value.message
    assert not (tmp_path / "jars").exists()


def test_a_failing_mvn_is_a_clear_error_and_leaves_no_jar(tmp_path: Path) -> None:
    pom = tmp_path / "pom.xml"
    pom.write_text(
        POM.read_text().replace(
            "<artifactId>hadoop-aws</artifactId>",
            "<artifactId>no-such-artifact-lakesync</artifactId>",
        )
    )
    folder = tmp_path / "jars"
    with pytest.raises(SetupError) as err:
        ensure_maven_jars(folder, os.environ, pom)
    assert shlex.join(maven_command(folder, pom)) in err.value.message
    assert "no-such-artifact-lakesync" in err.value.message
    assert list(folder.iterdir()) == []  # the scratch folder is gone, nothing half-copied
