"""Verdicts through the real pipeline: sim uploads -> real broker -> Faust workers (one consumer group)
-> reducer -> verdicts topic -> store writer -> chdb."""

from __future__ import annotations

import pytest

from fabricscope.demo import run_demo
from fabricscope.settings import Settings
from sinks.clickhouse import ChdbStore

from probe_rows import recent

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

START = recent(1_795_000_000_000_000_000)  # fixed event time: a replay of the same stream
WINDOWS = 2
# the windows both runs must close from the data; a third closes only when the run outlasts the partition
# idle time (a wall-clock close), so whether it is there depends on how long the run took
END = START + WINDOWS * 20_000_000_000


def _run(kafka_bootstrap: str, tmp, workers: int):
    r = run_demo(Settings(kafka_bootstrap=kafka_bootstrap), "sim", "switch-link-down", seed=3, windows=WINDOWS,
                 workers=workers, var=tmp, start_ns=START)
    store = ChdbStore(tmp / "clickhouse")
    stored = store.query_arrow("SELECT verdict_id, kind, location, window_start_ns FROM verdicts FINAL "
                               f"WHERE window_start_ns < {END} ORDER BY window_start_ns, verdict_id").to_pylist()
    store.close()
    return r, stored


def test_two_workers_give_the_one_worker_verdicts_in_clickhouse(kafka_bootstrap, tmp_path):
    one, stored_one = _run(kafka_bootstrap, tmp_path / "one", workers=1)
    two, stored_two = _run(kafka_bootstrap, tmp_path / "two", workers=2)
    truth = one.truth["faults"][0]
    assert (truth["kind"], truth["location"]) == ("switch", "B->S4")
    # every complete window names the dead link, and nothing else
    assert len(one.complete_windows()) >= 2 and len(two.complete_windows()) >= 2
    assert {(v["kind"], v["location"]) for v in one.verdicts} == {("switch", "B->S4")}
    # the same verdicts, with the same identities, from one worker and from two; and in ClickHouse
    asked_one = sorted(v["verdict_id"] for v in one.verdicts if v["window_start_ns"] < END)
    asked_two = sorted(v["verdict_id"] for v in two.verdicts if v["window_start_ns"] < END)
    assert asked_one == asked_two
    assert stored_one == stored_two
    assert len(stored_one) == len(asked_one) >= WINDOWS
