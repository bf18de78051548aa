"""The benchmarks' lag sampler rides out a group coordinator that moves or loads, and raises anything else."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from bench.pipeline import GroupLag


class _Consumer:
    def __init__(self, errors: list[int]) -> None:
        self.errors, self.calls = list(errors), 0

    def committed(self, tps: list, timeout: float) -> list:
        self.calls += 1
        if self.errors:
            raise KafkaException(KafkaError(self.errors.pop(0)))
        return ["committed"]


def test_a_moving_coordinator_is_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("bench.pipeline.time.sleep", lambda s: None)
    c = _Consumer([KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS])
    assert GroupLag._committed(c, []) == ["committed"] and c.calls == 3


def test_other_errors_and_a_coordinator_that_never_answers_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("bench.pipeline.time.sleep", lambda s: None)
    with pytest.raises(KafkaException):
        GroupLag._committed(_Consumer([KafkaError.GROUP_AUTHORIZATION_FAILED]), [])
    never = _Consumer([KafkaError.NOT_COORDINATOR] * 20)
    with pytest.raises(KafkaException):
        GroupLag._committed(never, [], tries=4)
    assert never.calls == 4
