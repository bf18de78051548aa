"""Hostping agent side (Liu et al., NSDI 2023): one hardware source per module.

Each reader takes a captured text or a root directory (like node_exporter's
``--path.sysfs``) so a snapshot taken on a GPU host can be analysed anywhere.

- :mod:`.findings`     the :class:`Finding` every rule returns
- :mod:`.pcie_link`    one rule for a PCIe link's speed/width against its capability
- :mod:`.lspci`        ``lspci -vvv``: LnkCap/LnkCap2/LnkCtl2/LnkSta, ACSCtl, ATSCtl
- :mod:`.sysfs`        captured or live sysfs files (``tail -v``, ``grep ""``, a root dir)
- :mod:`.sysfs_pcie`   sysfs PCIe link files, walked up to the root port
- :mod:`.aer_sysfs`    sysfs AER counters (``aer_dev_*``)
- :mod:`.ethtool`      ``ethtool -S`` per-priority counters
- :mod:`.hw_counters`  RDMA ``hw_counters`` / ``counters`` and their deltas
- :mod:`.lossy_roce`   the rule over ethtool + hw_counters (RoCE not on a PFC class)
- :mod:`.dmesg`        kernel AER lines and NVIDIA Xid events
- :mod:`.nccl_log`     NCCL WARN lines: async port error, completion errors, socket errors
- :mod:`.nccl_pairs`   nccl-tests pair tables, voting over hosts
- :mod:`.rnic_config`  ``mlxreg ROCE_ACCL`` registers (slow start, TX window)
- :mod:`.monitor`      hardware monitor: counter rates, idle/busy status, loopback triggers
- :mod:`.diagnose`     every parser above over a set of files
- :mod:`.topology`     intra-host PCIe tree from sysfs or hwloc XML, affinitive endpoints
- :mod:`.nvml`         GPU link generation/width through NVML (fails clearly without a GPU)
- :mod:`.loopback`     the loopback engine's arithmetic (Eq. 1-3) and its device check
- :mod:`.simhost`      a simulated host with injectable bottlenecks (bandwidth matrices)
"""
