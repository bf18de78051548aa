"""Node bundles for ``fabricscope diagnose``: a directory of logs (not a sysfs root) and gzip logs give the
same findings as the files one by one; archives are untrusted (size and ratio caps, symlinks not followed)."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

from diagnose import run
from diagnose.correlate import correlate
from diagnose.run import diagnose_paths, is_sysfs_root, read_paths

from conftest import REPO

FIX = REPO / "tests" / "diagnose" / "fixtures" / "artifacts"
SYSFS = REPO / "tests" / "fixtures" / "hostping" / "sysfs_dgx_a100"
NODE = ["ibstat_cx7_down_polling.txt", "ulimit_a_memlock_64k.txt", "mlxup_query_update_required.txt",
        "dmesg_mlx4_upgrade_fw_lso.txt", "rdma_link_flapping_samples.txt"]


def summary(findings) -> list[tuple[str, str, str, str]]:
    return sorted((f.kind, f.location, f.severity, Path(f.source.rsplit(":", 1)[0]).name) for f in findings)


def test_a_sysfs_tree_is_a_sysfs_root_and_a_folder_of_logs_is_not(tmp_path):
    assert is_sysfs_root(SYSFS)
    assert not is_sysfs_root(tmp_path)
    (tmp_path / "class").mkdir()
    assert not is_sysfs_root(tmp_path)  # 'class/' alone may be a log folder's name
    (tmp_path / "devices").mkdir()
    assert is_sysfs_root(tmp_path)
    assert [i.read_as for i in read_paths([SYSFS]).inputs] == ["sysfs root"]


def test_a_directory_of_logs_gives_the_findings_of_its_files_one_by_one(tmp_path):
    node = tmp_path / "node-a"
    (node / "sub").mkdir(parents=True)
    for k, name in enumerate(NODE):
        shutil.copy(FIX / name, (node / "sub" if k % 2 else node) / name)
    one_by_one = summary(f for name in NODE for f in diagnose_paths([FIX / name]))
    reading = read_paths([node])
    assert summary(correlate(reading.artifacts)) == one_by_one
    assert [(i.read_as, i.files) for i in reading.inputs] == [("log directory", 5)]
    assert reading.unread == []
    assert {"port_down", "memlock_limit", "firmware_update_available", "firmware_too_old", "port_flapping"} <= {
        k for k, *_ in one_by_one}


def test_a_gzip_log_reads_like_the_plain_file(tmp_path):
    gz = tmp_path / "nvidia-bug-report.log.gz"
    text = "".join((FIX / n).read_text() for n in NODE[:3])
    gz.write_bytes(gzip.compress(text.encode()))
    plain = tmp_path / "nvidia-bug-report.log"
    plain.write_text(text)
    assert [(k, loc) for k, loc, *_ in summary(diagnose_paths([gz]))] == [
        (k, loc) for k, loc, *_ in summary(diagnose_paths([plain]))]
    assert read_paths([gz]).inputs[0].read_as == "gzip file"


def test_a_gzip_bomb_stops_at_the_ratio_cap(tmp_path):
    bomb = tmp_path / "bomb.log.gz"
    bomb.write_bytes(gzip.compress(b"A" * 2_000_000))  # ~2 KB expanding 1000x
    r = read_paths([bomb])
    assert r.artifacts == [] and len(r.unread) == 1
    assert "expands past" in r.unread[0].reason and f"{run.MAX_RATIO}x" in r.unread[0].reason


def test_a_file_over_the_size_cap_is_unread_not_loaded(tmp_path, monkeypatch):
    monkeypatch.setattr(run, "MAX_TEXT_BYTES", 100)
    big = tmp_path / "dmesg.txt"
    big.write_text("x" * 101)
    [u] = read_paths([big]).unread
    assert "cap" in u.reason and u.source == str(big)


def test_symlinks_in_a_bundle_are_not_followed(tmp_path):
    outside = tmp_path / "outside.txt"
    shutil.copy(FIX / "ibstat_cx7_down_polling.txt", outside)
    node = tmp_path / "node"
    node.mkdir()
    (node / "link.txt").symlink_to(outside)
    (node / "linkdir").symlink_to(tmp_path, target_is_directory=True)
    r = read_paths([node])
    assert r.artifacts == [] and r.inputs[0].files == 0


def test_too_many_files_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(run, "MAX_FILES", 2)
    for k in range(3):
        (tmp_path / f"{k}.log").write_text("x\n")
    with pytest.raises(ValueError, match="more than 2 files"):
        read_paths([tmp_path])


def _tar(path: Path, members: dict[str, bytes], mode: str = "w:xz") -> Path:
    import io
    import tarfile

    with tarfile.open(path, mode) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_a_sosreport_style_tarball_gives_the_findings_of_its_files_one_by_one(tmp_path):
    members = {f"sosreport-node-a/sos_commands/{n}": (FIX / n).read_bytes() for n in NODE}
    tar = _tar(tmp_path / "sosreport-node-a-2026.tar.xz", members)
    reading = read_paths([tar])
    one_by_one = summary(f for name in NODE for f in diagnose_paths([FIX / name]))
    assert summary(correlate(reading.artifacts)) == one_by_one
    assert [(i.read_as, i.files) for i in reading.inputs] == [("tar archive", 5)]
    assert reading.unread == []
    assert reading.artifacts[0].source.startswith(f"{tar}!sosreport-node-a/sos_commands/")


def test_tar_members_that_climb_out_or_link_away_are_never_followed(tmp_path):
    import io
    import tarfile

    path = tmp_path / "evil.tar"
    with tarfile.open(path, "w") as tar:
        data = (FIX / "ibstat_cx7_down_polling.txt").read_bytes()
        info = tarfile.TarInfo("../../etc/ibstat.txt")  # read in memory, never written anywhere
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("passwd")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
    r = read_paths([path])
    assert r.inputs[0].files == 1  # the symlink is skipped
    assert [f.kind for a in r.artifacts for f in a.findings] == ["port_down"]
    assert not (tmp_path.parent.parent / "etc" / "ibstat.txt").exists()


def test_a_tar_bomb_stops_at_the_ratio_cap(tmp_path):
    tar = _tar(tmp_path / "bomb.tar.xz", {"dmesg.txt": b"A" * 5_000_000})  # a few KB expanding past 100x
    [u] = read_paths([tar]).unread
    assert "past the caps" in u.reason or "expands past" in u.reason


def test_a_tarball_inside_a_log_directory_is_read_too(tmp_path):
    node = tmp_path / "node"
    node.mkdir()
    shutil.copy(FIX / "ulimit_a_memlock_64k.txt", node / "ulimit.txt")
    _tar(node / "sosreport.tar.gz", {"sos_commands/ibstat": (FIX / "ibstat_cx7_down_polling.txt").read_bytes()},
         "w:gz")
    found = summary(diagnose_paths([node]))
    assert [(k, loc) for k, loc, *_ in found] == [("memlock_limit", "host"), ("port_down", "mlx5_10/1")]
