"""Build and tear down the fabric lab: network namespaces, veth pairs, ECMP routes.

Every namespace is named ``<prefix><node>`` and listed in a state file
(``<lab_dir>/state.json``) before it is created, so :func:`down` removes
everything, also after a crash; it also sweeps any namespace with the prefix.

Building runs in a process of its own (:mod:`infra.lab.build`): pyroute2's namespace helpers
fork their caller, and this process may hold threads, a broker and signal handlers. Tear-down
(``ip netns`` removal, killing the namespaces' processes) forks nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from pyroute2 import netns

from infra.lab import procs
from infra.lab.layout import Fabric, LabSpec, plan
from infra.process_group import kill_group
from infra.runlock import Busy, RunLock, holder, note

DEFAULT_LAB_DIR = Path("var/lab")
STATE_FILE = "state.json"

class LabError(RuntimeError):
    """The lab cannot be built or reached; the message says what to do."""


def lab_dir(path: str | os.PathLike[str] | None = None) -> Path:
    """The lab's state directory: ``path``, ``$FABRICSCOPE_LAB_DIR``, ``$FABRICSCOPE_VAR/lab`` or ``./var/lab``.

    ``$FABRICSCOPE_VAR`` counts because ``fabricscope up`` builds its lab there: ``lab fault`` in the
    same environment must find it."""
    if path or os.environ.get("FABRICSCOPE_LAB_DIR"):
        return Path(path or os.environ["FABRICSCOPE_LAB_DIR"])
    var = os.environ.get("FABRICSCOPE_VAR")
    return Path(var) / "lab" if var else DEFAULT_LAB_DIR


def read_state(directory: Path) -> dict[str, Any]:
    """The state file as a dict, ``{}`` when there is none."""
    f = directory / STATE_FILE
    if not f.exists():
        return {}
    try:
        return json.loads(f.read_text())
    except json.JSONDecodeError as e:
        raise LabError(f"{f} is not valid JSON ({e}); run `fabricscope lab down --force` to sweep") from e


def private_dir(directory: Path) -> None:
    """Create the lab directory readable by its owner only (0700): its state names every process, its
    agent configs may hold Kafka credentials. An existing one we own is tightened too."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    if directory.stat().st_uid == os.geteuid():
        os.chmod(directory, 0o700)


def write_state(directory: Path, state: dict[str, Any]) -> None:
    """Write the state file atomically (rename), so a crash leaves the old or the new one."""
    private_dir(directory)
    tmp = directory / (STATE_FILE + ".tmp")
    tmp.write_text(json.dumps(state, indent=1, sort_keys=True))
    tmp.replace(directory / STATE_FILE)


_held: dict[str, RunLock] = {}  # lab prefix -> the lock this process holds while its lab runs


def lab_lock_path(prefix: str) -> Path:
    """The machine-wide lock of the labs named ``<prefix>*`` (namespaces are machine-wide, not per directory)."""
    base = Path("/run/lock") if os.access("/run/lock", os.W_OK) else Path(tempfile.gettempdir())
    return base / f"fabricscope-lab-{prefix}.lock"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def check_not_foreign(prefix: str, directory: Path) -> None:
    """Refuse to touch a lab named ``<prefix>*`` that another process or another state directory runs.

    A lab is foreign when another live process holds its lock (a running ``fabricscope up`` or
    ``demo``), or when its namespaces exist, were made from another state directory, and that
    directory's agents still run. A lab whose maker died (no lock holder, no live agents) is not
    foreign: it is swept.

    Raises:
        LabError: the lab is foreign; the message names the pid or directory and how to stop it.
    """
    path = lab_lock_path(prefix)
    pid = holder(path)
    if pid is not None and pid != os.getpid():
        raise LabError(f"the lab {prefix}* is in use by pid {pid} ({_cmdline(pid)}); not touching it. Stop that "
                       "process first (Ctrl-C); a second lab beside it needs another namespace prefix and "
                       "state directory: `fabricscope lab up --prefix OTHER- --dir DIR`")
    if pid is not None or not lab_namespaces(prefix):
        return
    made_from = note(path)
    if not made_from or Path(made_from) == directory.resolve():
        return
    try:
        entries = read_state(Path(made_from)).get("processes", {})
    except LabError:
        return
    live = sorted(n for n, e in entries.items() if procs.alive(e))
    if live:
        raise LabError(f"a lab {prefix}* made from {made_from} is running ({len(live)} agent processes); not "
                       f"touching it. Stop it with `fabricscope lab down --dir {made_from}` first")


def _claim(prefix: str, directory: Path) -> None:
    if prefix in _held:
        return
    try:
        _held[prefix] = RunLock(lab_lock_path(prefix), f"the lab {prefix}*", note=str(directory.resolve())).acquire()
    except Busy as b:
        raise LabError(str(b)) from None


def release(prefix: str) -> None:
    """Drop this process's claim on the lab ``<prefix>*`` (it stays up; another may now take it over)."""
    lock = _held.pop(prefix, None)
    if lock is not None:
        lock.release()


def check_privileges() -> None:
    """Raise :class:`LabError` unless we are root and can create network namespaces."""
    if os.geteuid() != 0:
        raise LabError("the fabric lab needs root (network namespaces); rerun as root or use --source sim")
    if not Path("/proc/self/ns/net").exists():
        raise LabError("this kernel has no network namespaces; use --source sim")


