#!/usr/bin/env bash
# Prepare a fresh machine: system packages, PostgreSQL + MariaDB running, the venv with every
# Python dependency, and the Spark/Iceberg jars. Idempotent; safe to run before every command.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\033[1m[setup]\033[0m %s\n' "$*" >&2; }
# Every step that can take more than a few seconds says when it starts and how long it took.
step() { step_name=$1; step_started=$SECONDS; log "$1 …"; }
step_done() { log "$step_name: done in $((SECONDS - step_started))s"; }
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"

# --- system packages (Debian) -------------------------------------------------------------
pkgs=(postgresql mariadb-server)
# HAProxy in front of several gateways (deploy/haproxy.cfg; tests/gateway/test_balancer.py).
pkgs+=(haproxy)
# A JDK, not only a runtime: `lakesync setup` compiles the lake's fork-free local filesystem.
command -v javac >/dev/null 2>&1 || pkgs+=(openjdk-17-jdk-headless)
# Maven fetches the Spark jars (lakesync_platform/install/java/pom.xml) from Maven Central.
command -v mvn >/dev/null 2>&1 || pkgs+=(maven)
need=()
for pkg in "${pkgs[@]}"; do dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg"); done
if [ ${#need[@]} -gt 0 ]; then
  step "apt-get install ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  # One line per package unpacked and set up (apt's own progress, without the terminal bar).
  $SUDO apt-get install -y -q -o Dpkg::Use-Pty=0 "${need[@]}" | sed -n -E '/^(Unpacking|Setting up) /p' >&2
  # The tests start HAProxy themselves; a system service the package may have started is not ours.
  if [[ " ${need[*]} " == *" haproxy "* ]]; then $SUDO service haproxy stop >/dev/null 2>&1 || true; fi
  step_done
fi

# --- services -----------------------------------------------------------------------------
if ! pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; then
  log "starting PostgreSQL"
  ver=$(ls /etc/postgresql | sort -V | tail -1)
  $SUDO pg_ctlcluster --skip-systemctl-redirect "$ver" main start || true
fi
# MariaDB readiness is `mysqladmin ping`: 0 while the server runs, even when the login is refused
# (a fresh install lets root in only through the unix socket, so a TCP login fails until the
# grant below has run).
mariadb_up() { mysqladmin -h 127.0.0.1 -uroot ping >/dev/null 2>&1; }
if ! mariadb_up; then
  log "starting MariaDB"
  $SUDO mkdir -p /run/mysqld && $SUDO chown mysql:mysql /run/mysqld 2>/dev/null || true
  $SUDO start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd -- --user=mysql || true
fi
if ! { pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null && mariadb_up; }; then
  step "waiting for PostgreSQL and MariaDB"
  for _ in $(seq 1 60); do
    pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null && mariadb_up && break
    sleep 1
  done
  step_done
fi
pg_isready -h 127.0.0.1 -p 5432 -q || { log "PostgreSQL is not answering on 127.0.0.1:5432"; exit 1; }
mariadb_up || { log "MariaDB is not answering on 127.0.0.1:3306"; exit 1; }
# Local development/test access: trust auth for postgres on loopback, the `test` databases.
if ! psql -h 127.0.0.1 -U postgres -tAc "select 1" >/dev/null 2>&1; then
  # A freshly installed cluster asks for passwords on TCP: trust loopback for local development.
  hba=$(ls /etc/postgresql/*/main/pg_hba.conf | sort -V | tail -1)
  log "enabling trust auth on loopback in $hba"
  $SUDO sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust' "$hba"
  $SUDO pg_ctlcluster --skip-systemctl-redirect "$(basename "$(dirname "$(dirname "$hba")")")" main reload
  sleep 1
fi
psql -h 127.0.0.1 -U postgres -tAc "select 1" >/dev/null || \
  { log "cannot connect to PostgreSQL as postgres on 127.0.0.1"; exit 1; }
if ! mysql -h 127.0.0.1 -uroot -e "select 1" >/dev/null 2>&1; then
  # A fresh MariaDB lets root in only through the unix socket: allow an empty TCP password too.
  log "allowing root with an empty password on 127.0.0.1 (local development)"
  $SUDO mysql -uroot -e "ALTER USER root@localhost IDENTIFIED VIA mysql_native_password USING PASSWORD('') OR unix_socket; FLUSH PRIVILEGES;"
fi
mysql -h 127.0.0.1 -uroot -e "select 1" >/dev/null || \
  { log "cannot log in to MariaDB as root on 127.0.0.1"; exit 1; }
mysql -h 127.0.0.1 -uroot -e "CREATE DATABASE IF NOT EXISTS test" >/dev/null

# --- Python -------------------------------------------------------------------------------
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
if [ ! -x .venv/bin/python ]; then
  step "creating .venv with $PY"
  "$PY" -m venv .venv
  step_done
fi
stamp=.venv/.lakesync-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  step "pip install -e .[pipeline,dev] (a few minutes on a fresh machine)"
  # pip's own progress (a line per package collected, then the summary); pipefail keeps its status.
  .venv/bin/pip install --progress-bar off --upgrade pip | sed '/^Requirement already satisfied/d' >&2
  .venv/bin/pip install --progress-bar off -e ".[pipeline,dev]" | sed '/^Requirement already satisfied/d' >&2
  step_done
  touch "$stamp"
fi

# --- BigQuery emulator (tests) -------------------------------------------------------------
# In a venv of its own inside .venv: its pins (grpcio-tools < 1.81) conflict with the project's.
bq=.venv/bqemulator
if [ ! -x "$bq/bin/bqemulator" ] || [ scripts/bqemulator-requirements.txt -nt "$bq/.installed" ]; then
  step "installing the BigQuery emulator into $bq (tests)"
  "$PY" -m venv "$bq"
  "$bq/bin/pip" install --progress-bar off -r scripts/bqemulator-requirements.txt | sed -n -E '/^(Collecting|Successfully) /p' >&2
  touch "$bq/.installed"
  step_done
fi
# DuckDB would download its spatial and avro extensions when the emulator starts: install the
# copies the pinned wheels ship into DuckDB's extension folder (~/.duckdb) instead.
"$bq/bin/python" - <<'PY'
import importlib, pathlib, duckdb
con = duckdb.connect()
have = {n for n, i in con.execute("SELECT extension_name, installed FROM duckdb_extensions()").fetchall() if i}
for name in ("spatial", "avro"):
    if name not in have:
        folder = pathlib.Path(importlib.import_module(f"duckdb_extension_{name}").__file__).parent
        con.execute(f"INSTALL '{next(folder.glob(f'extensions/v*/{name}.duckdb_extension'))}'")
PY

# --- Spark + Iceberg jars (mvn, from the package's pom.xml) ---------------------------------
if .venv/bin/lakesync --help 2>/dev/null | grep -q "^  setup"; then
  step "lakesync setup"
  .venv/bin/lakesync setup
  step_done
fi
log "ready in ${SECONDS}s"
