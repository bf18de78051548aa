"""``fabricscope pinglist explain``: which switch links the controller's probe plan can name."""

from __future__ import annotations

import json
from pathlib import Path

import typer

pinglist_app = typer.Typer(
    name="pinglist", help="The controller's pinglists (R-Pingmesh Eq. 1) and what they can name.",
    no_args_is_help=True,
)


@pinglist_app.command("explain")
def explain(
    inventory_file: Path | None = typer.Option(None, "--inventory", exists=True, dir_okay=False,
                                              help="inventory YAML (default Panel 1)"),
    seed: int = typer.Option(1, help="seeds QPNs, Eq. 1's source ports and the builder's draw"),
    two_link: bool = typer.Option(False, "--two-link",
                                  help="also count ambiguous two-link faults (slow on big fabrics)"),
    as_json: bool = typer.Option(False, "--json", help="one JSON object instead of tables"),
    bounce: bool = typer.Option(False, "--bounce", help="keep standing bounced probes for the groups no 5-tuple "
                                "splits (agents that send IP-in-IP only; the udp and verbs agents do not)"),
) -> None:
    """Links covered, identifiable and ambiguous under Eq. 1's plan and with the identifiability builder's tuples.

    An ambiguous group is a set of switch links every probed 5-tuple crosses together: a fault on one is
    reported ``undetermined`` over the group, a probing limit, until the closed loop's split probes run.
    Paths come from the simulator's ECMP model of the inventory's fabric.
    """
    from rich.console import Console
    from rich.table import Table

    from producers.plan_explain import explain_plan
    from producers.sim.fabrics import panel1
    from schemas.inventory_yaml import load

    inv = load(inventory_file) if inventory_file else panel1()
    x = explain_plan(inv, seed=seed, two_link=two_link, bounce=bounce)
    if as_json:
        typer.echo(json.dumps(x.as_dict()))
        return
    con = Console()
    t = Table(title=f"switch links the probe plan can name ({len(x.before.links)} links)")
    for c in ("plan", "probed 5-tuples", "identifiable", "uncovered", "ambiguous groups", "no 5-tuple splits"):
        t.add_column(c, justify="left" if c == "plan" else "right")
    for label, r in (("Eq. 1", x.before), ("Eq. 1 + builder" + (" + bounces" if bounce else ""), x.after)):
        t.add_row(label, str(r.entries), str(len(r.identifiable)), str(len(r.uncovered)), str(len(r.groups)),
                  str(len(r.structural)))
    con.print(t)
    extra = len(x.augmented.extra)
    con.print(f"builder: {extra} inter-ToR tuples added to Eq. 1's {x.augmented.base_entries} "
              f"({x.augmented.extra_share:.1%}); {x.extra_pps:.1f} probes/s on {x.eq1_pps:.1f}")
    if bounce:
        con.print(f"standing bounces: {len(x.augmented.bounced)} bounced probes, {x.bounce_pps:.1f} probes/s "
                  f"({x.bounce_pps / max(x.eq1_pps, 1e-9):.1%} of Eq. 1's inter-ToR probes/s)")
    if x.two_link is not None:
        con.print(f"two-link faults Eq. 1's plan cannot tell from another fault: {x.two_link}")
    structural = set(x.after.structural)
    for g in x.after.groups:
        why = ("no RNIC-to-RNIC 5-tuple splits it; bounced probes would, where agents send IP-in-IP (--bounce "
               "here, pinglist loop --bounce)") if g in structural else "more 5-tuples would split it"
        con.print(f"ambiguous: {'|'.join(g)} ({why}): a fault there is reported undetermined, a probing limit")
    for lk in x.after.uncovered:
        con.print(f"uncovered: {lk}: no probe crosses it")
    con.print("every switch link identifiable" if x.after.all_identifiable else
              f"{len(x.after.identifiable)} of {len(x.after.links)} switch links identifiable")


@pinglist_app.command("loop")
def loop(
    inventory_file: Path | None = typer.Option(None, "--inventory", exists=True, dir_okay=False,
                                              help="inventory YAML (default Panel 1)"),
    seed: int = typer.Option(1, help="the controller's seed: QPNs, Eq. 1's source ports, the loop's draw"),
    metrics_port: int = typer.Option(0, help="serve Prometheus metrics on 127.0.0.1:PORT (0 = off)"),
    bounce: bool = typer.Option(False, "--bounce", help="keep standing bounced probes for the groups no 5-tuple "
                                "splits, and answer such groups with more: only where every agent sends IP-in-IP "
                                "and the switches decapsulate it (the udp agent does not, and refuses them)"),
) -> None:
    """The closed loop: answer undetermined verdicts with split probes on the pinglists topic until SIGTERM/SIGINT.

    Reads the verdicts topic from its latest offset in group ``fabricscope-loop``; republishes an agent's
    pinglist when the loop adds entries to it or withdraws them (two windows after the last verdict that
    asked). Counters: fabricscope_loop_requests_total{outcome}, fabricscope_loop_pinglists_published_total.
    """
    import logging
    import signal

    from fabricscope.loop_service import LoopService
    from fabricscope.settings import load as load_settings
    from fabricscope.stopping import stop_requested
    from producers.sim.fabrics import panel1
    from schemas.inventory_yaml import load

    logging.basicConfig(level=logging.INFO, format="%(asctime)s loop %(levelname)s %(message)s")
    stopping = stop_requested(signal.SIGTERM, signal.SIGINT)
    if metrics_port:
        from prometheus_client import start_http_server

        start_http_server(metrics_port, addr="127.0.0.1")
    s = load_settings()
    inv = load(inventory_file) if inventory_file else panel1()
    svc = LoopService(inv, s.kafka_bootstrap, s.fabricscope_topic_prefix, seed=seed,
                      kafka_config=s.kafka_client_config(), origin=s.fabricscope_origin, bounce=bounce)
    logging.getLogger("fabricscope.loop").info("answering undetermined verdicts for %d agents", len(svc.hosts))
    try:
        svc.run(stopping)
    finally:
        svc.close()
