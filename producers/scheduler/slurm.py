"""Slurm backend: jobs from ``squeue --json`` and the ``jobcomp/filetxt`` log; node state and node actions.

Running and recently finished jobs come from slurmctld (``squeue --json --states=all``; it keeps a
finished job for ``MinJobAge``). Jobs that aged out of slurmctld come from the job completion log
(``JobCompType=jobcomp/filetxt``, one ``Key=Value`` line per finished job), so neither ``slurmdbd`` nor a
database is needed; a site that runs ``slurmdbd`` may point ``jobcomp`` elsewhere and lose nothing here
but history older than ``MinJobAge``. The JSON shapes of Slurm 22.05 (plain numbers, ``job_state`` a
string) and 23.02+ (``{"set": .., "number": ..}``, ``job_state`` a list) are both read.

Every call runs a Slurm client command in a process of its own (``subprocess``, no shell) with
``SLURM_CONF`` from :class:`SlurmClient`; a failing command raises :class:`SlurmError` with its stderr.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from producers.scheduler.hostlist import expand
from producers.scheduler.jobs import ACTIVE_STATES, Job

_NS = 1_000_000_000
_KV = re.compile(r"(\w+)=(.*?)(?=\s\w+=|\s*$)")


class SlurmError(RuntimeError):
    """A Slurm command failed or printed what cannot be read; the message has the command and its stderr."""


def _num(v: Any) -> int:  # noqa: ANN401 - Slurm JSON: a number, or {"set": bool, "number": n} since 23.02
    if isinstance(v, dict):
        return int(v.get("number", 0)) if v.get("set", True) and not v.get("infinite") else 0
    return int(v or 0)


def _state(v: Any) -> str:  # noqa: ANN401 - a string in 22.05, a list of flags since 23.02
    if isinstance(v, list):
        return str(v[0]) if v else "UNKNOWN"
    return str(v or "UNKNOWN")


def display_id(j: dict[str, Any]) -> tuple[str, str]:
    """(display id, parent id) of one ``squeue --json`` job: ``1234_7`` for an array task, ``1234+1`` for a
    heterogeneous component, ``1234`` otherwise; the parent is the array or het job's id."""
    jid = str(_num(j.get("job_id")))
    array_job, task = _num(j.get("array_job_id")), j.get("array_task_id")
    if array_job and task is not None and not (isinstance(task, dict) and not task.get("set", True)):
        return f"{array_job}_{_num(task)}", str(array_job)
    het = _num(j.get("het_job_id"))
    if het:
        return f"{het}+{_num(j.get('het_job_offset'))}", str(het)
    return jid, jid


def job_from_squeue(j: dict[str, Any]) -> Job:
    """A :class:`Job` from one element of ``squeue --json``'s ``jobs`` (times in s -> ns)."""
    jid, parent = display_id(j)
    state = _state(j.get("job_state"))
    start = _num(j.get("start_time")) * _NS if state != "PENDING" else 0
    end = None if state in ACTIVE_STATES else _num(j.get("end_time")) * _NS
    nodes = tuple(expand(str(j.get("nodes") or ""))) if state != "PENDING" else ()
    return Job(jid, parent, str(j.get("name", "")), str(j.get("user_name", "")), str(j.get("partition", "")),
               state, nodes, _num(j.get("submit_time")) * _NS, start, end)


def _local_time_ns(text: str) -> int:
    """``2026-12-01T19:44:26`` (slurmctld's local time, no zone) -> ns since the epoch; 0 for Unknown/None."""
    if not text or text in ("Unknown", "None"):
        return 0
    return int(datetime.fromisoformat(text).astimezone().timestamp()) * _NS


def parse_jobcomp_line(line: str) -> Job | None:
    """One line of the ``jobcomp/filetxt`` log -> :class:`Job`; None for a blank line.

    Raises:
        SlurmError: a line without ``JobId=`` (the message quotes it).
    """
    if not line.strip():
        return None
    kv = dict(_KV.findall(line.strip()))
    if "JobId" not in kv:
        raise SlurmError(f"job completion log line has no JobId: {line[:120]!r}")
    jid = parent = kv["JobId"]
    if kv.get("ArrayJobId") and kv.get("ArrayTaskId") not in (None, "", "4294967294"):
        jid, parent = f"{kv['ArrayJobId']}_{kv['ArrayTaskId']}", kv["ArrayJobId"]
    elif kv.get("HetJobId") and kv.get("HetJobId") != "0":
        jid, parent = f"{kv['HetJobId']}+{kv.get('HetJobOffset', '0')}", kv["HetJobId"]
    user = kv.get("UserId", "").split("(")[0]
    return Job(jid, parent, kv.get("Name", ""), user, kv.get("Partition", ""), kv.get("JobState", "UNKNOWN"),
               tuple(expand(kv.get("NodeList", ""))), _local_time_ns(kv.get("SubmitTime", "")),
               _local_time_ns(kv.get("StartTime", "")), _local_time_ns(kv.get("EndTime", "")))


def read_jobcomp(path: str | Path, since_ns: int = 0) -> list[Job]:
    """Finished jobs of a ``jobcomp/filetxt`` log that ended at or after ``since_ns`` (missing file: ``[]``)."""
    p = Path(path)
    if not p.exists():
        return []
    out = []
    with p.open(errors="replace") as f:
        for line in f:
            job = parse_jobcomp_line(line)
            if job is not None and (job.end_ns or 0) >= since_ns:
                out.append(job)
    return out


