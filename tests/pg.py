"""A throwaway PostgreSQL cluster for tests and benchmarks: `initdb` in a temporary directory, run as a
non-root user, listening on 127.0.0.1 on a free port, removed when stopped.

The server binaries come from Debian's `postgresql` package (scripts/ensure_postgres.sh installs it; `make
test` runs that). Without them this raises, loudly: the store suite is meant to run against PostgreSQL.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

SUPERUSER = "tether"
# A test cluster is thrown away: it needs no crash safety of its own (the store's commits still wait for
# the server, which is what a killed client process can observe).
SPEED_SETTINGS = ("fsync=off", "full_page_writes=off", "max_connections=300")


class PostgresUnavailable(RuntimeError):
    pass


def bin_dir() -> Path:
    """The newest installed server's binaries (Debian keeps them under /usr/lib/postgresql/N/bin)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb:
        return Path(initdb).parent
    raise PostgresUnavailable(
        "PostgreSQL server binaries (initdb, pg_ctl) are not installed: run "
        "`bash scripts/ensure_postgres.sh` (`make test` does), or install Debian's postgresql package"
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _as_owner() -> tuple[list[str], int | None]:
    """The command prefix that runs the server as a non-root user, and that user's uid (None: ourselves)."""
    if os.geteuid() != 0:
        return [], None
    try:
        uid = pwd.getpwnam("postgres").pw_uid
    except KeyError:
        raise PostgresUnavailable(
            "running as root, and there is no 'postgres' user to run the server as: install Debian's "
            "postgresql package (it creates the user), or run the tests as an ordinary user"
        ) from None
    return ["runuser", "-u", "postgres", "--"], uid


@dataclass
class Cluster:
    root: Path
    port: int
    bin: Path
    prefix: list[str]

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def psql(self, sql: str, database: str = "postgres") -> str:
        done = subprocess.run(
            [
                str(self.bin / "psql"),
                "-X",
                "-q",
                "-At",
                "-v",
                "ON_ERROR_STOP=1",
                "-c",
                sql,
                self.url(database),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if done.returncode != 0:
            raise RuntimeError(f"psql failed: {done.stderr.strip()}")
        return done.stdout

    def create_database(self, name: str | None = None) -> str:
        """A new, empty database; returns its URL."""
        name = name or f"t_{uuid.uuid4().hex[:12]}"
        self.psql(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def drop_database(self, url: str) -> None:
        name = url.rsplit("/", 1)[1]
        self.psql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def stop(self) -> None:
        subprocess.run(
            [
                *self.prefix,
                str(self.bin / "pg_ctl"),
                "stop",
                "-D",
                str(self.root / "data"),
                "-m",
                "immediate",
            ],
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(self.root, ignore_errors=True)


def start_cluster() -> Cluster:
    binaries = bin_dir()
    prefix, uid = _as_owner()
    root = Path(tempfile.mkdtemp(prefix="tether-pg-"))
    if uid is not None:
        os.chown(root, uid, -1)
    data, sockets = root / "data", root / "sockets"
    run = [*prefix, str(binaries / "initdb"), "-D", str(data), "-U", SUPERUSER, "--auth=trust", "-E", "UTF8"]
    done = subprocess.run([*run, "--no-sync", "--locale=C"], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        raise PostgresUnavailable(f"initdb failed: {done.stderr.strip() or done.stdout.strip()}")
    subprocess.run([*prefix, "mkdir", str(sockets)], check=True, timeout=30)
    for _ in range(5):
        port = _free_port()
        settings = " ".join(f"-c {setting}" for setting in SPEED_SETTINGS)
        options = f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 {settings}"
        log = root / "server.log"
        start = [*prefix, str(binaries / "pg_ctl"), "start", "-w", "-t", "60", "-D", str(data), "-o", options]
        done = subprocess.run([*start, "-l", str(log)], capture_output=True, text=True, timeout=90)
        if done.returncode == 0:
            return Cluster(root, port, binaries, prefix)
    detail = log.read_text(errors="replace")[-2000:] if log.exists() else done.stderr
    shutil.rmtree(root, ignore_errors=True)
    raise PostgresUnavailable(f"the test PostgreSQL server did not start: {detail.strip()}")


@contextmanager
def cluster() -> Iterator[Cluster]:
    running = start_cluster()
    try:
        yield running
    finally:
        running.stop()
