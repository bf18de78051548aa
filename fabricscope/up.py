"""`fabricscope up`: the whole pipeline on one machine, safe to start twice, honest about how it ended.

- One ``up`` per ``FABRICSCOPE_VAR`` (its store, its lab state): a second one is refused with
  the first one's pid (:mod:`infra.runlock`); a lab another process runs is never torn down
  (:func:`infra.lab.netns.check_not_foreign`).
- Children (store writer, workers, source, alert sink) run under :class:`fabricscope.supervise.Supervisor`:
  restarted with backoff, killed with ``up``; one that failed for good stops ``up`` with exit 1.
- Their output goes to ``$FABRICSCOPE_VAR/logs/<child>.log``; ``up`` itself writes progress to
  stderr (a status line on a terminal, a plain line every 10 s otherwise) with dead-lettered
  rows and their top reason.
- On exit it stops what it started (the local Kafka broker and Alertmanager included, unless
  ``--keep-kafka``) and says what it left running and how to stop it.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from fabricscope.local_services import kafka_answers, kafka_script, lab_available
from fabricscope.settings import Settings
from fabricscope.stopping import Cleanup, interrupt_on_terminate
from fabricscope.supervise import Supervisor
from fabricscope.up_recovery import UpRecord, clear_record, take_over
from infra.runlock import Busy, RunLock

log = logging.getLogger("fabricscope.up")

STREAM_WORKER_NICE = 5
"""Niceness `up` adds to its stream workers: they carry the bulk (a backlog absorbs a slower share of a core),
while a verdict waits on the reducer's close and the store writer's insert (about a CPU second per window at
1,024 RNICs), which must not queue behind worker steps on a busy machine (BENCHMARKS.md 4, `bench scale`)."""

console = Console(stderr=True)

EXIT_OK, EXIT_FAILED, EXIT_BUSY = 0, 1, 1
JOB_ID = "job-lab"  # the lab's demo job: its connections are copied into the service pinglist


@dataclass
class Stats:
    """What this run stored so far (one query through the store writer's endpoint), and the live feed's news.

    ``rows``, ``timeouts``, ``verdicts`` and ``dead`` count what arrived since the run started (probes by
    upload time, verdicts by emission, dead letters by receipt), not the whole store. ``events`` are the
    live feed's lines since the last read (:mod:`fabricscope.live_feed`), ``problems`` its counts.
    """

    rows: int = 0
    timeouts: int = 0
    verdicts: int = 0
    dead: int = 0
    top_reason: str = ""
    events: list[str] = field(default_factory=list)
    problems: str = ""

    def line(self, elapsed_s: float, rows_per_s: float | None = None) -> str:
        """One progress line: ``11 s: 800 probe rows this run (72/s), 3 timeouts, 1 verdict``."""
        rate = f" ({rows_per_s:,.0f}/s)" if rows_per_s is not None else ""
        text = (f"{elapsed_s:.0f} s: {self.rows:,} probe rows this run{rate}, {self.timeouts:,} timeouts, "
                f"{self.verdicts:,} verdict{'' if self.verdicts == 1 else 's'}")
        if self.problems:
            text += f" ({self.problems})"
        if self.dead:
            text += f", {self.dead:,} rows dead-lettered (top reason: {self.top_reason})"
        return text

    def mostly_dead(self) -> bool:
        """More rows dead-lettered than stored: the source and the pipeline disagree (registry, schema)."""
        return self.dead > 0 and self.dead >= self.rows


def stats_sql(since_ns: int = 0, origin: str = "") -> str:
    """The progress query: this run's rows (uploaded since ``since_ns``), timeouts, verdicts (of ``origin``
    when given: one of :data:`sinks.origin.ORIGINS`), dead letters and their top reason. Reasons carry the RNIC
    or column in quotes; grouping without them finds the common cause."""
    from sinks.origin import ORIGINS

    t = int(since_ns)
    mine = f" AND origin = '{origin}'" if origin in ORIGINS else ""
    return rf"""SELECT
  (SELECT count() FROM probes WHERE upload_ns >= {t}) AS rows,
  (SELECT countIf(status = 'timeout') FROM probes WHERE upload_ns >= {t}) AS timeouts,
  (SELECT count() FROM verdicts WHERE emitted_ns >= {t}{mine}) AS verdicts,
  (SELECT count() FROM deadletters WHERE received_ns >= {t}) AS dead,
  (SELECT any(r) FROM (SELECT replaceRegexpAll(reason, '\x27[^\x27]*\x27', '…') AS r, count() AS n
   FROM deadletters WHERE received_ns >= {t} GROUP BY r ORDER BY n DESC LIMIT 1)) AS top_reason"""


STATS_SQL = stats_sql(0)
"""The progress query over the whole store."""

UPLOAD_ALIGN_NS = 5_000_000_000
_run_start_ns: int | None = None  # set when `up` starts showing progress (Progress.__enter__) or on the first read
_feeds: dict[Path, Any] = {}  # store path -> its live verdict feed (fabricscope.live_feed.VerdictFeed)


def _run_start() -> int:
    global _run_start_ns
    if _run_start_ns is None:
        _run_start_ns = time.time_ns()
    return _run_start_ns


def read_stats(store_path: Path, since_ns: int | None = None) -> Stats | None:
    """This run's Stats through the running store writer (never by opening the embedded store: it holds its
    lock), with the live feed's new lines (NEW / CLEARED problems of the writer's origin since ``since_ns``,
    default: when this run started). None while no writer answers."""
    from fabricscope.live_feed import VerdictFeed, tick
    from sinks.origin import read_running
    from sinks.query_endpoint import find_endpoint, query_remote

    # a source aligns its first upload to 5 s: probes up to 5 s before the start are this run's
    since = _run_start() - UPLOAD_ALIGN_NS if since_ns is None else since_ns
    try:
        url = find_endpoint(store_path)
    except Exception:
        return None
    if not url:
        return None
    origin = read_running(store_path) or ""
    try:
        row = query_remote(url, stats_sql(since, origin), timeout=10.0).to_pylist()[0]
    except Exception:
        return None
    stats = Stats(int(row["rows"]), int(row["timeouts"]), int(row["verdicts"]), int(row["dead"]),
                  str(row["top_reason"] or ""))
    feed = _feeds.get(store_path)
    if feed is None or feed.since_ns != since:
        feed = _feeds[store_path] = VerdictFeed(since, origin)
    tick(feed, lambda sql: query_remote(url, sql, timeout=10.0), stats.events.append)
    stats.problems = f"problems: {feed.new} new, {feed.cleared} cleared, {len(feed.active)} active" \
        if feed.new else ""
    return stats


class Progress:
    """Progress on stderr: a rich status line on a terminal, else a plain log line every ``every_s``; the live
    feed's lines (a new problem, one that cleared) as they come, above the status line."""

    def __init__(self, tty: bool | None = None, every_s: float = 10.0) -> None:
        self.tty = sys.stderr.isatty() if tty is None else tty
        self.every_s = every_s
        self._last = 0.0
        self._status: Any = None
        self._warned_dead = 0
        self._rate_from: tuple[float, int] | None = None  # (elapsed s, rows) at the first block of rows
        self._rate_last: tuple[float, int] = (0.0, 0)  # ... at the latest block
        self._rate_gap = 0.0  # the longest gap between two blocks so far, s

    def __enter__(self) -> Progress:
        _run_start()
        if self.tty:
            self._status = console.status("waiting for rows…")
            self._status.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._status is not None:
            self._status.__exit__(*exc)

    def _rate(self, stats: Stats, elapsed_s: float) -> float | None:
        """Rows per second between the first and the latest block of rows, or None before they span ``every_s``.

        Rows arrive in blocks (the store writer inserts one every 10-30 s), so the rate over a fixed short
        window read 0/s between blocks and jumped at each. Counted from the first block to the latest, it
        holds between blocks; once the next block is overdue (the wait since the latest is longer than any
        gap between blocks so far) the wait counts too, so a stalled pipeline shows its rate falling.
        """
        if stats.rows <= 0:
            return None
        if self._rate_from is None:
            self._rate_from = self._rate_last = (elapsed_s, stats.rows)  # the rate counts what came after it
            return None
        t0, n0 = self._rate_from
        t_last, n_last = self._rate_last
        if stats.rows != n_last:  # a new block
            self._rate_gap = max(self._rate_gap, elapsed_s - t_last)
            self._rate_last = t_last, n_last = (elapsed_s, stats.rows)
        if t_last - t0 < self.every_s:
            return None  # blocks of under every_s: too short a span to be a rate
        until = elapsed_s if elapsed_s - t_last > self._rate_gap else t_last
        return (n_last - n0) / (until - t0)

    def show(self, stats: Stats | None, elapsed_s: float) -> None:
        """Print the feed's lines, update the status line, or print a line when ``every_s`` passed since the last."""
        for event in stats.events if stats else []:
            console.print(event, highlight=False, soft_wrap=True)  # it starts with its own time of day
        text = stats.line(elapsed_s, self._rate(stats, elapsed_s)) if stats else \
            f"{elapsed_s:.0f} s: waiting for the store writer…"
        if stats and stats.mostly_dead() and stats.dead > self._warned_dead:
            self._warned_dead = stats.dead * 2  # again when it doubles, not every tick
            self.say(f"[bold red]most rows are dead-lettered[/bold red] ({stats.dead:,} dead, {stats.rows:,} "
                     f"stored): {stats.top_reason}. `fabricscope query \"SELECT reason, count() FROM deadletters "
                     "GROUP BY reason\"`")
        if self.tty:
            self._status.update(text)
        elif elapsed_s - self._last >= self.every_s or not self._last:
            self._last = elapsed_s or 1e-9
            self.say(text)

    def say(self, text: str) -> None:
        """A line on stderr above the status line (with a time stamp when not on a terminal)."""
        if not self.tty:
            text = time.strftime("%H:%M:%S ") + text
        console.print(text, highlight=False, soft_wrap=True)


