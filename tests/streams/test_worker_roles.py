"""Worker roles: the CLI's list is the runtime's, and a wrong role stops before anything starts."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fabricscope.choices import WORKER_ROLES
from streams.runtime.config import ROLES, RuntimeConfig

from conftest import REPO


def test_cli_roles_are_the_runtime_roles():
    assert WORKER_ROLES == ROLES == ("all", "stream", "reducer")


def test_runtime_config_refuses_an_unknown_role():
    assert RuntimeConfig(role="reducer").role == "reducer"
    with pytest.raises(ValueError, match="worker role 'reduce': expected one of all, stream, reducer"):
        RuntimeConfig(role="reduce")


def test_worker_with_an_unknown_role_is_a_usage_error():
    p = subprocess.run([sys.executable, "-m", "fabricscope", "worker", "--role", "reduce"], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    assert "'reduce' is not one of 'all', 'stream', 'reducer'" in p.stderr
