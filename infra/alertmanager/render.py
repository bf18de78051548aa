"""Render ``infra/alertmanager/alertmanager.yml`` with receiver URLs from the environment or files.

``${NAME}`` in a receiver entry is replaced by ``$NAME``, or by the contents of the
file named by ``$NAME_FILE``; an entry whose variable has no value is dropped. The
output is written with mode 0600 and no URL is ever printed (only which receivers
are configured, by name).

Usage: python -m infra.alertmanager.render OUT.yml   (reads the process environment)
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path

import yaml

TEMPLATE = Path(__file__).with_name("alertmanager.yml")
_VAR = re.compile(r"^\$\{([A-Z0-9_]+)\}$")


def secret(name: str, env: Mapping[str, str]) -> str | None:
    """The value of ``name`` from ``env``, or from the file ``env[name + '_FILE']``; None when unset."""
    if env.get(name):
        return env[name].strip()
    path = env.get(f"{name}_FILE")
    if path:
        return Path(path).read_text().strip() or None
    return None


def _fill(entry: dict, env: Mapping[str, str]) -> dict | None:
    out = {}
    for key, value in entry.items():
        m = _VAR.match(value) if isinstance(value, str) else None
        if m:
            value = secret(m.group(1), env)
            if value is None:
                return None
        out[key] = value
    return out


def render(env: Mapping[str, str], template: Path = TEMPLATE, timings: Mapping[str, str] | None = None) -> dict:
    """The config as a dict, URLs filled in and unset entries dropped.

    Args:
        env: where ``FABRICSCOPE_*_WEBHOOK_URL`` (or ``*_FILE``) are looked up.
        template: the YAML template.
        timings: optional overrides of ``group_wait``/``group_interval``/``repeat_interval`` on
            every route (tests run the shipped routes on a seconds scale).
    """
    cfg = yaml.safe_load(template.read_text())
    for receiver in cfg.get("receivers", []):
        for kind in [k for k in receiver if k.endswith("_configs")]:
            kept = [e for e in (_fill(x, env) for x in receiver[kind]) if e is not None]
            if kept:
                receiver[kind] = kept
            else:
                del receiver[kind]
    if timings:
        for route in [cfg["route"], *cfg["route"].get("routes", [])]:
            for k, v in timings.items():
                if k in route or route is cfg["route"]:
                    route[k] = v
    return cfg


def configured(cfg: dict) -> list[str]:
    """``receiver/kind`` names that have at least one entry (safe to print)."""
    return [f"{r['name']}/{k}" for r in cfg.get("receivers", []) for k in r if k.endswith("_configs")]


def write(cfg: dict, out: Path) -> None:
    """Write ``cfg`` to ``out`` readable by the owner only."""
    out.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump(cfg, f, sort_keys=False)
    os.chmod(out, 0o600)


def main() -> None:
    """Render to ``sys.argv[1]`` and print the configured receivers by name."""
    cfg = render(os.environ)
    write(cfg, Path(sys.argv[1]))
    print("alertmanager receivers configured: " + (", ".join(configured(cfg)) or "none (alerts are only kept)"))


if __name__ == "__main__":
    main()
