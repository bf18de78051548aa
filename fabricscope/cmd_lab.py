"""``fabricscope lab up|down|status|fault``: the netns fabric lab and its udp agents.

The pipeline uses the same API (``fabricscope up --source lab``, ``fabricscope demo``)::

    from fabricscope.cmd_lab import start_lab_source
    lab = start_lab_source(bootstrap="127.0.0.1:9092", topic_prefix="", seed=1)
    truth = lab.scenario("switch-link-down", seed=7)   # inject; truth.kind / truth.locations
    ...
    lab.stop()                                          # agents stopped, namespaces removed

This module wires :mod:`infra.lab` (namespaces, faults, agent processes) to the
controller (:mod:`producers.controller`) and the inventory (:mod:`schemas.inventory`);
it holds no analytics.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import typer

from fabricscope.choices import LabFault, value
from infra import lab as lab_infra
from infra.lab import agents, faults, procs, scenarios
from infra.lab.netns import LabError, lab_dir, lab_namespaces, read_state


@dataclass
class LabSource:
    """A running lab with agents uploading to Kafka: its fabric, inventory, registry and pinglists."""

    directory: Path
    fabric: lab_infra.Fabric
    inventory: Any  # schemas.inventory.Inventory
    qpns: dict[str, int]
    pinglists: dict[str, list[dict[str, Any]]]
    truths: list[scenarios.Truth] = field(default_factory=list)
    kafka: dict[str, Any] | None = None  # where the agents upload; the pinglists are published there too

    def publish_pinglists(self) -> None:
        """Publish the current pinglists on the compacted ``pinglists`` topic (when the lab uploads to Kafka)."""
        if not self.kafka:
            return
        from producers.controller_publish import publish_pinglists
        from producers.kafka_producer import AgentProducer

        producer = AgentProducer(self.kafka["bootstrap"], kafka_config=self.kafka.get("kafka_config"))
        publish_pinglists(producer, self.kafka.get("topic_prefix", ""), self.pinglists, time.time_ns())
        producer.flush()

    def scenario(self, name: str, seed: int = 1, **kw: Any) -> scenarios.Truth:
        """Inject demo scenario ``name`` (see :data:`infra.lab.scenarios.SCENARIOS`); returns the truth."""
        truth = scenarios.apply(name, seed, self.directory, **kw)
        self.truths.append(truth)
        return truth

    def clear_faults(self) -> list[str]:
        """Undo every injected fault."""
        return faults.clear(None, self.directory)

    def refresh_pinglists(self, seed: int = 1, connections: list[dict[str, Any]] | None = None) -> None:
        """Rebuild the pinglists with the responders' current QPNs (the controller's 5-min rebuild)."""
        self.qpns = agents.registry(self.directory)
        self.pinglists = build_lab_pinglists(self.inventory, self.qpns, seed, connections or [])
        agents.write_pinglists(self.pinglists, self.directory)
        self.publish_pinglists()

    def stop(self) -> list[str]:
        """Stop the agents and remove the lab; returns the namespaces removed."""
        return lab_infra.down(self.directory)


def build_lab_pinglists(
    inventory: Any, qpns: dict[str, int], seed: int, connections: list[dict[str, Any]]
) -> dict[str, list[dict[str, Any]]]:
    """host -> its pinglist entries (ToR-mesh, inter-ToR, service) from the controller."""
    from producers import controller

    reg = controller.Registry.from_inventory(inventory, qpns, seed=seed)
    lists = controller.build_pinglists(inventory, reg, seed=seed, now_ns=time.time_ns(), connections=connections)
    hosts = sorted(inventory.hosts)
    return {h: controller.pinglist_for_host(lists, h) for h in hosts}


def start_lab_source(
    bootstrap: str = "127.0.0.1:9092",
    topic_prefix: str = "",
    *,
    seed: int = 1,
    spec: lab_infra.LabSpec | None = None,
    directory: str | Path | None = None,
    connections: list[dict[str, Any]] | None = None,
    output: dict[str, Any] | None = None,
    kafka_config: dict[str, str] | None = None,
    **agent_options: Any,
) -> LabSource:
    """Build the lab, start one responder and one prober per host, hand them pinglists.

    Args:
        bootstrap, topic_prefix: where the agents upload (``probes.raw``,
            ``paths.traced``, ``registry`` with the prefix).
        seed: inter-ToR tuple draw of the controller.
        spec: fabric size (default Panel 1).
        directory: lab state directory (default ``./var/lab``).
        connections: a job's RC connections for the ``service`` pinglist
            (``job_id``, ``src_rnic``, ``dst_rnic``, ``flow_label`` or ``src_port``).
        output: agent output config instead of Kafka (``{"kind": "dir", "path": ...}``).
        kafka_config: librdkafka SASL/TLS settings for the agents.
        agent_options: more agent config (``upload_interval_s``, ``registry_refresh_s``, ``rates``).

    Raises:
        LabError: not root, no netns, or an agent did not start (its log is named).
    """
    from schemas.inventory_yaml import from_dict

    d = lab_dir(directory)
    fab = lab_infra.up(spec, d)
    try:
        inv = from_dict(fab.inventory_dict(), source=str(d / "inventory.yaml"))
        out = output or {"kind": "kafka", "bootstrap": bootstrap, "topic_prefix": topic_prefix}
        if kafka_config:
            out["kafka_config"] = kafka_config
        qpns = agents.start_agents(d, out, **agent_options)
        lists = build_lab_pinglists(inv, qpns, seed, connections or [])
        agents.write_pinglists(lists, d)
    except BaseException:  # a stop (KeyboardInterrupt) while agents start tears the lab down too
        lab_infra.down(d)
        raise
    lab = LabSource(d, fab, inv, qpns, lists, kafka=out if out.get("kind") == "kafka" else None)
    lab.publish_pinglists()
    return lab


def _job_paths(d: Path) -> list[dict[str, Any]]:
    """The service pinglist's entries that carry a job id (the job's connections), from the pinglist files."""
    out = []
    for f in sorted((d / "pinglists").glob("*.json")):
        try:
            entries = json.loads(f.read_text()).get("entries", [])
        except (OSError, ValueError):
            continue
        out += [{k: e.get(k) for k in ("job_id", "prober_rnic", "prober_host", "responder_rnic", "responder_host",
                                       "src_port", "flow_label")}
                for e in entries if e.get("pinglist") == "service" and e.get("job_id")]
    return out


def status(directory: str | Path | None = None) -> dict[str, Any]:
    """The lab's namespaces, processes (alive or not), active faults, and, when it is up, its nodes:
    ``spines``, ``tors`` (each with its hosts), ``hosts`` (each with its ToR and RNICs), ``rnics``
    (name, host, ToR, address, QPN) and ``job_paths`` (the service pinglist's job connections)."""
    d = lab_dir(directory)
    state = read_state(d)
    prefix = state.get("spec", {}).get("prefix", lab_infra.LabSpec().prefix)
    qpns = agents.registry(d) if (d / "registry").is_dir() else {}
    out: dict[str, Any] = {
        "directory": str(d),
        "up": bool(state.get("ready")),
        "namespaces": lab_namespaces(prefix),
        "processes": {n: {"pid": e["pid"], "alive": procs.alive(e)} for n, e in state.get("processes", {}).items()},
        "faults": state.get("faults", []),
        "registry": qpns,
        "spines": [], "tors": [], "hosts": [], "rnics": [], "job_paths": [],
    }
    if out["up"] and state.get("spec"):
        fab = lab_infra.plan(lab_infra.LabSpec(**state["spec"]))
        out["spines"] = list(fab.spines)
        out["tors"] = [{"tor": t, "hosts": sorted({r.host for r in fab.rnics if r.tor == t})} for t in fab.tors]
        out["hosts"] = [{"host": h, "tor": fab.tor_of(h), "rnics": [r.name for r in fab.host_rnics(h)]}
                        for h in fab.hosts]
        out["rnics"] = [{"rnic": r.name, "host": r.host, "tor": r.tor, "ip": r.ip, "qpn": qpns.get(r.name)}
                        for r in fab.rnics]
        out["job_paths"] = _job_paths(d)
    return out


def _fault_target(kind: str, targets: list[str], fab: lab_infra.Fabric, seed: int) -> dict[str, str]:
    """The ``faults.inject`` target of ``kind`` from the command line (or drawn from ``seed`` when none),
    checked against the lab's names.

    Raises:
        typer.BadParameter: a wrong count of names, or a name the lab has not; the message lists the valid ones.
    """
    def bad(msg: str) -> typer.BadParameter:
        return typer.BadParameter(msg + " (`fabricscope lab status` lists the lab's names)", param_hint="TARGETS")

    if kind in faults.LINK_KINDS:
        if not targets:
            return faults.pick_target(kind, fab, seed)
        if len(targets) != 2:
            raise bad(f"{kind} takes a ToR and a spine (e.g. A S3); got {' '.join(targets)}")
        a, b = targets
        if not ({a, b} & set(fab.tors) and {a, b} & set(fab.spines)):
            raise bad(f"{a} {b} is not a ToR-spine link; ToRs are {', '.join(fab.tors)}, "
                      f"spines {', '.join(fab.spines)}")
        return {"a": a, "b": b}
    if len(targets) > 1:
        raise bad(f"{kind} takes one name; got {' '.join(targets)}")
    if kind == "nic-down":
        names = [r.name for r in fab.rnics]
        if targets and targets[0] not in names:
            raise bad(f"no RNIC {targets[0]!r} in the lab; RNICs are {', '.join(names)}")
        return {"rnic": targets[0]} if targets else faults.pick_target(kind, fab, seed)
    if targets and targets[0] not in fab.hosts:
        raise bad(f"no host {targets[0]!r} in the lab; hosts are {', '.join(fab.hosts)}")
    return {"host": targets[0]} if targets else faults.pick_target(kind, fab, seed)


def _print_table(title: str, columns: tuple[str, ...], rows: list[tuple[Any, ...]], empty: str,
                 note: str = "") -> None:
    from rich.console import Console
    from rich.table import Table

    if not rows:
        typer.echo(f"{title}: {empty}")
        return
    t = Table(*columns, title=title, title_justify="left")
    for r in rows:
        t.add_row(*("" if v is None else str(v) for v in r))
    Console().print(t)
    if note:
        typer.echo(note)


def _fault_rows(active: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    from fabricscope.times import format_time

    rows = []
    for f in active:
        detail = ", ".join(f"{k} {f[k]}" for k in ("loss", "fraction", "direction", "period_s", "down_s") if k in f)
        since = format_time(f["injected_ns"]) if f.get("injected_ns") else ""
        rows.append((f["id"], f["kind"], f.get("target", ""), detail, since))
    return rows


FAULT_COLUMNS = ("id", "kind", "target", "detail", "injected")
CLEAR_HINT = "clear one with `fabricscope lab fault clear ID`, every one with `fabricscope lab fault clear`"


def _fail(e: Exception) -> typer.Exit:
    typer.secho(f"error: {e}", fg="red", err=True)
    return typer.Exit(1)


lab_app = typer.Typer(name="lab", help="The netns fabric lab: ECMP spines/ToRs/hosts on this machine (root).")


@lab_app.command("up")
def up_cmd(
    spines: int = typer.Option(4, help="spine switches"),
    tors: int = typer.Option(3, help="ToRs"),
    hosts_per_tor: int = typer.Option(2, help="hosts under each ToR"),
    nics_per_host: int = typer.Option(2, help="RNICs per host"),
    prefix: str = typer.Option("fs-", help="namespace name prefix"),
    directory: Path = typer.Option(None, "--dir", help="state directory (default ./var/lab)"),
    with_agents: bool = typer.Option(True, "--agents/--no-agents", help="start a udp agent per host"),
    kafka: str = typer.Option("", help="upload to this Kafka bootstrap (default: spool files)"),
    topic_prefix: str = typer.Option("", help="Kafka topic prefix"),
    seed: int = typer.Option(1, help="controller seed (inter-ToR tuples)"),
) -> None:
    """Build the lab (and start its agents); Panel 1 of the R-Pingmesh digest by default."""
    from fabricscope.stopping import interrupt_on_terminate

    spec = lab_infra.LabSpec(spines, tors, hosts_per_tor, nics_per_host, prefix)
    d = lab_dir(directory)
    t0 = time.monotonic()
    interrupt_on_terminate()  # SIGTERM mid-build: the half-built lab is torn down (infra.lab.netns.up)
    try:
        if with_agents:
            out = (
                {"kind": "kafka", "bootstrap": kafka, "topic_prefix": topic_prefix}
                if kafka
                else {"kind": "dir", "path": str(d / "spool")}
            )
            src = start_lab_source(seed=seed, spec=spec, directory=d, output=out)
            fab = src.fabric
        else:
            fab = lab_infra.up(spec, d)
    except (LabError, OSError) as e:
        raise _fail(e) from None
    except KeyboardInterrupt:
        typer.secho("lab up: stopped; the lab was torn down", fg="red", err=True)
        raise typer.Exit(130) from None
    typer.echo(
        f"lab up in {time.monotonic() - t0:.1f} s: {len(fab.spines)} spines, {len(fab.tors)} ToRs, "
        f"{len(fab.hosts)} hosts, {len(fab.rnics)} RNICs; state {d / 'state.json'}"
    )


@lab_app.command("down")
def down_cmd(
    directory: Path = typer.Option(None, "--dir", help="state directory (default ./var/lab)"),
    prefix: str = typer.Option(None, help="also sweep namespaces with this prefix"),
) -> None:
    """Stop the agents and remove every namespace of the lab (also after a crash)."""
    try:
        removed = lab_infra.down(directory, prefix)
    except LabError as e:  # another `up` or `demo` runs it: leave it alone, say who
        raise _fail(e) from None
    typer.echo(f"removed {len(removed)} namespaces")


@lab_app.command("status")
def status_cmd(
    directory: Path = typer.Option(None, "--dir", help="state directory (default ./var/lab)"),
    as_json: bool = typer.Option(False, "--json", help="JSON for machines"),
) -> None:
    """The lab's ToRs, spines, hosts, RNICs, the job's paths, agent processes and active faults."""
    st = status(directory)
    if as_json:
        typer.echo(json.dumps(st, indent=1))
        return
    typer.echo(f"lab {'up' if st['up'] else 'down'} ({st['directory']}): {len(st['namespaces'])} namespaces")
    if not st["up"]:
        typer.echo("no lab is up here; `fabricscope lab up` (or `fabricscope up --source lab`) builds one")
        return
    typer.echo(f"spines: {', '.join(st['spines'])}")
    _print_table("ToRs", ("ToR", "hosts", "uplinks"),
                 [(t["tor"], ", ".join(t["hosts"]), ", ".join(f"{t['tor']}-{sp}" for sp in st["spines"]))
                  for t in st["tors"]], "none")
    _print_table("hosts", ("host", "ToR", "RNICs"), [(h["host"], h["tor"], ", ".join(h["rnics"]))
                                                     for h in st["hosts"]], "none")
    _print_table("RNICs", ("RNIC", "host", "ToR", "address", "QPN"),
                 [(r["rnic"], r["host"], r["tor"], r["ip"], r["qpn"]) for r in st["rnics"]], "none")
    tor_of = {r["rnic"]: r["tor"] for r in st["rnics"]}
    _print_table("job paths (service pinglist; the spine is the ECMP hash's choice)",
                 ("job", "from", "to", "ToRs", "UDP src port"),
                 [(p["job_id"], f"{p['prober_rnic']} ({p['prober_host']})", f"{p['responder_rnic']} "
                   f"({p['responder_host']})", f"{tor_of.get(p['prober_rnic'], '?')} -> spine -> "
                   f"{tor_of.get(p['responder_rnic'], '?')}", p["src_port"]) for p in st["job_paths"]],
                 "no job on the service pinglist (`fabricscope up --source lab` adds job-lab)")
    _print_table("agent processes", ("name", "pid", "state"),
                 [(n, p["pid"], "alive" if p["alive"] else "DEAD") for n, p in sorted(st["processes"].items())],
                 "none running")
    _print_table("active faults", FAULT_COLUMNS, _fault_rows(st["faults"]),
                 "none (`fabricscope lab fault KIND TARGET` injects one)", CLEAR_HINT)


@lab_app.command("fault")
def fault_cmd(
    kind: LabFault = typer.Argument(..., help="the fault to inject, or clear | list"),
    targets: list[str] = typer.Argument(None, help="link: TOR SPINE; nic-down: RNIC; host faults: HOST; clear: ID"),
    seed: int = typer.Option(1, help="draws the target when none is given; partial-5tuple hash seed"),
    loss: float = typer.Option(0.05, min=0.001, max=1.0, help="link-loss / one-way-loss drop probability "
                               "(one-way-loss drops what the first name sends to the second)"),
    fraction: float = typer.Option(0.25, min=0.001, max=1.0, help="partial-5tuple share of tuples dropped"),
    stop_ms: float = typer.Option(700.0, help="busy-host: SIGSTOP burst length (ms)"),
    run_ms: float = typer.Option(300.0, help="busy-host: run time between bursts (ms)"),
    period_s: float = typer.Option(10.0, min=0.2, help="flapping-link: one down-and-up cycle (s)"),
    down_s: float = typer.Option(2.0, min=0.1, help="flapping-link: down this long in each cycle (s)"),
    directory: Path = typer.Option(None, "--dir", help="state directory (default ./var/lab)"),
    as_json: bool = typer.Option(False, "--json", help="list: one JSON record per fault (with its undo data)"),
) -> None:
    """Inject a fault (``fault link-down A S3``), list them, or clear one or all."""
    targets = targets or []
    kind = value(kind)
    try:
        if kind == "list":
            if as_json:
                for f in faults.active(directory):
                    typer.echo(json.dumps(f))
                return
            _print_table("active faults", FAULT_COLUMNS, _fault_rows(faults.active(directory)),
                         "none (`fabricscope lab fault KIND TARGET` injects one)", CLEAR_HINT)
            return
        if kind == "clear":
            ids = [f["id"] for f in faults.active(directory)]
            if len(targets) > 1 or (targets and targets[0] not in ids):
                raise typer.BadParameter(f"no active fault {' '.join(targets)!r}; active faults: "
                                         f"{', '.join(ids) or 'none'}", param_hint="ID")
            cleared = faults.clear(targets[0] if targets else None, directory)
            typer.echo(f"cleared {', '.join(cleared) or 'nothing (no fault was active)'}")
            return
        fab, _ = lab_infra.load(directory)
        tgt = _fault_target(kind, targets, fab, seed)
        rec = faults.inject(
            kind, directory, loss=loss, fraction=fraction, stop_ms=stop_ms, run_ms=run_ms, period_s=period_s,
            down_s=down_s, seed=seed, **tgt
        )
    except (LabError, KeyError) as e:
        raise _fail(e) from None
    typer.echo(f"fault {rec['id']}: {rec['kind']} {rec.get('target', '')}")
