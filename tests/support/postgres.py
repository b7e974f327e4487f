"""A throwaway PostgreSQL server for tests: ``initdb`` into a temp dir, ``pg_ctl start`` on
a free port (TCP on 127.0.0.1 only, trust authentication), one fresh database per test, and
``pg_ctl stop -m immediate`` plus the temp dir removed at the end. The ``postgres_server``
fixture (one per session, started only when a test asks for it) skips, saying why, where
PostgreSQL or asyncpg is not installed.

Debian's ``postgresql`` package (installed by ``scripts/test.sh``) keeps its binaries in
``/usr/lib/postgresql/<major>/bin``, off the PATH; both places are searched. ``initdb``
refuses to run as root: as root, the server runs as the package's ``postgres`` user.
"""

from __future__ import annotations

import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

__all__ = ["PostgresServer", "find_postgres_bin", "postgres_server"]


def find_postgres_bin(name: str) -> str | None:
    """The newest ``name`` (initdb, pg_ctl) on the PATH or in Debian's versioned dirs."""
    found = shutil.which(name)
    if found:
        return found
    versioned = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"),
                       key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    return versioned[-1] if versioned else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """One server in its own temp dir; ``dsn(db)`` names a database on it."""

    def __init__(self) -> None:
        initdb, pg_ctl = find_postgres_bin("initdb"), find_postgres_bin("pg_ctl")
        if initdb is None or pg_ctl is None:
            raise FileNotFoundError("PostgreSQL's initdb/pg_ctl not found (Debian: apt-get install postgresql; "
                                    "scripts/test.sh does it)")
        self.initdb, self.pg_ctl = initdb, pg_ctl
        self.root = Path(tempfile.mkdtemp(prefix="argus-pg-"))
        self.data, self.log = self.root / "data", self.root / "server.log"
        self.port = _free_port()
        self._as: list[str] = []
        if os.geteuid() == 0:  # initdb will not run as root
            user = pwd.getpwnam("postgres")
            os.chown(self.root, user.pw_uid, user.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]
        self._names = itertools.count(1)
        self.started = False

    def _run(self, *args: str) -> None:
        subprocess.run([*self._as, *args], check=True, capture_output=True, timeout=120)

    def start(self) -> "PostgresServer":
        self._run(self.initdb, "-D", str(self.data), "-U", "postgres", "--auth=trust", "--encoding=UTF8",
                  "--no-instructions")
        self.resume()
        return self

    def resume(self) -> None:
        """Start the server (again, after ``pause``), on the same port and data."""
        self._run(self.pg_ctl, "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "-o",
                  f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c max_connections=100", "start")
        self.started = True

    def pause(self) -> None:
        """Stop the server as an outage would (connections cut), keeping its data."""
        self._run(self.pg_ctl, "-D", str(self.data), "-m", "immediate", "-w", "stop")
        self.started = False

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    async def new_database(self) -> str:
        """A fresh, empty database; its DSN."""
        import asyncpg

        name = f"t{next(self._names)}"
        conn = await asyncpg.connect(self.dsn())
        try:
            await conn.execute(f"CREATE DATABASE {name}")
        finally:
            await conn.close()
        return self.dsn(name)

    def stop(self) -> None:
        try:
            if self.started:
                self._run(self.pg_ctl, "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server() -> "Iterator[PostgresServer]":
    pytest.importorskip("asyncpg", reason="asyncpg is not installed: pip install -e '.[test]'")
    if find_postgres_bin("initdb") is None:
        pytest.skip("PostgreSQL is not installed (Debian: apt-get install postgresql; scripts/test.sh does it)")
    server = PostgresServer()
    try:
        yield server.start()
    finally:
        server.stop()
