"""Start, stop and restart the udp agents of the lab's hosts.

Each host runs two processes (so a busy-host fault can throttle the responder
alone): ``<host>.responder`` and ``<host>.prober``, both
``python -m producers.udp_agent --config <lab_dir>/agents/<host>.json --role ...``.
They run in the root namespace and open their sockets in the host's namespace
(:func:`producers.kernel_ts.in_netns`), so Kafka on 127.0.0.1 stays reachable.

Files under the lab directory:

- ``agents/<host>.json``: the agent config (:mod:`producers.udp_agent`);
- ``pinglists/<host>.json``: ``{"entries": [...]}``, re-read by the prober when it changes;
- ``registry/<host>.json``: written by the responder with its QPN at each start;
- ``logs/<host>.<role>.log``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from infra.lab import procs
from infra.lab.layout import Fabric
from infra.lab.netns import LabError, lab_dir, load, read_state, write_state

AGENT_MODULE = "producers.udp_agent"
ROLES = ("responder", "prober")


def agent_config(fab: Fabric, host: str, directory: Path, output: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """The udp agent config of ``host`` (see :mod:`producers.udp_agent`)."""
    cfg: dict[str, Any] = {
        "agent_id": host,
        "host": host,
        "netns": fab.netns(host),
        "rnics": [{"name": r.name, "ip": r.ip, "netdev": r.name, "tor": r.tor} for r in fab.host_rnics(host)],
        "allowed_sources": [r.ip for r in fab.rnics],
        "address_names": fab.address_names(),
        "pinglist_file": str(directory / "pinglists" / f"{host}.json"),
        "registry_dir": str(directory / "registry"),
        "output": output,
    }
    cfg.update(extra)
    return cfg


def write_pinglists(entries_by_host: dict[str, list[dict[str, Any]]], directory: str | Path | None = None) -> None:
    """Write each host's pinglist file (atomically); running probers pick it up within 1 s."""
    d = lab_dir(directory) / "pinglists"
    d.mkdir(parents=True, exist_ok=True)
    for host, entries in entries_by_host.items():
        # The controller names the probers that probe this host: its responder may trace their ACK paths.
        probers = sorted({e["src_ip"] for es in entries_by_host.values() for e in es
                          if e.get("responder_host") == host and e.get("src_ip")})
        tmp = d / f".{host}.tmp"
        tmp.write_text(json.dumps({"entries": entries, "reverse_peers": probers, "written_ns": time.time_ns()}))
        tmp.replace(d / f"{host}.json")


def registry(directory: str | Path | None = None) -> dict[str, int]:
    """RNIC -> current QPN, as the responders registered them (``registry/*.json``)."""
    out: dict[str, int] = {}
    for f in sorted((lab_dir(directory) / "registry").glob("*.json")):
        for r in json.loads(f.read_text()).get("rnics", []):
            out[r["rnic"]] = int(r["qpn"])
    return out


def start_agents(
    directory: str | Path | None = None,
    output: dict[str, Any] | None = None,
    pinglists: dict[str, list[dict[str, Any]]] | None = None,
    hosts: list[str] | None = None,
    wait_s: float = 5.0,
    **extra: Any,
) -> dict[str, int]:
    """Start the responder and prober of every host (or ``hosts``); returns RNIC -> QPN.

    Args:
        directory: the lab directory (default ``./var/lab``).
        output: agent ``output`` config, e.g. ``{"kind": "kafka", "bootstrap":
            "127.0.0.1:9092", "topic_prefix": ""}``; default ``{"kind": "none"}``.
        pinglists: host -> pinglist entries (``producers.controller`` dicts); written
            before the probers start. Without it the probers idle until a pinglist
            file appears (:func:`write_pinglists`).
        hosts: only these hosts.
        wait_s: wait up to this long for every responder to register its QPN.
        extra: more agent config keys (``rates``, ``upload_interval_s``, ...).

    Raises:
        LabError: no lab is up, or a responder did not register in time (see its log).
    """
    d = lab_dir(directory)
    fab, state = load(d)
    hosts = hosts or fab.hosts
    if pinglists is not None:
        write_pinglists({h: pinglists.get(h, []) for h in hosts}, d)
    (d / "agents").mkdir(parents=True, exist_ok=True)
    out = output or {"kind": "none"}
    for host in hosts:
        cfg = agent_config(fab, host, d, out, **extra)
        f = d / "agents" / f"{host}.json"
        f.touch(mode=0o600)  # may hold Kafka credentials (output.kafka_config)
        f.write_text(json.dumps(cfg, indent=1))
        (d / "registry" / f"{host}.json").unlink(missing_ok=True)
        for role in ROLES:
            _start(d, state, host, role)
    write_state(d, state)
    return wait_registered(d, hosts, wait_s)


def _start(d: Path, state: dict[str, Any], host: str, role: str) -> int:
    name = f"{host}.{role}"
    old = state.get("processes", {}).get(name)
    if old:
        procs.stop(old)
    argv = procs.python_argv(AGENT_MODULE, "--config", str(d / "agents" / f"{host}.json"), "--role", role)
    return procs.start(d, state, name, argv, kind="agent", host=host, role=role)


def wait_registered(d: Path, hosts: list[str], wait_s: float) -> dict[str, int]:
    """Wait until every host in ``hosts`` has a registry file; returns RNIC -> QPN."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if all((d / "registry" / f"{h}.json").exists() for h in hosts):
            return registry(d)
        time.sleep(0.05)
    missing = [h for h in hosts if not (d / "registry" / f"{h}.json").exists()]
    raise LabError(f"responders of {', '.join(missing)} did not register within {wait_s} s; see {d / 'logs'}")


def stop_agents(
    directory: str | Path | None = None, hosts: list[str] | None = None, roles: tuple[str, ...] = ROLES
) -> list[str]:
    """Stop the agents of ``hosts`` (default all); returns the process names stopped."""
    d = lab_dir(directory)
    state = read_state(d)
    chosen = {name: entry for name, entry in state.get("processes", {}).items()
              if entry.get("kind") == "agent" and (hosts is None or entry["host"] in hosts) and entry["role"] in roles}
    procs.stop_in_order(list(chosen.values()))  # probers first: a responder gone before them makes false timeouts
    for name in chosen:
        del state["processes"][name]
    write_state(d, state)
    return sorted(chosen, key=lambda n: procs.STOP_ORDER.get(chosen[n]["role"], 3))


def restart_agents(
    directory: str | Path | None = None, hosts: list[str] | None = None, wait_s: float = 5.0
) -> dict[str, int]:
    """Restart the agents of ``hosts`` with their existing configs; they come back with new QPNs."""
    d = lab_dir(directory)
    fab, state = load(d)
    hosts = hosts or fab.hosts
    for host in hosts:
        if not (d / "agents" / f"{host}.json").exists():
            raise LabError(f"{host} has no agent config in {d / 'agents'}; run start_agents first")
        (d / "registry" / f"{host}.json").unlink(missing_ok=True)
        for role in ROLES:
            _start(d, state, host, role)
    write_state(d, state)
    return wait_registered(d, hosts, wait_s)


def agent_entry(directory: str | Path | None, host: str, role: str) -> dict[str, Any]:
    """The state entry of ``<host>.<role>``.

    Raises:
        LabError: that agent is not running.
    """
    entry = read_state(lab_dir(directory)).get("processes", {}).get(f"{host}.{role}")
    if not entry or not procs.alive(entry):
        raise LabError(f"the {role} of {host} is not running; start the agents first")
    return entry
