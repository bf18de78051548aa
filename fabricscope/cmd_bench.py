"""Benchmark commands: they print figures; they are not timed tests."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import typer

from fabricscope.choices import DemoSource, value
from fabricscope.settings import load
from infra.lab.layout import LabSpec

bench_app = typer.Typer(name="bench", help="Benchmarks that print figures (see BENCHMARKS.md).")


@bench_app.command("throughput")
def throughput(
    rows: int = typer.Option(1_000_000, help="probe rows in all"),
    batch_rows: int = typer.Option(
        6_000,
        help="rows per Kafka message: one agent upload at the paper's rate (8 RNICs x 150 probes/s x 5 s); "
        "messages up to 16 MiB pass (schemas.topics.MAX_MESSAGE_BYTES)",
    ),
    seed: int = 7,
    workers: int = typer.Option(1, help="worker processes of the pipeline (b)"),
    as_json: bool = typer.Option(False, "--json", help="one JSON object on the last line"),
) -> None:
    """Same batches through a bare consumer, the Faust pipeline into chdb, and a bare chdb insert."""
    import json

    from bench import throughput as bench_throughput

    s = load()
    r = bench_throughput.run(s.kafka_bootstrap, rows, batch_rows, seed, workers)
    print(json.dumps(r.as_dict()) if as_json else bench_throughput.report(r))


@bench_app.command("scale")
def scale(
    soak: bool = typer.Option(False, "--soak", help="a simulated week of pinglist rotation (worker and reducer state)"),
    rnics: int = typer.Option(10_000, help="RNICs of the simulated fabric (32 per ToR)"),
    windows: int = typer.Option(3, help="20 s windows simulated (3 windows at 10,000 RNICs: ~90 M probe rows)"),
    rate: float = typer.Option(1.0, help="fraction of the paper's probe rate (1.0 = 150 probes/s per RNIC)"),
    workers: int = typer.Option(0, help="worker processes (0 = one per core)"),
    timeout: float = typer.Option(3600.0, help="seconds to wait for the pipeline to store every row"),
    hours: int = typer.Option(168, help="--soak: simulated hours"),
    profile_reducer: bool = typer.Option(False, "--profile-reducer",
                                         help="cProfile the reducer closing this fabric's windows (no Kafka)"),
    profile_startup: bool = typer.Option(False, "--profile-startup",
                                         help="a stream worker's start-up load of this fabric's traced paths "
                                              "(one process; per message and coalesced, CPU s)"),
    restart_worker: float = typer.Option(-1.0, help="S >= 0: kill -9 one stream worker S seconds after the first "
                                         "stored row and start it again; prints how long its partitions stall"),
    as_json: bool = typer.Option(False, "--json", help="one JSON object on the last line"),
    reducer_in_worker: bool = typer.Option(False, "--reducer-in-worker",
                                           help="run the reducer inside a worker (--role all), not in a process "
                                                "of its own as `fabricscope up` does: for comparison"),
) -> None:
    """A simulated fabric through the real broker, workers, reducer and store writer: rows/s, lag, reducer
    ms and MiB per window, verdict latency, cores for 1.5 M rows/s. --soak: state and RSS per simulated hour."""
    import json
    import sys

    def say(line: object) -> None:
        print(line, file=sys.stderr if as_json else sys.stdout, flush=True)

    if soak:
        from bench import soak as bench_soak

        rows = bench_soak.run(rnics, hours, progress=say)
        print(json.dumps(bench_soak.summary(rows)) if as_json else bench_soak.report(rows))
        return
    from bench import scale as bench_scale

    if profile_reducer:
        print(bench_scale.profile_reducer(rnics, rate))
        return
    if profile_startup:
        print(bench_scale.startup_report(bench_scale.profile_startup(load().kafka_bootstrap, rnics, rate)))
        return
    try:
        r = bench_scale.run(load().kafka_bootstrap, rnics, windows, rate, workers or None, timeout_s=timeout,
                            progress=say, own_reducer=not reducer_in_worker,
                            restart_worker_s=restart_worker if restart_worker >= 0 else None)
    except ValueError as err:
        raise typer.BadParameter(str(err)) from None
    if as_json:
        print(json.dumps(r.as_dict()))
    else:
        bench_scale.print_report(r)
    if not r.complete:
        raise typer.Exit(1)


@bench_app.command("storage")
def storage(
    rows: int = typer.Option(240_000, help="simulated probes measured"),
    rnics: int = typer.Option(10_000, help="RNICs to scale to"),
    rate: float = typer.Option(150.0, help="probes/s per RNIC"),
) -> None:
    """Bytes per day under each raw retention policy (full, anomalies), from simulated probes in the store."""
    from bench import storage as bench_storage

    print(bench_storage.report(bench_storage.run(rows, rnics, rate), rnics, rate))


@bench_app.command("raw-layout")
def raw_layout(
    layouts: str = typer.Option("shipped,lz4,base-8,lz4-base-8,hour-partition,time-key",
                                help="comma-separated layouts (the first is the base of the ratios)"),
    rows: int = typer.Option(20_000_000, help="rows inserted per layout"),
    block_rows: int | None = typer.Option(None, help="rows per insert (default: the store writer's, "
                                                     "sinks.blocks.BLOCK_ROWS)"),
    as_json: bool = typer.Option(False, "--json", help="one JSON list instead of the table"),
) -> None:
    """The raw probes table's CPU per row, rows merged per row, parts, bytes and query times per layout."""
    import json
    from dataclasses import asdict

    from bench import raw_layout as bench_raw
    from sinks.blocks import BLOCK_ROWS

    try:
        results = bench_raw.run([n.strip() for n in layouts.split(",") if n.strip()], rows,
                                BLOCK_ROWS if block_rows is None else block_rows)
    except ValueError as err:
        raise typer.BadParameter(str(err)) from None
    print(json.dumps([asdict(r) for r in results]) if as_json else bench_raw.report(results))


