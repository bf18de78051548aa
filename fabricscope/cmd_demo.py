"""`fabricscope demo`: run one fault scenario through the whole pipeline and print the verdicts.

Where the verdicts are kept, so that ``fabricscope query`` finds them afterwards:

- a store writer owns this ``FABRICSCOPE_VAR``'s store (``fabricscope up`` or ``sink`` runs): the
  demo runs on topics of its own and then publishes its verdicts to the main ``verdicts`` topic,
  which that store writer stores;
- else the demo's own store writer uses this ``FABRICSCOPE_VAR``'s store (holding ``up.lock``, so
  no ``up`` starts meanwhile).

The output (stderr) says which. With ``--json`` stdout carries only the verdicts, one JSON line each.
"""

from __future__ import annotations

import json

import typer
from rich.console import Console

from fabricscope.choices import DemoScenario, DemoSource, check_scenario, value
from fabricscope.settings import Settings, load
from fabricscope.stopping import Cleanup, interrupt_on_terminate
from fabricscope.times import format_window

EXIT_FAILED = 1
EXIT_STOPPED = 130  # stopped by SIGINT/SIGTERM before its windows closed (128 + SIGINT, as shells report it)
CLEANUP_S = 9.0
"""The most the demo's clean-up may take before it exits anyway and names what it left."""

commands = typer.Typer()
"""The top-level commands of this module (`fabricscope <command>`)."""


def forward_verdicts(s: Settings, verdicts: list[dict]) -> int:
    """Publish demo verdicts to the main ``verdicts`` topic (the running store writer stores them).

    Returns:
        The number of batches not delivered (0 when all arrived).
    """
    from producers.kafka_producer import AgentProducer
    from schemas.arrow_nano import encode_columns
    from schemas.records import VERDICT_V1
    from schemas.topics import VERDICTS, topic_name

    if not verdicts:
        return 0
    cols = {f.name: [v.get(f.name) for v in verdicts] for f in VERDICT_V1.fields}
    producer = AgentProducer(s.kafka_bootstrap, kafka_config=s.kafka_producer_config())
    producer.publish(topic_name(VERDICTS, s.fabricscope_topic_prefix), encode_columns("verdict.v1", cols),
                     "verdict.v1", key="demo", headers=[("origin", b"demo")])
    return producer.flush()


@commands.command("demo")
def demo(
    source: DemoSource = typer.Option("sim", help="lab (netns fabric, needs root) | sim"),
    scenario: DemoScenario = typer.Option("switch-link-down", help="the fault to inject (the lab runs the "
                                          "first eight; the sim all)"),
    seed: int = typer.Option(1, help="draws the faulted link, RNIC or host"),
    windows: int = typer.Option(1, min=1, max=30, help="complete 20 s windows to wait for after the fault"),
    workers: int = typer.Option(1, min=1, max=16, help="Faust workers in the consumer group"),
    as_json: bool = typer.Option(False, "--json", help="verdicts as JSON lines on stdout (nothing else there)"),
    keep_kafka: bool = typer.Option(False, "--keep-kafka", help="leave a broker this demo started running"),
) -> None:
    """Inject a fault, run Kafka + Faust + ClickHouse over it, print the verdicts of each window.
    Exit 0 when the windows closed, 1 when the pipeline failed, 130 when stopped (SIGINT/SIGTERM) first."""
    from fabricscope.demo import run_demo
    from fabricscope.local_services import kafka_answers, kafka_script, lab_available
    from infra.runlock import Busy, RunLock
    from sinks.query_endpoint import find_endpoint

    src, scen = value(source), value(scenario)
    check_scenario(src, scen)
    if src == "lab" and not lab_available():
        raise typer.BadParameter("the netns lab needs root and network namespaces; use --source sim",
                                 param_hint="'--source'")
    err = Console(stderr=True)
    s = load()
    main_store = find_endpoint(s.store_path)
    lock = None
    if not main_store:
        try:
            lock = RunLock(s.fabricscope_var / "up.lock", f"FABRICSCOPE_VAR={s.fabricscope_var}",
                           note="fabricscope demo").acquire()
        except Busy as b:
            err.print(f"fabricscope demo: {b}", highlight=False, soft_wrap=True)
            raise typer.Exit(EXIT_FAILED) from None

    def show(v: dict) -> None:
        if as_json:
            print(json.dumps(v, default=str), flush=True)
        else:
            window = format_window(v["window_start_ns"], v.get("window_end_ns") or v["window_start_ns"])
            from streams.pingmesh.impact import NOISE, NOISE_NOTE

            note = f": {NOISE_NOTE}" if v["impact"] == NOISE else ""  # not a fault: say so
            Console().print(f"window {window}: [bold]{v['kind']}[/bold] at {v['location']} "
                            f"(impact {v['impact']}, confidence {v['confidence']:.2f}){note}")

    code = 0
    started_kafka = False
    # kill PID stops like Ctrl-C, in every phase: the lab, the children and a broker we started go
    restore_signals = interrupt_on_terminate()
    try:
        if s.kafka_bootstrap.startswith("127.0.0.1") and not kafka_answers(s.kafka_bootstrap):
            started_kafka = True  # a stop during the start stops the half-started broker too
            if kafka_script("start", s, to_stderr=True) != 0:
                raise RuntimeError(f"the local Kafka broker on {s.kafka_bootstrap} did not start")
        with err.status(f"{scen} on {src}: waiting for {windows} complete window(s)…"):
            r = run_demo(s, src, scen, seed, windows, workers, on_verdict=show,
                         var=None if main_store else s.fabricscope_var, cleanup_s=CLEANUP_S)
        err.print(f"injected: {json.dumps(r.truth)}")
        err.print(f"windows closed after the fault: {len(r.complete_windows())}, verdicts: {len(r.verdicts)}")
        if main_store:
            left = forward_verdicts(s, r.verdicts)
            err.print(f"verdicts sent to the running pipeline's `{s.fabricscope_topic_prefix}verdicts` topic; "
                      f"its store writer stores them in {s.store_path}" + (f" ({left} not delivered)" if left
                                                                           else ""))
        else:
            err.print(f"verdicts stored in {s.store_path} (no pipeline was running); "
                      "`fabricscope query top_suspects --since 1h` shows them")
    except KeyboardInterrupt:
        err.print("fabricscope demo: stopped before its windows closed")
        code = EXIT_STOPPED
    except Exception as e:  # the pipeline failed: one line, where to look, exit 1
        err.print(f"[red]fabricscope demo: {type(e).__name__}: {e}[/red]", highlight=False, soft_wrap=True)
        code = EXIT_FAILED
    finally:
        with Cleanup("fabricscope demo", CLEANUP_S) as cleanup:
            if lock is not None:
                lock.release()
            if started_kafka and not keep_kafka:
                cleanup.owe("kafka", f"the Kafka broker on {s.kafka_bootstrap} (`fabricscope kafka stop`)")
                kafka_script("stop", s, to_stderr=True)
                cleanup.done("kafka")
            elif started_kafka:
                err.print(f"left running: the Kafka broker on {s.kafka_bootstrap} (--keep-kafka); "
                          "`fabricscope kafka stop` stops it")
        restore_signals()
    raise typer.Exit(code)
