"""What ``fabricscope diagnose`` could not read, per file and per section, said out loud.

A pasted file often holds several command outputs, each after its shell prompt (``$ ibstat``,
``root@host:~# ethtool -i eth0``, ``[root@node ~]# rdma link``). :func:`sections` cuts a text at
those prompts; a section in which no collector's ``detect`` accepts anything is :class:`Unread`,
with its line range, its size and what it looked like (the command of its prompt, and a guess
from :data:`LOOKS_LIKE` for kinds of output that are known and not read yet). A text without
prompts is one section: unread when no collector read anything in it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

_PROMPT = re.compile(
    r"^\s*(?:\[[^\]\n]+\]\s*[#$]|[\w.-]+@[\w.-]+(?::[^\s$#]*)?\s*[#$]|\$|#(?=\s+[a-z/.]))\s+(?P<cmd>\S.*?)\s*$"
)

#: Kinds of output that are known and not read yet: (what it looked like, a pattern that shows it).
LOOKS_LIKE: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("nvidia-smi nvlink error counters (-e is not read yet)", re.compile(r"^\s*Link \d+: .*(?:Replay|Recovery|CRC)",
                                                                         re.M | re.I)),
    ("nvidia-smi -q (only its PCIe link fields are read, through --query-gpu CSV)",
     re.compile(r"^=+NVSMI LOG=+$", re.M)),
    ("ibdiagnet output", re.compile(r"ibdiagnet", re.I)),
    ("NCCL INFO lines without a problem NCCL's collector reads", re.compile(r"NCCL INFO")),
    ("lscpu / numactl output", re.compile(r"^(?:NUMA node\(s\):|available: \d+ nodes)", re.M)),
)


@dataclass(frozen=True)
class Unread:
    """A part of an input no collector recognised.

    Attributes:
        source: the file (or archive member) it is in.
        first_line, last_line: its line range, 1-based, inclusive (0, 0 for a whole file not read as text).
        lines: how many non-blank lines it holds.
        looked_like: the command of its prompt and/or a guess (``""`` when nothing is known).
        reason: why it was not read (``no collector recognised this``, ``not UTF-8 text``, ...).
    """

    source: str
    first_line: int
    last_line: int
    lines: int
    looked_like: str
    reason: str = "no collector recognised this"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        """One line for people: ``file:12-40 (29 lines): no collector recognised this; looked like ...``."""
        where = f"{self.source}:{self.first_line}-{self.last_line}" if self.first_line else self.source
        size = f" ({self.lines} line{'s' if self.lines != 1 else ''})" if self.lines else ""
        like = f"; looked like {self.looked_like}" if self.looked_like else ""
        return f"{where}{size}: {self.reason}{like}"


def sections(text: str) -> list[tuple[int, int, str, str]]:
    """``(first_line, last_line, command, text)`` per section: cut before each shell-prompt line."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if _PROMPT.match(line)]
    if not starts or starts[0] != 0:
        starts = [0, *starts]
    out = []
    for k, s in enumerate(starts):
        e = starts[k + 1] if k + 1 < len(starts) else len(lines)
        m = _PROMPT.match(lines[s]) if lines else None
        out.append((s + 1, e, m["cmd"] if m else "", "\n".join(lines[s:e])))
    return out


def guess(text: str, command: str = "") -> str:
    """What a section looked like: its command, and a known kind when one matches."""
    kind = next((what for what, pat in LOOKS_LIKE if pat.search(text)), "")
    parts = [f"output of `{command}`"] if command else []
    return ", ".join([*parts, *([kind] if kind else [])])


def unread_sections(text: str, name: str, detectors: Iterable[Callable[[str], bool]], read_any: bool) -> list[Unread]:
    """Every section of ``text`` that no detector accepts.

    ``read_any`` says whether any collector read something in the whole text: a text without
    prompts (one section) is unread only when nothing in it was read.
    """
    detectors = list(detectors)
    parts = sections(text)
    out = []
    for first, last, cmd, body in parts:
        body_lines = [x for x in body.splitlines() if x.strip()]
        if len(parts) == 1 and read_any:
            break
        if (cmd and len(body_lines) <= 1) or not body_lines:  # a prompt with no output, or blank lines
            continue
        if any(d(body) for d in detectors):
            continue
        out.append(Unread(name, first, last, len(body_lines), guess(body, cmd)))
    return out
