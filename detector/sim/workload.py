"""The training workload: which node runs what at every tick.

Each job owns a fixed, disjoint set of nodes (``Scenario.jobs`` or, by default, four jobs of
~38/25/19/13 % of the nodes, the rest spares). A job alternates runs and idle gaps. A run
starts with a data/model load (``init``: low utilization, NFS reads), then trains in
synchronous steps (every node of the job moves together: a shared step-time wobble), and
writes a checkpoint every ``checkpoint_interval_s`` (utilization drops, NFS writes from every
member: the cluster-wide RPC backlog and RTT rise). A failure on a member hangs the job (NCCL
spins: utilization stays high, power falls) until the collective times out, then the job is
torn down (a flood of XID 45 on its GPUs, which is cleanup, not failure) and restarts after a
gap without the node under repair. Everything is precomputed as (nodes x ticks) arrays.

On shared nodes (``Scenario.shared_nodes``) the last ``shared_gpus`` GPUs are not in the node's
job: they run short side jobs of their own (``_side_jobs``), and ``gpu_phase`` gives every
GPU's phase for the GPU physics.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from .failures import PlannedFailure
from .scenario import JobSpec, Scenario

IDLE, INIT, TRAIN, CHECKPOINT, HUNG = 0, 1, 2, 3, 4
_DEFAULT_SHARES = (0.38, 0.25, 0.19, 0.13)
_JOB_NAMES = ("llm-pretrain-a", "llm-pretrain-b", "llm-sft-c", "llm-eval-d")


@dataclass(frozen=True, slots=True)
class Teardown:
    """A job run ended at ``time`` (seconds from start) on ``nodes``; ``skip`` is the failed
    (node, gpu) that raised its own XID instead of 45, if any."""

    time: float
    job: int
    nodes: tuple[int, ...]
    skip: tuple[int, int] | None


@dataclass(frozen=True, slots=True)
class JobRun:
    """One run of a job (seconds from start): its members, and the failure that ended it
    (None: it ended as planned, or the scenario ended first: ``end`` past its duration)."""

    job: int
    run: int  # 1-based, per job
    start: float
    end: float
    members: tuple[int, ...]
    failed: PlannedFailure | None


@dataclass(slots=True)
class Workload:
    phase: NDArray[np.int8]  # (nodes, ticks) IDLE..HUNG
    job: NDArray[np.int16]  # (nodes, ticks) job index or -1
    rank: NDArray[np.int16]  # (nodes, ticks) worker rank of the node in its run
    run: NDArray[np.int16]  # (nodes, ticks) its job's run the node last joined, 1-based; 0 none
    job_names: list[str]
    job_wobble: NDArray[np.float64]  # (jobs + 1, ticks): shared step-time wobble; last row 0
    nfs_write: NDArray[np.float64]  # (ticks,) share of all nodes writing a checkpoint
    nfs_read: NDArray[np.float64]  # (ticks,) share of all nodes loading data
    teardowns: list[Teardown] = field(default_factory=list)
    runs: list[JobRun] = field(default_factory=list)  # every job's runs, in job then time order
    # Scenario.shared_nodes: the nodes whose last shared_gpus GPUs run side jobs, and per such
    # node and tick those GPUs' phase, run number (0: idle) and step-time wobble
    shared: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    side_phase: NDArray[np.int8] = field(default_factory=lambda: np.zeros((0, 0), np.int8))
    side_run: NDArray[np.int16] = field(default_factory=lambda: np.zeros((0, 0), np.int16))
    side_wobble: NDArray[np.float64] = field(default_factory=lambda: np.zeros((0, 0)))


def default_jobs(nodes: int) -> tuple[JobSpec, ...]:
    """Four jobs on consecutive node blocks; leftover nodes are spares (idle)."""
    jobs: list[JobSpec] = []
    first = 0
    for name, share in zip(_JOB_NAMES, _DEFAULT_SHARES, strict=True):
        size = max(1, round(share * nodes))
        if first + size > nodes:
            break
        jobs.append(JobSpec(name, tuple(range(first, first + size))))
        first += size
    return tuple(jobs)


def scenario_jobs(sc: Scenario) -> tuple[JobSpec, ...]:
    """The scenario's jobs: ``sc.jobs``, or ``default_jobs`` for its size."""
    return sc.jobs if sc.jobs is not None else default_jobs(sc.nodes)