@bench_app.command("replication")
def replication(
    uploads: int = typer.Option(200, help="agent uploads to publish"),
    rows: int = typer.Option(6_000, help="probe rows per upload (6,000: 8 RNICs x 150 probes/s x 5 s)"),
    rate: float = typer.Option(0.0, help="uploads per second (0 = as fast as possible: throughput)"),
) -> None:
    """Publish agent uploads with acks=all into the cluster's replicated probes.raw; uploads/s, latency."""
    from bench import replication as bench_replication

    s = load()
    print(bench_replication.report(bench_replication.run(s.kafka_bootstrap, uploads, rows,
                                                         client_config=s.kafka_client_config(), rate=rate)))


@bench_app.command("accuracy")
def accuracy(
    scenarios: int = typer.Option(30, help="random scenarios (every 10th on a 1,024-RNIC fabric)"),
    seed: int = typer.Option(1, help="draws fabrics, faults and the simulator"),
    seconds: int = typer.Option(80, help="simulated seconds per scenario (20 s windows)"),
    big_every: int = typer.Option(10, help="every N-th scenario uses the 1,024-RNIC fabric (0: never)"),
    hostping_only: bool = typer.Option(False, help="only the 12 Hostping patterns"),
    seeds: str = typer.Option("", help="comma-separated seeds, each running --scenarios (overrides --seed)"),
    huge: int = typer.Option(0, help="scenarios per seed on the 10,240-RNIC fabric, besides --scenarios"),
    jobs: int = typer.Option(1, help="scenarios run in this many processes (results do not change)"),
    background_loss: bool = typer.Option(True, help="healthy links drop 1e-5..1e-4 of packets"),
    loop: bool = typer.Option(False, help="run the controller's closed loop: undetermined link groups get "
                              "probes that split them in the next windows (docs/identifiability.md)"),
    standing_bounces: bool = typer.Option(False, help="sim only: the plan keeps bounced probes for the link groups no "
                                          "5-tuple splits (the two-pod three-tier fabric's core pairs; "
                                          "docs/identifiability.md)"),
    source: DemoSource = typer.Option("sim", help="sim: the simulator's fabrics | lab: faults injected on the "
                                      "netns lab, real packets through the broker and workers (root; "
                                      "docs/lab-accuracy.md)"),
    lab_prefix: str = typer.Option(LabSpec().prefix, help="lab only: namespace prefix of the lab it builds "
                                   "(another prefix runs beside a lab already up)"),
    windows: int = typer.Option(2, min=1, max=15, help="lab only: 20 s windows each scenario's faults last "
                                "(then they are cleared and one window passes)"),
    first: int = typer.Option(0, min=0, help="lab only: index of the first scenario (run one scenario of a seed "
                              "again with --first I --scenarios 1)"),
    var: Path | None = typer.Option(None, help="lab only: keep the run's store, logs and lab state here "
                                    "(default a temporary directory, removed)"),
) -> None:
    """Diagnosis precision/recall against the simulator's ground truth, and the 12 Hostping patterns;
    with ``--source lab``, against the faults injected on the netns lab."""
    from rich.console import Console

    from bench import accuracy as bench_accuracy

    con = Console(width=160)
    if value(source) == "lab":
        if hostping_only or seeds or huge or standing_bounces:
            raise typer.BadParameter("--hostping-only, --seeds, --huge and --standing-bounces are for --source sim",
                                     param_hint="'--source'")
        if var is not None:
            var.mkdir(mode=0o700, parents=True, exist_ok=True)  # the store of probes is a data directory
        _accuracy_lab(con, scenarios, seed, windows, lab_prefix, loop, first, var)
        return
    if first or var is not None:
        raise typer.BadParameter("--first and --var are for --source lab", param_hint="'--source'")
    if hostping_only:
        rep = bench_accuracy.AccuracyReport(seed=seed, scenarios=0, wall_s=0.0)
        bench_accuracy.run_hostping(rep)
        bench_accuracy.print_hostping(rep, con)
        return

    def progress(r: bench_accuracy.ScenarioResult) -> None:
        sc = r.scenario
        faults = ", ".join(f"{t['fault']}@{t['location']}" for t in r.truth) or "healthy"
        con.print(f"[dim]scenario {sc.index:3d} {sc.size:20s} {r.wall_s:5.1f} s  {faults}[/dim]")

    seed_list = tuple(int(x) for x in seeds.split(",") if x.strip()) or (seed,)

    rep = bench_accuracy.run(scenarios, seed, big_every, seconds, progress, huge=huge, jobs=jobs, seeds=seed_list,

                             background_loss=bench_accuracy.BACKGROUND_LOSS if background_loss else None,
                             loop=loop, standing_bounces=standing_bounces)
    bench_accuracy.print_report(rep, con)


