"""The one registry of collectors behind ``fabricscope diagnose`` (:mod:`diagnose.registry`): every collector
has the protocol and a unique name, and docs/diagnose.md lists each one."""

from __future__ import annotations

from diagnose.registry import COLLECTORS

from conftest import REPO


def test_every_collector_has_the_protocol_and_a_unique_name():
    names = [c.NAME for c in COLLECTORS]
    assert len(names) == len(set(names)) == 19
    for c in COLLECTORS:
        assert c.READS and callable(c.detect) and callable(c.parse) and callable(c.findings)
        assert c.detect("") is False, c.NAME


def test_docs_list_every_collector():
    text = (REPO / "docs" / "diagnose.md").read_text()
    assert all(f"`{c.NAME}`" in text for c in COLLECTORS)