def node_jobs(sc: Scenario) -> dict[int, str]:
    """Node index -> the name of the job it belongs to (spare nodes are absent)."""
    return {n: spec.name for spec in scenario_jobs(sc) for n in spec.nodes}


def build_workload(
    sc: Scenario, failures: list[PlannedFailure], rng: np.random.Generator
) -> Workload:
    """Precompute every node's phase, job and rank per tick (see the module docstring)."""
    ticks, step = sc.ticks, sc.step_s
    jobs = scenario_jobs(sc)
    w = Workload(
        phase=np.zeros((sc.nodes, ticks), np.int8),
        job=np.full((sc.nodes, ticks), -1, np.int16),
        rank=np.zeros((sc.nodes, ticks), np.int16),
        run=np.zeros((sc.nodes, ticks), np.int16),
        job_names=[j.name for j in jobs],
        job_wobble=np.zeros((len(jobs) + 1, ticks)),
        nfs_write=np.zeros(ticks),
        nfs_read=np.zeros(ticks),
    )

    def tick(t: float) -> int:
        return _tick(t, step, ticks)

    def in_repair(node: int, t: float) -> bool:
        return any(f.node == node and f.time <= t < f.repair_end for f in failures)

    for j, spec in enumerate(jobs):
        # Step-time wobble: smoothed noise shared by the job's nodes, plus rare slow steps.
        noise = _smoothed_noise(rng, ticks)
        slow = (rng.random(ticks) < 0.004) * rng.uniform(0.05, 0.15, ticks)
        w.job_wobble[j] = 0.02 * noise - slow
        t = float(rng.uniform(0.0, 1800.0))
        runs = 0
        while t < sc.duration_s:
            members = tuple(n for n in spec.nodes if not in_repair(n, t))
            if not members:
                t += float(rng.uniform(*sc.idle_gap_s))
                continue
            end = t + float(rng.uniform(*sc.run_hours)) * 3600.0
            hit = [f for f in failures if f.node in members and t < f.time < end]
            failed = min(hit, key=lambda f: f.time) if hit else None
            if failed is not None:
                end = failed.time + float(rng.uniform(*sc.hang_s))
            rows = np.array(members)
            k0, k_end = tick(t), tick(end)
            k_train = tick(t + float(rng.uniform(*sc.init_s)))
            w.job[rows, k0:k_end] = j
            runs += 1
            w.run[rows, k0:] = runs  # until the member's next run (a later run overwrites)
            w.rank[rows, k0:k_end] = np.arange(len(members), dtype=np.int16)[:, None]
            w.phase[rows, k0:k_train] = INIT
            w.phase[rows, k_train:k_end] = TRAIN
            share = len(members) / sc.nodes
            w.nfs_read[k0:k_train] += share
            ckpt = t + sc.checkpoint_interval_s + (k_train - k0) * step
            while ckpt < end:
                c0, c1 = tick(ckpt), tick(ckpt + float(rng.uniform(*sc.checkpoint_duration_s)))
                c1 = min(c1, k_end)
                w.phase[rows, c0:c1] = CHECKPOINT
                w.nfs_write[c0:c1] += share
                ckpt += sc.checkpoint_interval_s
            if failed is not None:
                w.phase[rows, tick(failed.time) : k_end] = HUNG
            w.runs.append(JobRun(j, runs, t, end, members, failed))
            if end < sc.duration_s:
                skip = (failed.node, failed.gpu) if failed is not None else None
                w.teardowns.append(Teardown(end, j, members, skip))
            t = end + float(rng.uniform(*sc.idle_gap_s))
    if sc.shared_nodes:
        _side_jobs(sc, w)
    return w


