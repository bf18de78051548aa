"""Render the systemd units of ``infra/systemd`` for one installation.

``@PYTHON@`` and ``@FABRICSCOPE@`` become the interpreter and console script of a virtual
environment (``/opt/fabricscope/.venv`` on a host; the checkout's ``.venv`` in the test, so that
``systemd-analyze verify`` finds every ``ExecStart``), ``@ETC@`` the configuration directory
(``fabricscope.env`` with ``KAFKA_*``/``CLICKHOUSE_URL``, mode 0600; ``agent.json``)::

    python -m infra.systemd.render --venv /opt/fabricscope/.venv --out /etc/systemd/system
"""

from __future__ import annotations

import argparse
from pathlib import Path

HERE = Path(__file__).resolve().parent
UNITS = ("fabricscope-agent@.service", "fabricscope-hostping.service", "fabricscope-worker.service",
         "fabricscope-reducer.service", "fabricscope-sink.service", "fabricscope-alerts.service")


def render(venv: Path, out: Path, etc: Path = Path("/etc/fabricscope")) -> list[Path]:
    """Write every unit into ``out`` with the paths filled in; returns the files written.

    Raises:
        FileNotFoundError: ``venv`` has no ``bin/python`` (the units would not start).
    """
    venv = Path(venv).absolute()  # not resolve(): a venv's python is a symlink systemd runs as is
    python = venv / "bin" / "python"
    if not python.exists():
        raise FileNotFoundError(f"{python} does not exist; give --venv the environment fabricscope is installed in")
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in UNITS:
        text = (HERE / name).read_text()
        text = (text.replace("@PYTHON@", str(python)).replace("@FABRICSCOPE@", str(venv / "bin" / "fabricscope"))
                .replace("@ETC@", str(etc)))
        (out / name).write_text(text)
        written.append(out / name)
    return written


def main() -> None:
    """``python -m infra.systemd.render --venv V --out DIR [--etc DIR]``."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--venv", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--etc", type=Path, default=Path("/etc/fabricscope"))
    a = ap.parse_args()
    for f in render(a.venv, a.out, a.etc):
        print(f"wrote {f}")


if __name__ == "__main__":
    main()
