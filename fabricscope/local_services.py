"""The local services fabricscope starts for a user: the Kafka broker (``infra/kafka/kafka.sh``) and the lab's needs.

``up`` and ``demo`` start the local broker when none answers and stop it when they started it;
the ``kafka`` commands call the same script.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from fabricscope.settings import Settings

REPO_ROOT = Path(__file__).resolve().parents[1]
KAFKA_SH = REPO_ROOT / "infra" / "kafka" / "kafka.sh"


def kafka_script(action: str, settings: Settings, to_stderr: bool = False) -> int:
    """Run ``infra/kafka/kafka.sh ACTION`` (start, stop, status) for the local broker ``KAFKA_BOOTSTRAP``
    names (its port; the controller on the next port unless ``KAFKA_CONTROLLER_PORT`` is set); returns
    its exit code. ``to_stderr`` keeps its messages off stdout (machine output)."""
    env = {**os.environ, "FABRICSCOPE_VAR": str(settings.fabricscope_var.resolve())}
    host, _, port = settings.kafka_bootstrap.split(",")[0].rpartition(":")
    if host in ("127.0.0.1", "localhost") and port.isdigit() and port != "9092":
        env.setdefault("KAFKA_PORT", port)
        env.setdefault("KAFKA_CONTROLLER_PORT", str(int(port) + 1))
    return subprocess.call(["bash", str(KAFKA_SH), action], env=env, stdout=sys.stderr if to_stderr else None)


def kafka_answers(bootstrap: str) -> bool:
    """Whether a broker accepts TCP at the first bootstrap address (quick: no client, no noise)."""
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=2.0):
            return True
    except (OSError, ValueError):
        return False


def lab_available() -> bool:
    """Root and working network namespaces: what the netns fabric lab needs."""
    if os.geteuid() != 0:
        return False
    return subprocess.run(["ip", "netns", "list"], capture_output=True).returncode == 0