def _accuracy_lab(con: object, scenarios: int, seed: int, windows: int, lab_prefix: str, loop: bool = False,
                  first: int = 0, var: Path | None = None) -> None:
    """``bench accuracy --source lab``: run, score with the simulator's scoring, print the same report."""
    import time

    from bench import accuracy as bench_accuracy
    from bench import lab_accuracy
    from fabricscope.local_services import kafka_answers, lab_available
    from fabricscope.stopping import interrupt_on_terminate
    from infra.lab.netns import LabError

    if not lab_available():
        raise typer.BadParameter("the netns lab needs root and network namespaces; use --source sim",
                                 param_hint="'--source'")
    if scenarios < 1:
        raise typer.BadParameter(f"--scenarios {scenarios}: run at least one", param_hint="'--scenarios'")
    s = load()
    if not kafka_answers(s.kafka_bootstrap):
        typer.secho(f"error: no Kafka broker answers on {s.kafka_bootstrap} (`fabricscope kafka start`, or set "
                    "KAFKA_BOOTSTRAP)", fg="red", err=True)
        raise typer.Exit(1)

    def progress(r: lab_accuracy.LabRun) -> None:
        con.print(f"[dim]scenario {r.scenario.index:3d} {r.wall_s:5.1f} s (inject {r.inject_s:.1f} s, clear "  # type: ignore[attr-defined]
                  f"{r.clear_s:.1f} s)  {lab_accuracy.describe(r)}[/dim]")

    restore = interrupt_on_terminate()  # kill PID cleans up as Ctrl-C does: faults, lab, children, topics
    t = time.perf_counter()
    try:
        out, inv, size = lab_accuracy.run_lab(s, scenarios, seed, windows, lab_prefix,
                                              say=lambda m: con.print(f"[dim]{m}[/dim]"),  # type: ignore[attr-defined]
                                              progress=progress, loop=loop, first=first, var=var)
    except KeyboardInterrupt:
        typer.secho("bench accuracy: stopped; the lab, the pipeline and its topics were removed", fg="red",
                    err=True)
        raise typer.Exit(130) from None
    except (LabError, RuntimeError) as e:
        typer.secho(f"error: {e}", fg="red", err=True)
        raise typer.Exit(1) from None
    finally:
        restore()
    rep = bench_accuracy.score(lab_accuracy.results_of(out, inv, size), seed, time.perf_counter() - t)
    bench_accuracy.print_report(rep, con, hostping=False)
    if loop:
        how = ", ".join(f"{k} {n}" for k, n in sorted(Counter(e["how"] for e in out.loop_log).items())) or "none"
        con.print(f"closed loop: {len(out.loop_log)} groups answered ({how}); pinglist files rewritten "  # type: ignore[attr-defined]
                  f"{out.loop_writes} times")
    if out.unclosed:
        con.print(f"windows the pipeline never closed (scored with no verdicts): {len(out.unclosed)}")  # type: ignore[attr-defined]


