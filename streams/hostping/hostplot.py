"""The bandwidth matrix as a PNG, coloured like Hostping Figure 8: green normal, red abnormal,
grey not tested/uncertain; each cell shows its bandwidth in Gb/s."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import ListedColormap  # noqa: E402

from streams.hostping.hostlink import BandwidthMatrix  # noqa: E402

_COLOURS = ListedColormap(["#d9534f", "#5cb85c", "#b0b0b0"])  # abnormal, normal, untested


def save_matrix_png(m: BandwidthMatrix, states: np.ndarray, path: str | Path, title: str = "") -> Path:
    """Write the matrix to ``path`` (PNG); ``states`` is 1 normal, 0 abnormal, NaN untested. Returns the path."""
    code = np.where(np.isnan(states), 2, states).astype(int)
    fig, ax = plt.subplots(figsize=(1 + 0.8 * len(m.endpoints), 1 + 0.5 * len(m.rnics)), dpi=100)
    ax.imshow(code, cmap=_COLOURS, vmin=0, vmax=2, aspect="auto")
    ax.set_xticks(range(len(m.endpoints)), m.endpoints, rotation=45, ha="right")
    ax.set_yticks(range(len(m.rnics)), m.rnics)
    for i in range(len(m.rnics)):
        for j in range(len(m.endpoints)):
            v = m.gbps[i, j]
            ax.text(j, i, "-" if np.isnan(v) else f"{v:.0f}", ha="center", va="center", fontsize=8)
    ax.set_title(title or "loopback bandwidth (Gb/s)")
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, format="png")
    plt.close(fig)
    return out
