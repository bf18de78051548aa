"""The one registry of artifact collectors behind ``fabricscope diagnose`` (node_exporter style).

Every collector is a module with the same small interface (:class:`Collector`):

- ``NAME``: short name (``lspci``, ``nccl_log``, ...), used in evidence and the README;
- ``READS``: the command output or log it reads, in words;
- ``detect(text) -> bool``: whether the text holds anything this collector reads;
- ``parse(text)``: the structured artifact (raises nothing on bad input: unknown lines are skipped);
- ``findings(parsed) -> list[Finding]``: the rules over that one artifact.

:data:`COLLECTORS` lists them in the order their findings are printed. They live in
:mod:`diagnose.collectors`, except ``ethtool`` and ``rnic_config``, which the host agent also
reads at run time and which therefore stay in :mod:`producers.hostping`. Rules that need
two artifacts (a GID table and an NCCL log of the same host, ``ethtool -S`` and
``hw_counters``, PHY counters and a port module event) are the second stage,
:mod:`diagnose.correlate`, which reads the parsed artifacts this module returns.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Protocol

from diagnose.collectors import (
    dmesg,
    firmware,
    gid_table,
    iommu,
    ip_addr,
    lspci,
    mlxconfig,
    nccl_log,
    nccl_pairs,
    nvidia_smi_query,
    nvidia_topo,
    nvlink,
    perftest,
    rdma_port,
    resource_limits,
    sysfs_capture,
    ucx_log,
)
from producers.hostping import ethtool, rnic_config
from producers.hostping.findings import Finding, with_source


class Collector(Protocol):
    """What every collector module provides (checked structurally)."""

    NAME: str
    READS: str

    def detect(self, text: str) -> bool: ...

    def parse(self, text: str) -> Any: ...

    def findings(self, parsed: Any) -> list[Finding]: ...


#: Every collector, in output order. Adding an input kind = one module + one entry here.
COLLECTORS: tuple[Collector, ...] = (
    lspci,
    sysfs_capture,
    ethtool,
    dmesg,
    nccl_log,
    ucx_log,
    nccl_pairs,
    gid_table,
    ip_addr,
    perftest,
    nvidia_topo,
    nvidia_smi_query,
    rnic_config,
    mlxconfig,
    resource_limits,
    rdma_port,
    firmware,
    iommu,
    nvlink,
)

_PROMPT = re.compile(r"^\[?[\w.-]+@(?P<host>[A-Za-z][\w.-]*)[\s:\]]")


@dataclass
class Artifact:
    """One collector's view of one input: what it parsed and the findings of its own rules.

    ``source`` is the file (or sysfs root) name; ``host`` is the host the input comes from
    when the text names exactly one (NCCL/UCX line prefix or a shell prompt), else ``None``.
    """

    source: str
    collector: str
    parsed: Any
    host: str | None
    findings: list[Finding] = field(default_factory=list)


def host_hint(text: str) -> str | None:
    """The one host a text comes from: NCCL ``host:pid:tid`` prefixes or ``user@host`` prompts."""
    hosts = set(nccl_log.hosts_in(text)) | set(ucx_log.hosts_in(text))
    if not hosts:
        hosts = {m["host"] for line in text.splitlines() if (m := _PROMPT.match(line.strip()))}
    return hosts.pop() if len(hosts) == 1 else None


def collect_text(text: str, name: str = "<text>") -> list[Artifact]:
    """Run every collector whose ``detect`` accepts the text; one :class:`Artifact` each."""
    host = host_hint(text)
    out = []
    for c in COLLECTORS:
        if not c.detect(text):
            continue
        parsed = c.parse(text)
        out.append(Artifact(name, c.NAME, parsed, host, with_source(c.findings(parsed), name)))
    return out


def collect_root(root: Any, name: str) -> list[Artifact]:
    """A sysfs root directory (``--path.sysfs``) as one ``sysfs`` artifact."""
    snap = sysfs_capture.parse_root(root)
    return [Artifact(name, sysfs_capture.NAME, snap, None, with_source(sysfs_capture.findings(snap), name))]