@dataclass(frozen=True)
class NodeState:
    """One Slurm node: ``state`` (``idle``, ``allocated``, ``mixed``, ``down``), ``drain`` (the DRAIN flag),
    ``reason`` (empty when none), and the partitions it is in."""

    name: str
    state: str
    drain: bool
    reason: str
    partitions: tuple[str, ...]


@dataclass
class SlurmClient:
    """Runs Slurm's client commands against one cluster.

    Attributes:
        conf: ``slurm.conf`` path (``SLURM_CONF``); None uses the environment's or the system's.
        jobcomp: the ``jobcomp/filetxt`` log to read finished jobs from (None: ``JobCompLoc`` of
            ``scontrol show config`` when ``JobCompType`` is ``jobcomp/filetxt``, else none).
        timeout_s: per command.
    """

    conf: str | None = None
    jobcomp: str | None = None
    timeout_s: float = 30.0

    def run(self, argv: Sequence[str]) -> str:
        """stdout of a Slurm command. Raises :class:`SlurmError` when it is missing, fails or hangs."""
        env = dict(os.environ)
        if self.conf:
            env["SLURM_CONF"] = self.conf
        try:
            r = subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=self.timeout_s,
                               check=False)
        except FileNotFoundError:
            raise SlurmError(f"{argv[0]} not found: install Slurm's clients (apt-get install slurm-client) "
                             "or run `bash infra/slurm/slurm.sh start`") from None
        except subprocess.TimeoutExpired:
            raise SlurmError(f"{' '.join(argv)} did not answer in {self.timeout_s:.0f} s; is slurmctld up?") from None
        if r.returncode != 0:
            hint = ("; point at the cluster with --slurm-conf or SLURM_CONF (`bash infra/slurm/slurm.sh env` "
                    "prints the test cluster's)") if "configuration source" in r.stderr else ""
            raise SlurmError(f"{' '.join(argv)} failed (exit {r.returncode}): {r.stderr.strip()[-400:]}{hint}")
        return r.stdout

    def _json(self, argv: Sequence[str]) -> dict[str, Any]:
        out = self.run(argv)
        try:
            return json.loads(out)
        except json.JSONDecodeError as e:
            raise SlurmError(f"{' '.join(argv)} printed no JSON ({e}): {out[:200]!r}") from None

    def config(self) -> dict[str, str]:
        """``scontrol show config`` as ``{key: value}``."""
        out = {}
        for line in self.run(["scontrol", "show", "config"]).splitlines():
            k, sep, v = line.partition("=")
            if sep:
                out[k.strip()] = v.strip()
        return out

    def jobcomp_path(self) -> str | None:
        """The job completion log to read (:attr:`jobcomp`, else the cluster's filetxt ``JobCompLoc``)."""
        if self.jobcomp:
            return self.jobcomp
        cfg = self.config()
        return cfg.get("JobCompLoc") if cfg.get("JobCompType") == "jobcomp/filetxt" else None

    def jobs(self, since_ns: int = 0) -> list[Job]:
        """Active jobs and those finished at or after ``since_ns``, one per display id.

        slurmctld's view wins over the completion log for a job both know.
        """
        live = [job_from_squeue(j) for j in self._json(["squeue", "--json", "--states=all"]).get("jobs", [])]
        by_id = {j.job_id: j for j in live if j.end_ns is None or j.end_ns >= since_ns}
        path = self.jobcomp_path()
        if path:
            for j in read_jobcomp(path, since_ns):
                by_id.setdefault(j.job_id, j)
        return sorted(by_id.values(), key=lambda j: (j.start_ns or j.submit_ns, j.job_id))

    def nodes(self) -> list[NodeState]:
        """Every node with its state, DRAIN flag and reason (``sinfo --json``)."""
        out = []
        for n in self._json(["sinfo", "--json"]).get("nodes", []):
            flags = [str(f).upper() for f in (n.get("state_flags") or [])]
            st = n.get("state")
            states = [str(s).upper() for s in st] if isinstance(st, list) else [str(st).upper()]
            drain = "DRAIN" in flags or "DRAIN" in states or any(s.startswith("DRAIN") for s in states)
            out.append(NodeState(str(n["name"]), states[0].lower(), drain, str(n.get("reason") or ""),
                                 tuple(n.get("partitions") or ())))
        return out

    def drain(self, node: str, reason: str) -> None:
        """``scontrol update NodeName=node State=DRAIN Reason=reason`` (running jobs finish; no new ones start)."""
        _check_node(node)
        self.run(["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"])

    def resume(self, node: str) -> None:
        """``scontrol update NodeName=node State=RESUME`` (clears DRAIN and the reason)."""
        _check_node(node)
        self.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"])


_NODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def _check_node(node: str) -> None:
    # One node per action: a hostlist or a second key=value in the name would widen it.
    if not _NODE.match(node) or node.upper() == "ALL":  # scontrol reads NodeName=ALL as every node
        raise SlurmError(f"node name {node!r}: one node name of letters, digits, '.', '_' or '-' only "
                         "(not Slurm's ALL)")
