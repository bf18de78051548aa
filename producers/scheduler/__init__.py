"""Jobs from the scheduler: which jobs ran on which nodes, when (docs/scheduler.md).

One backend per module, each returning :class:`producers.scheduler.jobs.Job` records:

* :mod:`producers.scheduler.slurm` — Slurm: ``squeue --json`` for running and recently finished jobs,
  the ``jobcomp/filetxt`` log for the ones that aged out of slurmctld's memory; node actions
  (``scontrol update NodeName=X State=DRAIN``) for :mod:`sinks.remediate`.

:mod:`producers.scheduler.hostlist` expands Slurm hostlists (``node[01-04,07]``);
:mod:`producers.scheduler.jobs` maps a job's nodes to hosts and RNICs through the inventory and
samples its node pairs for the service pinglist. A Kubernetes backend (pods' node placement) fits
the same :class:`~producers.scheduler.jobs.Job` record: ``nodes`` are node names, ``job_id`` the
workload's name.
"""
