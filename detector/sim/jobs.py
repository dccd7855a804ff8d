"""The simulated cluster's job attempts: what a scheduler would export as the job-attempts file
(``detector simulate --jobs FILE``; the format is ingest/jobs.py's).

Every run of a job (workload.py) is one attempt. A run that a failure ended (its peers hung
until the collective timed out, then the job was torn down) is restarted after the job's idle
gap without the node under repair: the next run is the next attempt of the same session, so a
session is a retry chain until a run ends as planned (exit 0) and the job starts a new session.
A run still going when the scenario ends has no end and no exit status. Whether a restart was
automatic (a retry policy) or a person's is drawn once per session, at its first restart, with
``AUTOMATIC_SHARE`` from a random stream of its own, so every other draw of the scenario stays
what it was. A retried chain can fail again, on another member or on the same node once its
repair ended.
"""

from __future__ import annotations

import numpy as np

from ..model import JobAttempt
from .scenario import Scenario
from .workload import Workload

AUTOMATIC_SHARE = 0.75  # of restarts after a failure made by the scheduler's retry policy
FAILED_EXIT = 1  # the exit status of an attempt a failure ended (the job's launcher gave up)


def job_attempts(sc: Scenario, workload: Workload) -> list[JobAttempt]:
    """Every job run of ``workload`` as an attempt of a session (module docstring), by job,
    session, attempt."""
    rng = np.random.default_rng([sc.seed, 23])
    attempts: list[JobAttempt] = []
    session, attempt, job, automatic = 0, 0, -1, False
    for run in sorted(workload.runs, key=lambda r: (r.job, r.run)):
        if run.job != job:
            job, session, attempt = run.job, 0, 0
        if attempt == 0:
            session += 1
        attempt += 1
        if attempt == 2:  # the session's first restart: the job has a retry policy or not
            automatic = bool(rng.random() < AUTOMATIC_SHARE)
        running = run.end >= sc.duration_s
        status = None if running else FAILED_EXIT if run.failed is not None else 0
        attempts.append(
            JobAttempt(
                job=f"{workload.job_names[run.job]}/s{session}",
                attempt=attempt,
                start=sc.start + run.start,
                end=None if running else sc.start + run.end,
                exit_status=status,
                nodes=tuple(sc.node_name(n) for n in run.members),
                automatic=attempt > 1 and automatic,
            )
        )
        if status != FAILED_EXIT:  # ended as planned (or still running): the session is over
            attempt = 0
    return attempts
