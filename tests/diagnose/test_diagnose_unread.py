"""What ``fabricscope diagnose`` could not read is named per file and per section (``diagnose.unread``)."""

from __future__ import annotations

from diagnose.registry import COLLECTORS
from diagnose.run import read_paths
from diagnose.unread import Unread, guess, sections, unread_sections

from conftest import REPO

FIX = REPO / "tests" / "diagnose" / "fixtures" / "artifacts"
DETECT = [c.detect for c in COLLECTORS]


def test_sections_cut_at_shell_prompts_of_every_common_form():
    text = ("intro\n$ ibstat\nCA 'mlx5_0'\nroot@host-a:~# ethtool -i eth0\ndriver: mlx5_core\n"
            "[root@n1 ~]# rdma link\nx\n")
    assert [(a, b, cmd) for a, b, cmd, _ in sections(text)] == [
        (1, 1, ""), (2, 3, "ibstat"), (4, 5, "ethtool -i eth0"), (6, 7, "rdma link")]
    # a '# Size' header in program output is not a prompt (the UCX fixture's OSU table)
    assert len(sections((FIX / "ucx_create_cq_enomem_64k.txt").read_text())) == 1


def test_an_unrecognised_section_between_read_ones_is_named_with_its_command_and_range():
    # nvidia-smi -q as netdata/netdata#4892 shows its head (only its CSV --query-gpu form is read)
    text = ((FIX / "rdma_link_show_active.txt").read_text()
            + "[root@node75 ~]# nvidia-smi -q\n==============NVSMI LOG==============\n\n"
            + "Timestamp                           : Sat Dec  1 23:45:21 2018\n"
            + "Driver Version                      : 410.72\n")
    parts = unread_sections(text, "paste.txt", DETECT, read_any=True)
    assert parts == [Unread("paste.txt", 4, 8, 4, "output of `nvidia-smi -q`, nvidia-smi -q (only its PCIe link "
                                                   "fields are read, through --query-gpu CSV)")]
    assert parts[0].describe().startswith("paste.txt:4-8 (4 lines): no collector recognised this; looked like")
    # the same paste with nvidia-smi nvlink -s instead: read by the nvlink collector, nothing unread
    nvl = (FIX / "rdma_link_show_active.txt").read_text() + "[root@node75 ~]# " + (
        FIX / "nvlink_s_v100_inactive_links.txt").read_text()
    assert unread_sections(nvl, "paste.txt", DETECT, read_any=True) == []


def test_a_file_fully_read_has_no_unread_part_and_an_unread_one_is_whole():
    assert unread_sections((FIX / "ibstat_cx7_down_polling.txt").read_text(), "f", DETECT, read_any=True) == []
    [u] = unread_sections("==============NVSMI LOG==============\n\nAttached GPUs : 1\n", "f", DETECT, False)
    assert (u.first_line, u.last_line, u.lines) == (1, 3, 2) and u.looked_like.startswith("nvidia-smi -q")


def test_guess_names_known_unread_kinds():
    assert guess("==============NVSMI LOG==============\n").startswith("nvidia-smi -q")
    assert guess("-I- ibdiagnet fabric scan\n", "ibdiagnet") == "output of `ibdiagnet`, ibdiagnet output"
    assert guess("nothing known\n") == ""


def test_binary_input_is_unread_with_its_reason(tmp_path):
    blob = tmp_path / "core.bin"
    blob.write_bytes(b"\xff\xfe\x00\x01" * 8)
    r = read_paths([blob])
    assert r.artifacts == [] and [(u.source, u.reason) for u in r.unread] == [(str(blob), "not UTF-8 text")]
