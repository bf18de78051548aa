"""`fabricscope demo --source lab`: real namespaces, real packets, real kernel timestamps, real faults,
through the real broker, Faust and chdb. Needs root and network namespaces."""

from __future__ import annotations

import pytest

from fabricscope.cmd_pipeline import lab_available
from fabricscope.demo import run_demo
from fabricscope.settings import Settings
from producers.sim.fabrics import panel1
from sinks.clickhouse import ChdbStore

pytestmark = [pytest.mark.lab, pytest.mark.kafka, pytest.mark.slow]

if not lab_available():
    pytest.skip("the lab needs root and network namespaces", allow_module_level=True)

FAULTS = ["switch-link-down", "switch-link-lossy", "partial-5tuple", "rnic-down", "host-down", "host-restart",
          "busy-host"]


def _settings(kafka_bootstrap: str) -> Settings:
    return Settings(kafka_bootstrap=kafka_bootstrap)


def _named(v: dict, truth: dict) -> bool:
    # stale_qpn is reported per RNIC; the lab's truth names the restarted host (lab RNICs follow Panel 1)
    loc = panel1().host_of(v["location"]) if v["kind"] == "stale_qpn" else v["location"]
    return v["kind"] == truth["kind"] and loc in truth["locations"]


@pytest.mark.parametrize("scenario", FAULTS)
def test_first_complete_window_names_the_injected_fault(scenario, kafka_bootstrap, tmp_path, no_fork):
    r = run_demo(_settings(kafka_bootstrap), "lab", scenario, seed=7, windows=1, var=tmp_path)
    first = r.complete_windows()
    assert first, f"no window closed after the fault; logs in {tmp_path}"
    verdicts = r.verdicts_in(first[0]["window_start_ns"])
    # kind, location and evidence only: pytest cuts a long dict before the location
    said = [(v["kind"], v["location"], v["evidence"]) for v in verdicts]
    assert any(_named(v, r.truth) for v in verdicts), (r.truth, said, tmp_path)
    if scenario == "busy-host":
        assert not [v for v in r.verdicts if v["kind"] == "rnic"], r.verdicts
    assert no_fork == []  # the lab was built and removed without forking this process


def test_busy_host_moves_responder_delay_not_network_rtt(kafka_bootstrap, tmp_path):
    # 20 s of healthy traffic first; the busy host's own baseline is its last 10 s
    r = run_demo(_settings(kafka_bootstrap), "lab", "busy-host", seed=7, windows=1, var=tmp_path, warmup_s=20)
    host = r.truth["locations"][0]
    before = f"t1 BETWEEN {r.injected_ns - 10_000_000_000} AND {r.injected_ns}"
    during = f"t1 >= {r.fault_start_ns}"
    store = ChdbStore(tmp_path / "clickhouse")

    def p50(col: str, where: str) -> float:
        # one pinglist, so that a different mix of path lengths among the answered probes does not move it
        return store.query_arrow(f"SELECT quantileExact(0.5)({col}) AS v FROM probes WHERE status = 'ok' "
                                 f"AND pinglist = 'tor_mesh' AND {where}")["v"][0].as_py()

    net = {"busy host, during": p50("network_rtt_ns", f"responder_host = '{host}' AND {during}"),
           "busy host, before": p50("network_rtt_ns", f"responder_host = '{host}' AND {before}"),
           "other hosts, during": p50("network_rtt_ns", f"responder_host != '{host}' AND {during}")}
    resp = {"before": p50("responder_delay_ns", f"responder_host = '{host}' AND {before}"),
            "during": p50("responder_delay_ns", f"responder_host = '{host}' AND {during}")}
    store.close()
    base = net["busy host, before"]
    moved_net = abs(net["busy host, during"] - base)
    moved_resp = resp["during"] - resp["before"]
    # The stops add hundreds of ms to the responder delay; had the decomposition leaked any of it into the
    # network RTT, that would move by the same order. What the network RTT does move by is kernel scheduling
    # on shared cores: queued probes answered back to back after a stop come back up to ~25 % faster
    # (CI saw 9.2 us against 11.8 us), so the band is a factor, not a few per cent.
    assert resp["during"] >= 10 * resp["before"], resp
    assert 0.5 * base <= net["busy host, during"] <= 1.5 * base, net
    assert moved_net <= moved_resp / 100, (net, resp)
    assert any(v["kind"] == "busy_host" and v["location"] == host for v in r.verdicts), r.verdicts


def test_healthy_lab_gives_no_verdict_over_three_windows(kafka_bootstrap, tmp_path):
    r = run_demo(_settings(kafka_bootstrap), "lab", "healthy", seed=7, windows=3, var=tmp_path)
    assert len(r.complete_windows()) >= 3
    assert r.verdicts == []
