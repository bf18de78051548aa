"""Hostping agent side (Liu et al., NSDI 2023): one hardware source per module.

Each reader takes a captured text or a root directory (like node_exporter's
``--path.sysfs``) so a snapshot taken on a GPU host can be analysed anywhere. The readers
below are shared with ``fabricscope diagnose`` (the :mod:`diagnose` room imports them from
here; the ``diagnose``-only collectors and rules live there).

- :mod:`.findings`     the :class:`Finding` every rule returns
- :mod:`.pcie_link`    one rule for a PCIe link's speed/width against its capability
- :mod:`.sysfs`        captured or live sysfs files (``tail -v``, ``grep ""``, a root dir)
- :mod:`.sysfs_pcie`   sysfs PCIe link files, walked up to the root port
- :mod:`.aer_sysfs`    sysfs AER counters (``aer_dev_*``)
- :mod:`.ethtool`      ``ethtool -S`` per-priority counters and physical-layer errors (also a collector)
- :mod:`.hw_counters`  RDMA ``hw_counters`` / ``counters`` and their deltas
- :mod:`.rnic_config`  ``mlxreg ROCE_ACCL`` registers (slow start, TX window; also a collector)
- :mod:`.monitor`      hardware monitor: counter rates, idle/busy status, loopback triggers
- :mod:`.intrahost_topology` intra-host PCIe tree from sysfs or hwloc XML, affinitive endpoints
- :mod:`.nvml`         GPU link generation/width through NVML (fails clearly without a GPU)
- :mod:`.loopback`     the loopback engine's arithmetic (Eq. 1-3) and its device check
- :mod:`.simhost`      a simulated host with injectable bottlenecks (bandwidth matrices)

The host agent on a real host (``fabricscope hostping agent``), every reader over ``--path.sysfs``:

- :mod:`.pci_inventory` every PCI function under ``/sys/bus/pci/devices``
- :mod:`.numa`         NUMA nodes (CPUs, memory)
- :mod:`.rnics`        RDMA devices: PCI address, netdevs, port rate and state
- :mod:`.netdev`       ``/sys/class/net/*/statistics`` counters
- :mod:`.perf_event`   ``perf_event_open(2)`` through ctypes
- :mod:`.uncore`       uncore PMUs (IMC, UPI, IIO): discovery, event encoding, bus bandwidth
- :mod:`.discovery`    all of the above, once, plus the topology and NVML's GPUs
- :mod:`.hwmon`        the 1 s hardware monitor: ``hostmetric.v2`` rows from two readings
- :mod:`.loopback_verbs` the verbs loopback engine (RC QP connected to itself) over a device protocol
- :mod:`.agent`        publish once, monitor, host status, loopback triggers
- :mod:`.gpu_check`    ``scripts/gpu-check``: the readers for 30 s on a GPU host, as JSON
"""
