"""`fabricscope query` never takes the embedded store from a store writer that is still starting."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fabricscope.settings import Settings
from fabricscope.store_access import run_query
from sinks.store_errors import StoreError

from conftest import REPO


def test_query_refuses_to_open_the_store_while_a_pipeline_holds_the_run_lock(tmp_path: Path) -> None:
    var = tmp_path / "var"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom infra.runlock import RunLock\n"
                               f"lock = RunLock({str(var / 'up.lock')!r}, 'x').acquire()\nprint('held', flush=True)\n"
                               "time.sleep(60)"], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(StoreError, match=rf"pipeline running here \(pid {holder.pid}\) has not opened"):
            run_query(Settings(fabricscope_var=var), "SELECT 1 AS one")
        assert not (var / "clickhouse").exists()  # nothing was opened or created
    finally:
        holder.kill()
        holder.wait()
    assert run_query(Settings(fabricscope_var=var), "SELECT 1 AS one")["one"].to_pylist() == [1]