def _tick(t: float, step: float, ticks: int) -> int:
    """The first tick at or after ``t`` seconds, within [0, ticks]."""
    return min(ticks, max(0, math.ceil(t / step)))


def _smoothed_noise(rng: np.random.Generator, ticks: int) -> NDArray[np.float64]:
    """Standard normal noise smoothed over ~5 ticks (a step-time wobble's shape)."""
    kernel = np.exp(-np.arange(20) / 5.0)
    # mode "same" returns max(ticks, len(kernel)) values: cut to ticks (scenarios < 20 ticks)
    noise = np.convolve(rng.standard_normal(ticks), kernel / kernel.sum(), mode="same")
    return noise[:ticks]


SIDE_RUN_HOURS = (1.0, 4.0)  # one side job run
SIDE_GAP_HOURS = (0.5, 2.0)  # idle between side runs
SIDE_CHECKPOINT_S = 2700.0


def _side_jobs(sc: Scenario, w: Workload) -> None:
    """The side GPUs' own jobs on the shared nodes (``Scenario.shared_nodes``): runs of 1-4 h
    (a load, then training with a checkpoint every 45 min, on a wobble of their own) between
    idle gaps of 0.5-2 h, from a random stream of their own so that every other draw of the
    scenario stays what it was."""
    rng = np.random.default_rng([sc.seed, 17])
    ticks, step = sc.ticks, sc.step_s
    w.shared = np.unique(np.linspace(0, sc.nodes - 1, sc.shared_nodes).round().astype(np.int64))
    n = w.shared.shape[0]
    w.side_phase = np.zeros((n, ticks), np.int8)
    w.side_run = np.zeros((n, ticks), np.int16)
    w.side_wobble = np.zeros((n, ticks))
    for i in range(n):
        w.side_wobble[i] = 0.02 * _smoothed_noise(rng, ticks)

    def tick(t: float) -> int:
        return _tick(t, step, ticks)

    for i in range(n):
        t, runs = float(rng.uniform(*SIDE_GAP_HOURS)) * 3600.0, 0
        while t < sc.duration_s:
            end = t + float(rng.uniform(*SIDE_RUN_HOURS)) * 3600.0
            k0, k_train, k_end = tick(t), tick(t + float(rng.uniform(*sc.init_s))), tick(end)
            runs += 1
            w.side_run[i, k0:k_end] = runs
            w.side_phase[i, k0:k_train] = INIT
            w.side_phase[i, k_train:k_end] = TRAIN
            ckpt = t + SIDE_CHECKPOINT_S
            while ckpt < end:
                c1 = min(tick(ckpt + float(rng.uniform(*sc.checkpoint_duration_s))), k_end)
                w.side_phase[i, tick(ckpt) : c1] = CHECKPOINT
                ckpt += SIDE_CHECKPOINT_S
            t = end + float(rng.uniform(*SIDE_GAP_HOURS)) * 3600.0


def gpu_phase(
    w: Workload, k: int, gpus: int, shared_gpus: int
) -> tuple[NDArray[np.int8], NDArray[np.float64]]:
    """(phase, wobble) of every GPU at tick ``k``, (nodes, gpus): each node's own, but the
    shared nodes' side GPUs (their last ``shared_gpus``), which run their side jobs."""
    phase = np.repeat(w.phase[:, k][:, None], gpus, axis=1)
    wobble = np.repeat(w.job_wobble[w.job[:, k], k][:, None], gpus, axis=1)
    phase[w.shared, gpus - shared_gpus :] = w.side_phase[:, k][:, None]
    wobble[w.shared, gpus - shared_gpus :] = w.side_wobble[:, k][:, None]
    return phase, wobble
