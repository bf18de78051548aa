"""Data directories are their owner's only (0700): created so, and tightened when an older one is found.

The Kafka data dir is checked on a private broker in ``tests/test_config_security.py``;
the running store writer's files in ``tests/test_store_security.py``.
"""

from __future__ import annotations

import os
import stat

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
