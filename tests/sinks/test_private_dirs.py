"""Data directories are their owner's only (0700): created so, and tightened when an older one is found.

The Kafka data dir is checked on a private broker in ``tests/fabricscope/test_config_security.py``;
the running store writer's files in ``tests/sinks/test_store_security.py``.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from infra.lab.netns import read_state, write_state
from sinks.clickhouse import ChdbStore


def _mode(p) -> int:  # noqa: ANN001
    return stat.S_IMODE(p.stat().st_mode)


def test_store_dir_is_created_and_tightened_to_0700(tmp_path):
    fresh = ChdbStore(tmp_path / "new" / "var" / "clickhouse")
    fresh.close()
    for d in (tmp_path / "new", tmp_path / "new" / "var", tmp_path / "new" / "var" / "clickhouse"):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    old = tmp_path / "old"
    old.mkdir(mode=0o755)
    os.chmod(old, 0o755)
    ChdbStore(old).close()
    assert stat.S_IMODE(old.stat().st_mode) == 0o700


def test_lab_state_dir_is_created_and_tightened_to_0700(tmp_path):
    write_state(tmp_path / "var" / "lab", {"processes": {}})
    assert _mode(tmp_path / "var" / "lab") == 0o700
    old = tmp_path / "old-lab"
    old.mkdir()
    os.chmod(old, 0o755)
    write_state(old, {"processes": {"h1": {"pid": 1}}})
    assert _mode(old) == 0o700
    assert read_state(old) == {"processes": {"h1": {"pid": 1}}}


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("runuser"), reason="needs root to act as another user")
def test_another_local_user_can_read_neither_the_store_nor_the_token():
    """As `nobody`, in a directory every user may enter: the store, its token and its endpoint socket are
    closed; the parent directory is open (so the refusals come from the modes set here)."""
    from sinks.query_endpoint import serve, socket_file, stop_serving, token_file

    base = Path(tempfile.mkdtemp(dir="/tmp"))
    try:
        os.chmod(base, 0o755)
        path = base / "var" / "clickhouse"
        store = ChdbStore(path)
        server = serve(store, path)
        try:
            def as_nobody(*argv: str) -> subprocess.CompletedProcess:
                return subprocess.run(["runuser", "-u", "nobody", "--", *argv], capture_output=True, text=True,
                                      timeout=30)

            assert as_nobody("ls", str(base)).returncode == 0
            for target in (path, token_file(path), socket_file(path)):
                r = as_nobody("cat" if target.is_file() else "ls", str(target))
                assert r.returncode != 0 and "Permission denied" in r.stderr, (target, r.stdout)
        finally:
            stop_serving(server, path)
            store.close()
    finally:
        shutil.rmtree(base)