def lab_job_connections(inventory: Any, job_id: str = JOB_ID) -> list[dict[str, Any]]:
    """A small job across the lab: the first RNIC under the first ToR to the first under the last, and back.

    Its connections go into the ``service`` pinglist (the controller copies their flow labels), so the
    reducer emits coverage for ``job_id`` and ``fabricscope blame --job job-lab`` can answer.
    """
    tors = sorted(inventory.tors)
    first = {t: sorted(r.id for r in inventory.rnics.values() if r.tor == t) for t in tors}
    a, b = first[tors[0]][0], first[tors[-1]][0]
    return [{"job_id": job_id, "src_rnic": a, "dst_rnic": b, "flow_label": 11},
            {"job_id": job_id, "src_rnic": b, "dst_rnic": a, "flow_label": 12}]


def run_up(s: Settings, source: str, workers: int, duration: float, alerts: bool = False,
           keep_kafka: bool = False) -> int:
    """Start everything, show progress, stop on Ctrl-C, after ``duration`` s, or when a child failed for good.

    SIGINT or SIGTERM in any phase (broker start, topics, lab build, running) ends the run; the clean-up
    that follows takes at most :data:`CLEANUP_S`, and a second signal or an overrun exits at once, naming
    what was left behind. After a crash of the previous run on this ``FABRICSCOPE_VAR`` (its lock holder
    is dead) it takes over what that run left (:mod:`fabricscope.up_recovery`).

    Returns:
        0 after Ctrl-C or ``duration``; 1 when a child failed for good, a start step failed, or another
        ``up`` holds this ``FABRICSCOPE_VAR`` or the lab.
    """
    from fabricscope.kafka_admin import create_topics

    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one request per progress tick is not news
    var = s.fabricscope_var
    try:
        lock = RunLock(var / "up.lock", f"FABRICSCOPE_VAR={var} (its store and lab state)", note="fabricscope up",
                       hint="stop it first (Ctrl-C in its terminal, or kill PID), or, for a second pipeline on the "
                            "same broker, set both FABRICSCOPE_VAR to another directory and FABRICSCOPE_TOPIC_PREFIX "
                            "to another prefix (the same prefix shares topics and consumer groups)").acquire()
    except Busy as b:
        console.print(f"fabricscope up: {b}", highlight=False, soft_wrap=True)
        return EXIT_BUSY
    # SIGTERM (kill PID, timeout, systemd) stops like Ctrl-C: the lab, the children and a broker this run
    # started are cleaned up. SIGINT is reinstalled too: a shell without job control starts `up &` with
    # SIGINT ignored, and then `kill -INT PID` would do nothing.
    restore_signals = interrupt_on_terminate()
    record = UpRecord(os.getpid())
    started_kafka = started_am = False
    lab = None
    lab_path: Path | None = None
    sup = Supervisor()
    code = EXIT_OK
    exe = [sys.executable, "-m", "fabricscope"]
    logs = var / "logs"
    try:
        dead, found = take_over(var, lock.previous_pid) if lock.previous_pid else (None, [])
        if found:
            console.print(f"fabricscope up: the previous run (pid {lock.previous_pid}) ended without cleaning up:",
                          highlight=False, soft_wrap=True)
            for line in found:
                console.print(f"  {line}", highlight=False, soft_wrap=True)
        if dead is not None and dead.lab_dir:
            _remove_lab(Path(dead.lab_dir))
        if source == "auto":
            source = "lab" if lab_available() else "sim"
        if source == "lab":
            from infra.lab.layout import LabSpec
            from infra.lab.netns import check_not_foreign, lab_dir

            check_not_foreign(LabSpec().prefix, lab_dir(var / "lab"))  # before Kafka: refuse early
        # A remote cluster (KAFKA_BOOTSTRAP elsewhere) is used as it is; the local one is started or reused.
        local = s.kafka_bootstrap.startswith("127.0.0.1")
        adopt = dead is not None and dead.kafka_bootstrap == s.kafka_bootstrap
        if local and adopt and kafka_answers(s.kafka_bootstrap):
            started_kafka = True  # the dead run's broker: ours to stop now
        elif local and not kafka_answers(s.kafka_bootstrap):
            started_kafka = True  # from here on, a stop mid-start stops the half-started broker too
            record.kafka_bootstrap = s.kafka_bootstrap
            record.save(var)
            if kafka_script("start", s, to_stderr=True) != 0:
                return EXIT_FAILED
        if started_kafka:
            record.kafka_bootstrap = s.kafka_bootstrap
            record.save(var)
        create_topics(s.kafka_bootstrap, s.fabricscope_topic_prefix, s.kafka_client_config(),
                      replication=s.kafka_replication_factor, min_insync=s.kafka_min_insync_replicas)
        from sinks.origin import for_source

        # the store writer stamps this run's verdicts with where they came from (lab, sim, production)
        env = dict(os.environ, FABRICSCOPE_VAR=str(var), FABRICSCOPE_ORIGIN=for_source(source))
        follow = None
        if source == "lab":
            from fabricscope.cmd_lab import start_lab_source
            from schemas.inventory_yaml import load as load_inventory

            lab_path = var / "lab"
            record.lab_dir = str(lab_path.resolve())
            record.save(var)
            inv_path = lab_path / "inventory.yaml"
            with console.status("building the netns lab and starting its agents…"):
                lab = start_lab_source(s.kafka_bootstrap, s.fabricscope_topic_prefix, directory=lab_path,
                                       kafka_config=s.kafka_client_config() or None)
                jobs = SchedulerJobs(load_inventory(inv_path))
                lab.refresh_pinglists(connections=jobs.connections())
            follow = jobs.refresh_pinglists_every(lab, JOBS_REFRESH_S)
            env["FABRICSCOPE_INVENTORY"] = str(inv_path.resolve())  # the store writer loads the ToR names
        sup.add("sink", [*exe, "sink"], logs / "sink.log", env)
        workers = workers or os.cpu_count() or 1  # each worker analyses its share of probes.raw's partitions
        for i in range(workers):
            sup.add(f"worker{i}", [*exe, "worker", "--role", "stream", "--nice", str(STREAM_WORKER_NICE)],
                    logs / f"worker{i}.log", env)
        # the reducer in a process of its own: no worker step holds its GIL while it closes a window; and in a
        # session of its own, so where the kernel groups CPU shares by session (autogroup) its share is its own
        sup.add("reducer", [*exe, "worker", "--role", "reducer"], logs / "reducer.log", env, own_session=True)
        if alerts:
            started_am = True
            if _kafka_like_call([*exe, "alertmanager", "start"], env) != 0:
                return EXIT_FAILED
            sup.add("alerts", [*exe, "alerts"], logs / "alerts.log", env)
        if source != "lab":
            sup.add(f"source-{source}", [*exe, "source", source], logs / f"source-{source}.log", env)
        # Hostping on this host: inventory, topology and the 1 s monitor; loopback only where there is an RNIC.
        sup.add("hostping", [*exe, "hostping", "agent"], logs / "hostping.log", env)
        _record_children(record, sup, var)
        console.print(f"[green]fabricscope up[/green] (pid {os.getpid()}): source={source}, workers={workers}, "
                      f"logs in {logs}/; Ctrl-C stops"
                      + (f"; job {JOB_ID} on the service pinglist; inject faults with `fabricscope lab fault ...`"
                         if lab else ""), highlight=False, soft_wrap=True)
        code = _watch(s, sup, duration, lambda: (_record_children(record, sup, var), follow and follow()))
    except KeyboardInterrupt:
        pass
    except Exception as err:  # a start step failed: say which, clean up below, exit 1
        console.print(f"[red]fabricscope up: {type(err).__name__}: {err}[/red]", highlight=False, soft_wrap=True)
        code = EXIT_FAILED
    finally:
        with Cleanup("fabricscope up", CLEANUP_S, on_abort=sup.kill) as cleanup:
            console.print("stopping…", highlight=False)
            # everything still owed, named up front: a second signal or an overrun says what it left
            if lab_path is not None:
                cleanup.owe("lab", f"the lab in {lab_path} (`fabricscope lab down --dir {lab_path}`)")
            if started_kafka and not keep_kafka:
                cleanup.owe("kafka", f"the Kafka broker on {s.kafka_bootstrap} (`fabricscope kafka stop`)")
            sup.terminate()  # all at once; the lab comes down meanwhile
            if lab_path is not None:
                _remove_lab(lab_path)
                cleanup.done("lab")
            sup.stop(timeout_s=CHILD_STOP_S)  # an abort SIGKILLs them instead: never left behind
            _stop_services(s, started_kafka, keep_kafka, started_am, exe)
            cleanup.done("kafka")
            clear_record(var)
            lock.release()
            restore_signals()
    return code


