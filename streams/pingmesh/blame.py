"""``blame(job, at)``: is the network to blame for a job at a time? (R-Pingmesh §3.3 step 5, digest §2)

The answer is ``network`` when a network problem (``switch``, ``rnic``,
``switch_latency``, ``rnic_latency``) of class P0 or P1 lies on the job's paths
in the window holding ``at``; ``innocent`` when there is none *and* the window's
coverage of the job was sufficient (its connections probed, its links crossed by
enough probes, none of its agents silent); otherwise ``unknown`` — never
``innocent`` without coverage. Revised verdicts replace the ones they name.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from streams.pingmesh.impact import NETWORK_KINDS
from streams.pingmesh.windows import WINDOW_NS, window_start

COVERAGE_SCHEMA = pa.schema([
    pa.field("window_start_ns", pa.int64(), nullable=False),
    pa.field("window_end_ns", pa.int64(), nullable=False),
    pa.field("job_id", pa.string(), nullable=False),
    pa.field("connections_expected", pa.int64(), nullable=False),
    pa.field("connections_probed", pa.int64(), nullable=False),
    pa.field("links_total", pa.int64(), nullable=False),
    pa.field("links_covered", pa.int64(), nullable=False),
    pa.field("agents_silent", pa.string(), nullable=False),
    pa.field("sufficient", pa.bool_(), nullable=False),
])
"""Per job and window: the coverage behind a blame answer (proposed as ``coverage.v1``)."""


@dataclass
class BlameAnswer:
    """The answer to "is the network to blame for ``job_id`` at ``at_ns``?".

    Attributes:
        answer: ``network`` | ``innocent`` | ``unknown``.
        problems: the P0/P1 network verdicts on the job's paths (dicts of verdict.v1 fields).
        other: non-network P0/P1 problems on its paths (host down, busy host), for context.
        coverage: the window's coverage row of the job, or None if the job was not seen.
        reason: one sentence for people.
    """

    job_id: str
    at_ns: int
    window_start_ns: int
    answer: str
    problems: list[dict] = field(default_factory=list)
    other: list[dict] = field(default_factory=list)
    coverage: dict | None = None
    reason: str = ""

    def to_json(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True, default=str)


def current_verdicts(verdicts: pa.Table) -> pa.Table:
    """Drop verdicts that a later record revises (``revision_of`` names them)."""
    if verdicts.num_rows == 0:
        return verdicts
    replaced = pc.drop_null(verdicts["revision_of"]).unique()
    return verdicts.filter(pc.invert(pc.is_in(verdicts["verdict_id"], replaced)))


def blame(job_id: str, at_ns: int, verdicts: pa.Table, coverage: pa.Table,
          window_ns: int = WINDOW_NS) -> BlameAnswer:
    """Answer for one job at one time (ns since the epoch) from stored verdicts and coverage.

    Args:
        verdicts: ``verdict.v1`` rows (any range; filtered to the window here).
        coverage: :data:`COVERAGE_SCHEMA` rows.
    """
    ws = window_start(at_ns, window_ns)
    v = current_verdicts(verdicts.filter(pc.equal(verdicts["window_start_ns"], ws)))
    mine = v.filter(pc.and_(pc.equal(v["job_id"], job_id), pc.is_in(v["impact"], pa.array(["P0", "P1"]))))
    rows = sorted(mine.to_pylist(), key=lambda r: (r["impact"], -r["confidence"], r["location"]))
    net = [r for r in rows if r["kind"] in NETWORK_KINDS]
    other = [r for r in rows if r["kind"] not in NETWORK_KINDS]
    cov = coverage.filter(pc.and_(pc.equal(coverage["window_start_ns"], ws), pc.equal(coverage["job_id"], job_id)))
    cov_row = cov.to_pylist()[0] if cov.num_rows else None
    if net:
        where = ", ".join(f"{r['impact']} {r['kind']} at {r['location']}" for r in net)
        return BlameAnswer(job_id, at_ns, ws, "network", net, other, cov_row,
                           f"network problems on the job's paths: {where}")
    if cov_row is None:
        return BlameAnswer(job_id, at_ns, ws, "unknown", [], other, None,
                           "no service-tracing probes of this job in the window; cannot clear the network")
    if not cov_row["sufficient"]:
        return BlameAnswer(job_id, at_ns, ws, "unknown", [], other, cov_row,
                           "coverage too thin to clear the network (see coverage)")
    return BlameAnswer(job_id, at_ns, ws, "innocent", [], other, cov_row,
                       "no P0/P1 network problem on the job's paths, with sufficient coverage")