def ns_exec(ns: str, argv: list[str], *, input: str | None = None, check: bool = True) -> str:
    """Run ``argv`` inside namespace ``ns`` (``ip netns exec``) and return its stdout.

    Raises:
        LabError: the command failed; the message carries its stderr.
    """
    p = subprocess.run(["ip", "netns", "exec", ns, *argv], input=input, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise LabError(f"in {ns}: {' '.join(argv)} failed ({p.returncode}): {p.stderr.strip()}")
    return p.stdout


def up(spec: LabSpec | None = None, directory: str | os.PathLike[str] | None = None) -> Fabric:
    """Build the lab fabric described by ``spec``; returns the :class:`Fabric` plan.

    Takes about 1.5 s for Panel 1 (13 namespaces). Removes a previous lab with
    the same state directory first.

    Raises:
        LabError: not root, no netns, or a kernel call failed (the lab is torn down).
    """
    check_privileges()
    d = lab_dir(directory)
    fab = plan(spec)
    check_not_foreign(fab.spec.prefix, d)
    down(d, fab.spec.prefix)  # only this lab's prefix: another lab may run beside it
    _claim(fab.spec.prefix, d)  # held until down() or this process exits
    state: dict[str, Any] = {
        "spec": fab.spec.__dict__,
        "namespaces": [fab.netns(n) for n in fab.nodes],
        "created_ns": time.time_ns(),
        "processes": {},
        "faults": [],
    }
    write_state(d, state)
    try:
        _build_in_child(d)
    except BaseException as e:
        down(d)
        if isinstance(e, Exception):
            raise LabError(f"building the lab failed and was torn down: {e}") from e
        raise
    state["address_names"] = fab.address_names()
    (d / "inventory.yaml").write_text(yaml.safe_dump(fab.inventory_dict(), sort_keys=False))
    state["inventory"] = str(d / "inventory.yaml")
    state["ready"] = True
    write_state(d, state)
    return fab


BUILD_TIMEOUT_S = 120.0
"""The longest a lab build may take (Panel 1 takes about 2 s; a 64-host lab about 20 s)."""


def _build_in_child(directory: Path) -> None:
    """Run :mod:`infra.lab.build` on ``directory``'s state in a process group of its own and wait.

    Interrupted (KeyboardInterrupt from SIGINT/SIGTERM) or timed out, the whole group is killed
    before the exception goes on, so no helper of it outlives the build.

    Raises:
        LabError: the build failed (its one-line error) or overran :data:`BUILD_TIMEOUT_S`.
    """
    argv = [sys.executable, "-m", "infra.lab.build", str(directory), str(os.getpid())]
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         process_group=0)
    try:
        _, err = p.communicate(timeout=BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        kill_group(p)
        raise LabError(f"the lab build did not finish within {BUILD_TIMEOUT_S:.0f} s") from None
    except BaseException:
        kill_group(p)
        raise
    if p.returncode != 0:
        raise LabError(err.strip().splitlines()[-1] if err.strip() else f"lab build exited {p.returncode}")


def lab_namespaces(prefix: str) -> list[str]:
    """Existing namespaces whose name starts with ``prefix``."""
    return sorted(n for n in netns.listnetns() if n.startswith(prefix))


def down(directory: str | os.PathLike[str] | None = None, prefix: str | None = None) -> list[str]:
    """Tear the lab down: stop its processes, remove its namespaces and the state file.

    Works from the state file and also sweeps namespaces named with the lab's
    prefix (``prefix`` or the state's, default ``fs-``), so it cleans up after a
    crash. Returns the namespaces removed.

    Raises:
        LabError: another live process (``fabricscope up``, ``demo``) runs this lab; it is left alone.
    """
    d = lab_dir(directory)
    state = read_state(d) if (d / STATE_FILE).exists() else {}
    pfx = prefix or state.get("spec", {}).get("prefix") or LabSpec().prefix
    pid = holder(lab_lock_path(pfx))
    if pid is not None and pid != os.getpid():
        raise LabError(f"the lab {pfx}* is in use by pid {pid} ({_cmdline(pid)}); stop that process instead")
    procs.stop_all(d, state)
    targets = set(state.get("namespaces", [])) | set(lab_namespaces(pfx))
    removed = []
    for ns in sorted(targets):
        for pid in _ns_pids(ns):
            _kill(pid)
        if ns in netns.listnetns():
            netns.remove(ns)
            removed.append(ns)
    for stale in [*(d / "registry").glob("*.json"), *(d / "pinglists").glob("*.json")]:
        stale.unlink()  # both carry QPNs of agents that no longer run
    (d / STATE_FILE).unlink(missing_ok=True)
    release(pfx)
    return removed


def down_if_ours(directory: str | os.PathLike[str] | None = None) -> list[str] | None:
    """:func:`down`, except that a lab another live process runs is left alone: then None.

    For clean-up paths (a stop during a build that was refused, or never started), which must not raise.
    Without a state file in ``directory`` nothing of it was built: nothing is swept (a lab another
    directory made, with the same prefix, is not ours).
    """
    if not (lab_dir(directory) / STATE_FILE).exists():
        return []
    try:
        return down(directory)
    except LabError:
        return None


def _ns_pids(ns: str) -> list[int]:
    try:
        return [int(p) for p in netns.ns_pids().get(ns, [])]
    except Exception:
        return []


def _kill(pid: int) -> None:
    try:
        os.kill(pid, 18)  # SIGCONT first, so a stopped process can die
        os.kill(pid, 9)
    except ProcessLookupError:
        pass


def load(directory: str | os.PathLike[str] | None = None) -> tuple[Fabric, dict[str, Any]]:
    """The running lab's :class:`Fabric` and state.

    Raises:
        LabError: no lab is up in ``directory``; run ``fabricscope lab up``.
    """
    d = lab_dir(directory)
    state = read_state(d)
    if not state.get("ready"):
        raise LabError(f"no lab is up in {d} (no ready {STATE_FILE}); run `fabricscope lab up` first")
    return plan(LabSpec(**state["spec"])), state