JOBS_REFRESH_S = 60.0
"""How often `up` on the lab re-reads the scheduler's running jobs for the service pinglist (SLURM_CONF set)."""


class SchedulerJobs:
    """The jobs `up` follows on the service pinglist: the lab's ``job-lab``, plus Slurm's running jobs when
    ``SLURM_CONF`` names a cluster (placed on the lab's hosts by node name; docs/scheduler.md).

    A scheduler that does not answer is said once and the lab's own job is kept.
    """

    def __init__(self, inventory: Any) -> None:
        self.inventory = inventory
        self.conf = os.environ.get("SLURM_CONF") or None
        self.followed: tuple[str, ...] = ()
        self._warned = False

    def connections(self) -> list[dict[str, Any]]:
        """``job-lab``'s connections and those of every running Slurm job (their node pairs, sampled)."""
        conns = lab_job_connections(self.inventory)
        if not self.conf:
            return conns
        from producers.scheduler.jobs import running_connections
        from producers.scheduler.slurm import SlurmClient, SlurmError

        try:
            slurm = running_connections(SlurmClient(self.conf).jobs(), self.inventory)
        except SlurmError as err:
            if not self._warned:
                console.print(f"fabricscope up: Slurm jobs not followed: {err}", highlight=False, soft_wrap=True)
                self._warned = True
            return conns
        followed = tuple(sorted({c["job_id"] for c in slurm}))
        if followed != self.followed:
            console.print(f"following Slurm jobs on the service pinglist: {', '.join(followed) or 'none running'}",
                          highlight=False, soft_wrap=True)
            self.followed = followed
        return conns + slurm

    def refresh_pinglists_every(self, lab: Any, every_s: float) -> Any:
        """A tick for `up`'s loop that rebuilds the lab's pinglists every ``every_s`` when the job set changed;
        None without a scheduler."""
        if not self.conf:
            return None
        last = [time.monotonic()]

        def tick() -> None:
            if time.monotonic() - last[0] < every_s:
                return
            last[0] = time.monotonic()
            before = self.followed
            conns = self.connections()
            if self.followed != before:
                lab.refresh_pinglists(connections=conns)

        return tick


