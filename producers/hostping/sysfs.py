"""Sysfs files as a mapping ``absolute sysfs path -> content``, live or captured.

Three sources give the same :class:`SysfsSnapshot`:

- a root directory (node_exporter's ``--path.sysfs``; default ``/sys``), read lazily;
- ``tail -v -n +1 FILE...`` output (``==> path <==`` headers);
- ``grep "" FILE...`` output (``path:value`` lines);
- ``cat FILE`` transcripts (a ``cat /sys/...`` line, then the content up to a blank line).

Readers (:mod:`.sysfs_pcie`, :mod:`.hw_counters`, :mod:`.intrahost_topology`) only ask the
snapshot for paths below ``/sys``, so a capture from a GPU host is analysed the
same way as the live tree.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

_TAIL = re.compile(r"^==> (?P<path>/sys/\S+) <==$")
# The file name has no colon; directories may (``pci0000:00``), so match up to the last one.
_GREP = re.compile(r"^(?P<path>/sys/(?:[^\s/]+/)*[^/:\s]+):(?P<val>.*)$")
_CAT = re.compile(r"^(?:[>$#]\s*)?cat\s+(?P<path>/sys/\S+)$")


@dataclass
class SysfsSnapshot:
    """Files below ``/sys`` (keys are absolute paths such as ``/sys/bus/pci/devices/X/class``).

    ``root`` is set for a live tree: lookups missing from ``files`` are read from disk
    below it and symlinks are resolved there. ``lines`` gives the capture line of a path.
    """

    files: dict[str, str] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)
    root: Path | None = None

    @classmethod
    def from_root(cls, root: str | os.PathLike[str] = "/sys") -> SysfsSnapshot:
        """A live (or copied) sysfs tree. Raises FileNotFoundError naming the root if it is missing."""
        p = Path(root)
        if not p.is_dir():
            raise FileNotFoundError(f"sysfs root {p} is not a directory; pass --path.sysfs pointing at /sys or a copy")
        return cls(root=p)

    @classmethod
    def from_text(cls, text: str) -> SysfsSnapshot:
        """Parse ``tail -v`` and ``grep ""`` captures; other lines are ignored."""
        snap = cls()
        current: str | None = None
        for n, raw in enumerate(text.splitlines(), start=1):
            line = raw.strip()
            t = _TAIL.match(line) or _CAT.match(line)
            if t:
                current = t["path"]
                snap.lines[current] = n
                continue
            g = _GREP.match(line)
            if g:
                snap.files[g["path"]] = g["val"].strip()
                snap.lines[g["path"]] = n
                current = None
                continue
            if current is not None and line:
                prev = snap.files.get(current)
                snap.files[current] = line if prev is None else prev + "\n" + line
            elif current is not None and current in snap.files:
                current = None
        return snap

    def _disk(self, path: str) -> Path | None:
        if self.root is None:
            return None
        rel = path.removeprefix("/sys").lstrip("/")
        return self.root / rel

    def read(self, path: str) -> str | None:
        """Content of one file (stripped), or ``None`` if the snapshot lacks it or it is unreadable."""
        if path in self.files:
            return self.files[path]
        disk = self._disk(path)
        if disk is None:
            return None
        try:
            return disk.read_text().strip()
        except OSError:
            return None

    def listdir(self, path: str) -> list[str]:
        """Names directly below ``path`` (captured keys, or the live directory)."""
        prefix = path.rstrip("/") + "/"
        names = {k[len(prefix) :].split("/", 1)[0] for k in self.files if k.startswith(prefix)}
        disk = self._disk(path)
        if disk is not None and disk.is_dir():
            names.update(os.listdir(disk))
        return sorted(names)

    def realpath(self, path: str) -> str:
        """Resolve symlinks of a live tree into a ``/sys/...`` path; captured paths are returned as is."""
        disk = self._disk(path)
        if disk is None or self.root is None:
            return path
        resolved = Path(os.path.realpath(disk))
        try:
            return "/sys/" + str(resolved.relative_to(Path(os.path.realpath(self.root))))
        except ValueError:
            return path


def detect(text: str) -> bool:
    """True when the text holds a ``tail -v`` or ``grep ""`` capture of sysfs files."""
    return any(_TAIL.match(x.strip()) or _GREP.match(x.strip()) or _CAT.match(x.strip()) for x in text.splitlines())
