"""Run every collector and cross-artifact rule over captured artifacts (the library behind ``fabricscope diagnose``).

An input is a text file (command output, log, or a field-case file mixing several
artifacts), a gzip-compressed text file (``nvidia-bug-report.log.gz``), a tar archive
(``sosreport-*.tar.xz``: its regular members, read in memory), or a directory:
a sysfs root (node_exporter's ``--path.sysfs``) when it holds ``bus/pci/devices``,
``class/infiniband``, ``class/net`` or both ``class/`` and ``devices/``, else a directory of
logs whose regular files are read one by one (:func:`is_sysfs_root` is the rule;
:attr:`Input.read_as` says which was taken).
Stage one: each collector in :data:`diagnose.registry.COLLECTORS` whose
``detect`` accepts the text parses it and applies its own rules, so one file may yield
findings from several collectors. Stage two: :mod:`diagnose.correlate` applies
the rules that span artifacts (over all inputs given together). Every finding's
``source`` names ``file:line``. What no collector recognised is kept as
:class:`~diagnose.unread.Unread` parts (per file and per section).

Inputs are untrusted: a file is read up to :data:`MAX_TEXT_BYTES` (after decompression),
a compressed file may not expand more than :data:`MAX_RATIO` times, a directory is walked
without following symlinks and up to :data:`MAX_FILES` files.
"""

from __future__ import annotations

import gzip
import lzma
import os
import tarfile
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from diagnose.correlate import correlate
from diagnose.registry import COLLECTORS, Artifact, collect_root, collect_text
from diagnose.unread import Unread, unread_sections
from producers.hostping.findings import Finding

#: The most text read from one file (after decompression), in bytes.
MAX_TEXT_BYTES = 256 * 1024 * 1024
#: The most a compressed file may expand (output bytes per input byte): a zip bomb stops here.
MAX_RATIO = 100
#: The most files read from one directory of logs.
MAX_FILES = 10_000


@dataclass(frozen=True)
class Input:
    """One path given on the command line and how it was read.

    ``read_as`` is ``file``, ``gzip file``, ``tar archive``, ``sysfs root`` or ``log directory``;
    ``files`` counts the files read under a directory or members of an archive (1 for a file).
    """

    path: str
    read_as: str
    files: int = 1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Reading:
    """Stage one over a set of paths: the artifacts, the inputs and what was not read."""

    artifacts: list[Artifact] = field(default_factory=list)
    inputs: list[Input] = field(default_factory=list)
    unread: list[Unread] = field(default_factory=list)


def diagnose_text(text: str, name: str = "<text>") -> list[Finding]:
    """All findings from one text artifact (both stages)."""
    return correlate(collect_text(text, name))


def is_sysfs_root(d: Path) -> bool:
    """A sysfs root, not a directory of logs: it holds ``bus/pci/devices``, ``class/infiniband``,
    ``class/net``, or both ``class/`` and ``devices/`` (a partial copy of /sys counts)."""
    if any((d / sub).is_dir() for sub in ("bus/pci/devices", "class/infiniband", "class/net")):
        return True
    return (d / "class").is_dir() and (d / "devices").is_dir()


def read_bounded(p: Path) -> bytes:
    """The bytes of a file, gunzipped when it is gzip, within :data:`MAX_TEXT_BYTES` and :data:`MAX_RATIO`.

    Raises:
        ValueError: the file (or what it expands to) is larger than the caps, or its gzip is corrupt
            (the message names the file and the cap).
    """
    size = p.stat().st_size
    with p.open("rb") as fh:
        magic = fh.read(2)
    if magic != b"\x1f\x8b":
        if size > MAX_TEXT_BYTES:
            raise ValueError(f"{p}: {size} bytes is more than the {MAX_TEXT_BYTES}-byte cap on one input")
        return p.read_bytes()
    cap = min(MAX_TEXT_BYTES, max(size, 1) * MAX_RATIO)
    try:
        with gzip.open(p, "rb") as gz:
            data = gz.read(cap + 1)
    except (OSError, EOFError, zlib.error) as e:
        raise ValueError(f"{p}: not a readable gzip file ({e})") from None
    if len(data) > cap:
        raise ValueError(f"{p}: expands past {cap} bytes (cap: {MAX_RATIO}x its size, at most {MAX_TEXT_BYTES})")
    return data


def _read_text(p: Path, name: str, reading: Reading) -> None:
    try:
        raw = read_bounded(p)
    except ValueError as e:
        reading.unread.append(Unread(name, 0, 0, 0, "", str(e).removeprefix(f"{p}: ")))
        return
    _read_member(raw, name, reading)


