"""``fabricscope diagnose``: operator artifacts (command outputs, logs, sysfs trees) -> findings.

A room of its own, apart from the host agent (``producers/hostping``). Two stages:

- :mod:`.registry`     the one list of collectors (``detect``/``parse``/``findings``), the
  :class:`~diagnose.registry.Artifact` each yields, and the host a text comes from;
- :mod:`.collectors`   one module per input kind (``lspci -vvv``, dmesg, NCCL and UCX logs, ...);
- :mod:`.correlate`    the second stage: rules across artifacts (GIDs -> hosts, PHY + module
  events, MTU of both ends, lossy RoCE over :mod:`.lossy_roce`);
- :mod:`.verbs_status` IBV_WC_* statuses, mlx5 vendor syndromes, async events, errno of verbs calls;
- :mod:`.run`          both stages over a set of files and sysfs roots.

Readers the host agent also uses stay in :mod:`producers.hostping`, where the agent imports
them, and this room imports them from there: the :class:`~producers.hostping.findings.Finding`
every rule returns, the PCIe link rule (``pcie_link``), sysfs snapshots (``sysfs``,
``sysfs_pcie``, ``aer_sysfs``, ``hw_counters``) and two collectors the agent reads at run time
(``ethtool`` for ``ethtool -S``, ``rnic_config`` for ``mlxreg ROCE_ACCL``). The agent never
imports this room. Inputs read and findings emitted: ``docs/diagnose.md``.
"""