CLEANUP_S = 9.5
"""The most `up`'s clean-up may take before it exits anyway and names what it left: within 10 s of the signal."""
CHILD_STOP_S = 4.0
"""How long children get to stop after SIGTERM before their groups are killed (they take 1-2 s here)."""


def _remove_lab(path: Path) -> None:
    from infra.lab.netns import down_if_ours

    if down_if_ours(path) is None:
        console.print(f"fabricscope up: the lab of {path} is run by another process now; left alone",
                      highlight=False, soft_wrap=True)


def _record_children(record: UpRecord, sup: Supervisor, var: Path) -> None:
    now = {c.name: {"pid": c.proc.pid, "argv": c.argv} for c in sup.children if c.proc is not None}
    if now != record.children:
        record.children = now
        record.save(var)


def _kafka_like_call(argv: list[str], env: dict[str, str]) -> int:
    import subprocess

    return subprocess.call(argv, env=env, stdout=sys.stderr)


def _watch(s: Settings, sup: Supervisor, duration: float, after_poll: Any = None) -> int:
    t0 = time.monotonic()
    with Progress() as progress:
        while not duration or time.monotonic() - t0 < duration:
            failed = sup.poll()
            if after_poll is not None:
                after_poll()
            if failed:
                progress.say(f"[red]{', '.join(c.name for c in failed)} failed for good; stopping (exit 1)[/red]")
                return EXIT_FAILED
            progress.show(read_stats(s.store_path), time.monotonic() - t0)
            time.sleep(1.0)
    return EXIT_OK


def _stop_services(s: Settings, started_kafka: bool, keep_kafka: bool, stop_am: bool, exe: list[str]) -> None:

    if stop_am:
        _kafka_like_call([*exe, "alertmanager", "stop"], dict(os.environ))
    if started_kafka and not keep_kafka:
        kafka_script("stop", s, to_stderr=True)
    elif started_kafka:
        console.print(f"left running (--keep-kafka): the Kafka broker on {s.kafka_bootstrap}; "
                      "`fabricscope kafka stop` stops it", highlight=False, soft_wrap=True)
    elif s.kafka_bootstrap.startswith("127.0.0.1") and kafka_answers(s.kafka_bootstrap):
        console.print(f"left running: the Kafka broker on {s.kafka_bootstrap} (it was running before this run "
                      "started; whoever started it stops it)", highlight=False, soft_wrap=True)
    console.print("stopped")