@bench_app.command("agent")
def agent(
    seconds: float = typer.Option(30.0, help="measured seconds per agent (after a 5 s warm-up)"),
    rate: float = typer.Option(150.0, help="probes/s per RNIC (8 RNICs)"),
    only: str = typer.Option("udp,sim", help="which agents: udp (netns lab, root), host (one-process agents "
                             "over loopback), sim"),
    rnics: int = typer.Option(8, help="RNICs a host for --only host (the lab's and sim's hosts have 8)"),
) -> None:
    """CPU (% of one core) and RSS of one agent process: udp on the lab, and sim, each to Kafka."""
    from bench import agent as bench_agent

    s = load()
    try:
        samples, skipped = bench_agent.run(s.kafka_bootstrap, seconds, rate, tuple(only.split(",")), rnics)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
    bench_agent.print_report(samples, skipped)


@bench_app.command("profile")
def profile(
    rows: int = typer.Option(20_000, help="rows of the profiled batch (one agent upload)"),
) -> None:
    """cProfile of the RTT worker's step (validate, decompose, minute tier, retention, partials): the slowest stage."""
    from bench import profile as bench_profile

    bench_profile.print_report(bench_profile.run(rows))


@bench_app.command("lab-soak")
def lab_soak(
    minutes: float = typer.Option(60.0, min=1.0, help="how long `up` runs on the lab"),
    fault_every: float = typer.Option(300.0, min=60.0, help="seconds between faults (each cleared after half)"),
    var: str = typer.Option("var/lab-soak", help="FABRICSCOPE_VAR of the soak's `up` (its store, its logs)"),
    as_json: bool = typer.Option(False, "--json", help="one JSON object on the last line"),
) -> None:
    """`fabricscope up --source lab` for MINUTES without a terminal, a fault injected and cleared every 5 min:
    restarts, RSS of every process at the start and the end, rows stored per minute, verdict latency per fault."""
    import sys
    from pathlib import Path

    from bench import lab_soak as bench_lab_soak

    r = bench_lab_soak.run(minutes, Path(var).resolve(), fault_every,
                           say=lambda line: print(line, file=sys.stderr, flush=True))
    print(bench_lab_soak.to_json(r) if as_json else bench_lab_soak.report(r))
