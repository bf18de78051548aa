"""Collector for process resource limits and the verbs errors a low locked-memory limit causes.

Reads ``ulimit -a`` (bash's ``name (unit, -flag) value`` rows), ``ulimit -l`` followed by its
value, ``/proc/PID/limits`` (``Max locked memory  <soft>  <hard>  bytes``) and verbs calls that
failed with ENOMEM (``ibv_create_cq() failed: Cannot allocate memory``, UCX's ``ibv_reg_mr(...)
failed: Cannot allocate memory. Please set max locked memory (ulimit -l) to 'unlimited'
(current: 64 kbytes)``, libfabric's ``ibv_create_qp: Cannot allocate memory(12)``).

Every queue, completion queue and registered buffer is pinned memory, counted against
``RLIMIT_MEMLOCK``; RDMA stacks want it ``unlimited`` (UCX disables its RDMA transports below
about 500 MB, openucx/ucx#7930). Rules:

- a verbs ENOMEM together with a finite limit (in the same input, or the ``current:`` UCX
  prints): ``memlock_limit`` error, cause config;
- a finite locked-memory limit below :data:`LOW_MEMLOCK_KB` without errors: ``memlock_limit``
  warning (registration will fail once a job pins real buffers);
- a verbs ENOMEM with no limit known: ``verbs_enomem`` warning (check ``ulimit -l`` in the job's
  own environment: a container or a systemd unit has its own).

Other limits (``open files 1024``, ``core file size 0``, ``stack size 8192``) look alarming and
are not RDMA faults: they raise nothing. NCCL's own verbs failures are read by ``nccl_log``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from producers.hostping.findings import Finding

NAME = "resource_limits"
READS = "ulimit -a, ulimit -l, /proc/PID/limits, verbs calls failing with ENOMEM (UCX, libfabric, perftest)"

#: Below this many KiB of locked memory RDMA breaks under load (UCX disables RDMA under ~500 MB).
LOW_MEMLOCK_KB = 512 * 1024

_ULIMIT_ROW = re.compile(
    r"^\s*(?P<name>[A-Za-z][\w /-]*?)\s+\((?P<inner>[^()]*?)-(?P<flag>[A-Za-z])\)\s+(?P<val>unlimited|\d+)\s*$"
)
_PROC_ROW = re.compile(
    r"^\s*(?P<name>Max [a-z ]+?)\s{2,}(?P<soft>unlimited|\d+)\s+(?P<hard>unlimited|\d+)\s*(?P<unit>[a-z]*)\s*$"
)
_ULIMIT_L = re.compile(r"(?:^|[\s$#>])ulimit\s+-l\s*$")
_VALUE = re.compile(r"^\s*(?P<val>unlimited|\d+)\s*$")
_ENOMEM = re.compile(
    r"(?P<call>ibv_\w+)(?:\([^)]*\))?:?\s*(?:failed:?\s*)?(?:Cannot allocate memory|ENOMEM|errno\s*=?\s*12\b)"
)
_CURRENT = re.compile(r"\(current:\s*(?P<kb>\d+)\s*kbytes\)")
_UCX_HOST = re.compile(r"^\[[\d.]+\]\s+\[(?P<host>[\w.-]+):\d+")
_DEVICE = re.compile(r"\b(?P<dev>(?:mlx[45]|bnxt_re|irdma|rxe|efa|erdma)_?\w*?\d+)\b")


@dataclass
class Limits:
    """What one input says about locked memory: the limit in KiB (None = unlimited or unknown)."""

    memlock_kb: int | None = None
    memlock_unlimited: bool = False
    memlock_line: int = 0
    memlock_source: str = ""
    enomem: list[dict] = field(default_factory=list)  # {"call", "line", "device", "current_kb", "host"}
    other: dict[str, str] = field(default_factory=dict)  # the other ulimit rows, kept as evidence

    @property
    def known(self) -> bool:
        return self.memlock_unlimited or self.memlock_kb is not None


def _set_memlock(lim: Limits, raw: str, unit_bytes: bool, n: int, source: str) -> None:
    if lim.known:  # the first reading wins (a later one is usually another process)
        return
    if raw == "unlimited":
        lim.memlock_unlimited = True
    else:
        lim.memlock_kb = int(raw) // 1024 if unit_bytes else int(raw)
    lim.memlock_line, lim.memlock_source = n, source


def parse(text: str) -> Limits:
    """The locked-memory limit and every verbs ENOMEM line; unknown lines are skipped."""
    lim = Limits()
    lines = text.splitlines()
    for n, line in enumerate(lines, start=1):
        if (r := _ULIMIT_ROW.match(line)) and not line.lstrip().startswith("["):
            name = " ".join(r["name"].split())
            if r["flag"] == "l" or name == "max locked memory":
                _set_memlock(lim, r["val"], False, n, "ulimit -a")
            else:
                lim.other[name] = r["val"]
        elif p := _PROC_ROW.match(line):
            if p["name"].strip() == "Max locked memory":
                _set_memlock(lim, p["soft"], p["unit"] == "bytes", n, "/proc/PID/limits")
        elif _ULIMIT_L.search(line) and n < len(lines) and (v := _VALUE.match(lines[n])):
            _set_memlock(lim, v["val"], False, n + 1, "ulimit -l")
        elif (e := _ENOMEM.search(line)) and "NCCL" not in line:
            cur = _CURRENT.search(line)
            host = _UCX_HOST.match(line)
            dev = _DEVICE.search(line[: e.start()] or "")
            lim.enomem.append(
                {
                    "call": e["call"],
                    "line": n,
                    "device": dev["dev"] if dev else "",
                    "current_kb": int(cur["kb"]) if cur else None,
                    "host": host["host"] if host else "",
                }
            )
    return lim


def findings(lim: Limits) -> list[Finding]:
    """``memlock_limit`` (error with ENOMEM, warning when merely low) or ``verbs_enomem``."""
    limit_kb = lim.memlock_kb
    limit_line = lim.memlock_line
    if limit_kb is None and not lim.memlock_unlimited:
        known = [e for e in lim.enomem if e["current_kb"] is not None]
        if known:
            limit_kb, limit_line = known[0]["current_kb"], known[0]["line"]
    hosts = sorted({e["host"] for e in lim.enomem if e["host"]})
    where = ",".join(hosts) or "host"
    calls = sorted({e["call"] for e in lim.enomem})
    evidence = {
        "memlock_kbytes": limit_kb,
        "memlock_unlimited": lim.memlock_unlimited,
        "read_from": lim.memlock_source or ("UCX's message" if limit_kb is not None else ""),
        "enomem_calls": calls,
        "enomem_lines": len(lim.enomem),
        "devices": sorted({e["device"] for e in lim.enomem if e["device"]}),
    }
    if lim.enomem and limit_kb is not None:
        return [
            Finding(
                "memlock_limit",
                where,
                "error",
                f"{', '.join(calls)} failed with ENOMEM under a locked-memory limit of {limit_kb} KiB: every QP, CQ "
                "and registered buffer is pinned memory. Set `ulimit -l unlimited` where the job starts (limits.conf "
                "memlock, systemd LimitMEMLOCK=infinity, docker --ulimit memlock=-1, Slurm PropagateResourceLimits).",
                evidence,
                "config",
                str(lim.enomem[0]["line"]),
            )
        ]
    if lim.enomem:
        return [
            Finding(
                "verbs_enomem",
                where,
                "warning",
                f"{', '.join(calls)} failed with ENOMEM and no locked-memory limit is in this input: check "
                "`ulimit -l` inside the job's own environment (container, systemd unit, batch step); if it is "
                "unlimited, the RNIC ran out of QP/MR resources.",
                evidence,
                "config",
                str(lim.enomem[0]["line"]),
            )
        ]
    if limit_kb is not None and limit_kb < LOW_MEMLOCK_KB:
        return [
            Finding(
                "memlock_limit",
                where,
                "warning",
                f"Max locked memory is {limit_kb} KiB (from {evidence['read_from']}): RDMA registration fails once a "
                "job pins real buffers (UCX turns RDMA off below ~500 MB). Set it to unlimited for RDMA jobs.",
                evidence,
                "config",
                str(limit_line),
            )
        ]
    return []


def detect(text: str) -> bool:
    """True when the text holds a locked-memory limit (any of the three forms) or a verbs ENOMEM line."""
    lim = parse(text)
    return lim.known or bool(lim.enomem)