def _log_files(d: Path) -> list[Path]:
    out = []
    for top, dirs, files in os.walk(d, followlinks=False):
        dirs.sort()
        for f in sorted(files):
            p = Path(top) / f
            if p.is_symlink() or not p.is_file():  # a symlink may point out of the bundle: never followed
                continue
            out.append(p)
            if len(out) > MAX_FILES:
                raise ValueError(f"{d}: more than {MAX_FILES} files; pass the directories that matter")
    return out


def _read_tar(p: Path, reading: Reading) -> int:
    """Every regular member of a tar archive (``sosreport-*.tar.xz``, ``.tar.gz``, ``.tar``), read in memory:
    nothing is extracted, so no member path can land outside; links and devices are skipped; members and
    their total stay under the caps. Returns the number of members read."""
    budget = min(MAX_TEXT_BYTES, max(p.stat().st_size, 1) * MAX_RATIO)
    n = 0
    try:
        with tarfile.open(p, "r:*") as tar:
            for m in tar:
                if not m.isreg():  # symlinks, hard links, devices, directories: never followed
                    continue
                name = f"{p}!{m.name}"
                if m.size > budget:
                    reading.unread.append(Unread(name, 0, 0, 0, "", f"member of {m.size} bytes is past the caps "
                                                 f"({MAX_RATIO}x the archive, at most {MAX_TEXT_BYTES} bytes)"))
                    break
                n += 1
                if n > MAX_FILES:
                    raise ValueError(f"{p}: more than {MAX_FILES} members; unpack it and pass the parts that matter")
                fh = tar.extractfile(m)
                data = fh.read(budget + 1) if fh else b""
                if len(data) > budget:
                    reading.unread.append(Unread(name, 0, 0, 0, "", f"the archive expands past its cap ({MAX_RATIO}x "
                                                 f"its size, at most {MAX_TEXT_BYTES} bytes); the rest is not read"))
                    break
                budget -= len(data)
                _read_member(data, name, reading)
    except (tarfile.TarError, lzma.LZMAError, EOFError, zlib.error, OSError) as e:
        reading.unread.append(Unread(str(p), 0, 0, 0, "", f"not a readable tar archive ({e})"))
    return n


def _read_member(data: bytes, name: str, reading: Reading) -> None:
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as e:
            reading.unread.append(Unread(name, 0, 0, 0, "", f"not a readable gzip member ({e})"))
            return
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        reading.unread.append(Unread(name, 0, 0, 0, "", "not UTF-8 text"))
        return
    arts = collect_text(text, name)
    reading.artifacts += arts
    reading.unread += unread_sections(text, name, (c.detect for c in COLLECTORS), bool(arts))


def read_paths(paths: list[Path]) -> Reading:
    """Stage one over files, gzip files, sysfs roots and directories of logs, in argument order.

    Raises:
        FileNotFoundError: a path does not exist (the message names it).
        ValueError: a directory holds more than :data:`MAX_FILES` files.
    """
    reading = Reading()
    for p in paths:
        if not p.exists():
            raise FileNotFoundError(f"{p}: no such file or directory")
        if p.is_dir() and is_sysfs_root(p):
            reading.artifacts += collect_root(p, str(p))
            reading.inputs.append(Input(str(p), "sysfs root"))
        elif p.is_dir():
            files = _log_files(p)
            for f in files:
                if tarfile.is_tarfile(f):  # a bundle's own archive (a sosreport beside the logs)
                    _read_tar(f, reading)
                else:
                    _read_text(f, str(f), reading)
            reading.inputs.append(Input(str(p), "log directory", len(files)))
        elif tarfile.is_tarfile(p):
            reading.inputs.append(Input(str(p), "tar archive", _read_tar(p, reading)))
        else:
            with p.open("rb") as fh:
                gz = fh.read(2) == b"\x1f\x8b"
            _read_text(p, str(p), reading)
            reading.inputs.append(Input(str(p), "gzip file" if gz else "file"))
    return reading


def collect_paths(paths: list[Path]) -> list[Artifact]:
    """Stage one's artifacts over ``paths`` (see :func:`read_paths`).

    Raises:
        FileNotFoundError, ValueError: as :func:`read_paths`.
    """
    return read_paths(paths).artifacts


def diagnose_paths(paths: list[Path]) -> list[Finding]:
    """Findings of every file or directory in ``paths``; cross-artifact rules see all of them together.

    Raises:
        FileNotFoundError, ValueError: as :func:`read_paths`.
    """
    return correlate(collect_paths(paths))
