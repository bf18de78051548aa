"""``resource_limits`` collector: ``ulimit -a``/``-l``, ``/proc/PID/limits`` and verbs ENOMEM lines, on
real public outputs (tests/diagnose/fixtures/artifacts, sources in its README) with false-positive guards."""

from __future__ import annotations

from diagnose.collectors import resource_limits as rl
from diagnose.run import diagnose_paths, diagnose_text

from conftest import REPO

FIX = REPO / "tests" / "diagnose" / "fixtures" / "artifacts"


def found(name: str) -> list[tuple[str, str, str]]:
    out = diagnose_paths([FIX / name])
    return [(f.kind, f.location, f.severity) for f in out if f.kind.startswith(("memlock", "verbs"))]


def test_ulimit_a_with_64_kib_memlock_is_a_warning_on_that_row():
    [f] = [f for f in diagnose_paths([FIX / "ulimit_a_memlock_64k.txt"]) if f.kind == "memlock_limit"]
    assert (f.severity, f.cause, f.evidence["memlock_kbytes"]) == ("warning", "config", 64)
    assert f.source.endswith(":7")  # the 'max locked memory' row
    assert f.evidence["read_from"] == "ulimit -a"


def test_other_limits_that_look_alarming_raise_nothing():
    # open files 1024, core file size 0, stack 8192 and a 5 GB memlock (above UCX's 500 MB floor)
    assert found("ulimit_a_memlock_5g.txt") == []
    lim = rl.parse((FIX / "ulimit_a_memlock_5g.txt").read_text())
    assert lim.memlock_kb == 5128731 and lim.other["open files"] == "1024"


def test_ucx_create_cq_enomem_with_its_current_limit_is_an_error_on_the_host():
    [f] = [f for f in diagnose_paths([FIX / "ucx_create_cq_enomem_64k.txt"]) if f.kind == "memlock_limit"]
    assert (f.location, f.severity) == ("ampere", "error")
    assert f.evidence["memlock_kbytes"] == 64 and f.evidence["read_from"] == "UCX's message"
    assert f.evidence["enomem_calls"] == ["ibv_create_cq"] and f.evidence["enomem_lines"] == 2
    assert f.evidence["devices"] == ["mlx5_0"]
    assert "unlimited" in f.explanation


def test_ibv_reg_mr_fails_even_under_512_mib():
    [f] = [f for f in diagnose_paths([FIX / "ucx_reg_mr_enomem_512m.txt"]) if f.kind == "memlock_limit"]
    assert f.severity == "error" and f.evidence["memlock_kbytes"] == 524288
    assert f.evidence["enomem_calls"] == ["ibv_reg_mr"]


def test_ulimit_file_and_enomem_log_given_together_in_one_text():
    text = (FIX / "ulimit_a_memlock_64k.txt").read_text() + (FIX / "ucx_reg_mr_enomem_512m.txt").read_text()
    [f] = [f for f in diagnose_text(text, "t") if f.kind == "memlock_limit"]
    assert f.severity == "error" and f.evidence["memlock_kbytes"] == 64  # the shell's own limit is read first


def test_proc_limits_in_bytes_and_unlimited():
    # /proc/PID/limits as proc(5) documents it (no public capture found: written from the format)
    low = "Limit                     Soft Limit           Hard Limit           Units\n" \
          "Max locked memory         65536                65536                bytes\n"
    assert rl.parse(low).memlock_kb == 64
    assert [f.kind for f in rl.findings(rl.parse(low))] == ["memlock_limit"]
    high = low.replace("65536                65536", "unlimited            unlimited")
    assert rl.parse(high).memlock_unlimited and rl.findings(rl.parse(high)) == []


def test_ulimit_l_then_value_and_enomem_without_limit():
    assert rl.findings(rl.parse("$ ulimit -l\nunlimited\n")) == []
    assert [f.kind for f in rl.findings(rl.parse("$ ulimit -l\n64\n"))] == ["memlock_limit"]
    # libfabric's form, no limit in the text: the limit must be checked where the job runs
    [f] = rl.findings(rl.parse("prov/verbs: ibv_create_qp: Cannot allocate memory(12)\n"))
    assert (f.kind, f.severity) == ("verbs_enomem", "warning")


def test_nccl_lines_are_left_to_nccl_log():
    assert not rl.detect("host-a:1:2 [0] NCCL WARN Call to ibv_reg_mr failed with error Cannot allocate memory")
