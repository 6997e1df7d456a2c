"""Sweep points as Ray tasks (``rlnb sweep --ray``): the executor, the task, and the checks of
the address; docs/sweeps.md#ray says what they do and why.

Only ``choice.make_executor(ray=...)`` starts a Ray pool, and ``ray`` itself is imported inside the
functions, so rlnb works without the ``ray`` extra.
"""

from __future__ import annotations

import os
import socket
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rlnb.run.pools.executors import (
    STOP_GRACE,
    Callback,
    EndCallback,
    Outcome,
    Point,
    exception_line,
    finished_outcome,
    start_point,
    stop_processes,
)
from rlnb.run.pools.machine import THREAD_VARS


class RayPool:
    """Each point a Ray task with its CPUs and GPUs requested (docs/sweeps.md#ray)."""

    def __init__(self, address: str | None, cpus_per_run: int, gpus_per_run: int,
                 max_in_flight: int | None):
        self.address, self.cpus, self.gpus = address, cpus_per_run, gpus_per_run
        self.max_in_flight = max_in_flight
        self.description = f"Ray tasks of {cpus_per_run} CPU(s), {gpus_per_run} GPU(s)"
        self._started = False

    def connect(self) -> None:
        """Join (or start) the cluster and check that one node can hold a point; ValueError
        naming the flag otherwise (after letting go of the cluster)."""
        import logging

        import ray

        where = self.address or "(default)"
        kwargs: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.WARNING,
                                  "include_dashboard": False}
        try:
            ray.init(address=self.address, **kwargs)
        except Exception as err:  # ConnectionError, RuntimeError, ...: ray's own wording
            # Ray sends its token only to clusters it found itself, not to an address it is given
            hint = ("; a cluster with token authentication needs RAY_AUTH_MODE=token (and "
                    "RAY_AUTH_TOKEN or ~/.ray/auth_token)"
                    if self.address not in (None, "auto", "local")
                    and "RAY_AUTH_MODE" not in os.environ else "")
            raise ValueError(f"--ray {where}: could not join a Ray cluster: "
                             f"{exception_line(err)}{hint}") from None
        self._started = True
        nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
        cpus = max((n.get("CPU", 0) for n in nodes), default=0)
        gpus = max((n.get("GPU", 0) for n in nodes), default=0)
        problem = None
        if self.gpus > gpus:
            problem = (f"--gpus-per-run {self.gpus}: no node of the Ray cluster at {where} has "
                       f"that many GPUs (the most on one node: {gpus:g})")
        elif self.cpus > cpus:
            problem = (f"--cpus-per-run {self.cpus}: no node of the Ray cluster at {where} has "
                       f"that many CPUs (the most on one node: {cpus:g})")
        if problem:
            self.close()
            raise ValueError(problem)
        self.description += f" on {len(nodes)} node(s) ({ray.get_runtime_context().gcs_address})"

    def run(self, points: Sequence[Point], on_start: Callback, on_end: EndCallback) -> None:
        import ray

        task = ray.remote(num_cpus=self.cpus, num_gpus=self.gpus, max_retries=0)(ray_point)
        queue = deque(points)
        limit = self.max_in_flight or len(points)
        pending: dict[Any, tuple[Point, float]] = {}
        try:
            while queue or pending:
                while queue and len(pending) < limit:
                    point = queue.popleft()
                    pending[task.remote(asdict(point), self.cpus)] = (point, time.perf_counter())
                    on_start(point)
                done, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
                for ref in done:
                    point, t0 = pending.pop(ref)
                    try:
                        outcome = Outcome(**ray.get(ref))
                    except Exception as err:  # the task itself failed: worker lost, ...
                        outcome = Outcome(False, f"the Ray task failed: {exception_line(err)}",
                                          time.perf_counter() - t0)
                    on_end(point, outcome)
        finally:
            for ref in pending:  # KeyboardInterrupt in the task: it stops its point process
                ray.cancel(ref)
            if pending:
                ray.wait(list(pending), num_returns=len(pending), timeout=STOP_GRACE + 5)

    def close(self) -> None:
        if self._started:
            import ray

            ray.shutdown()  # ends the local cluster if this process started it
            self._started = False


def ray_point(point: dict, threads: int) -> dict:
    """A Ray task: run the point as its own process and return its Outcome as a dict."""
    p = Point(**point)
    env = {**os.environ, **{var: str(threads) for var in THREAD_VARS}}
    t0 = time.perf_counter()
    Path(p.run_dir).mkdir(parents=True, exist_ok=True)
    proc = start_point(p, env)
    try:
        code = proc.wait()
    finally:
        if proc.poll() is None:  # cancelled: KeyboardInterrupt raised in this task
            stop_processes([proc])
    return asdict(finished_outcome(p, code, time.perf_counter() - t0))


def ray_pool(address: str | bool | None, jobs, cpus_per_run, gpus_per_run) -> RayPool:
    """The RayPool ``--ray ADDRESS`` asks for, checked (see 4 and 5 in rlnb.run.pools.executors)."""
    address = None if address in (None, True, "") else str(address)
    try:
        import ray  # noqa: F401
    except ImportError:
        raise ValueError("--ray needs the ray package, which is not installed: "
                         "pip install -c constraints.txt -e '.[ray]'") from None
    if address not in (None, "auto", "local"):
        _check_reachable(address)
    elif address is None and os.environ.get("RAY_ADDRESS"):
        _check_reachable(os.environ["RAY_ADDRESS"], "--ray (RAY_ADDRESS)")
    elif address in (None, "auto"):
        # ray.init() joins the cluster `ray start` recorded on this machine, and waits for ever
        # when that cluster has stopped without removing its record: check it answers first
        found = _recorded_cluster()
        if found is None and address == "auto":
            raise ValueError("--ray auto: no Ray cluster runs on this machine (start one with "
                             "`ray start --head`, or give --ray without an address)")
        if found is not None and not _answers(found):
            if address == "auto":
                raise ValueError(f"--ray auto: the Ray cluster recorded on this machine "
                                 f"({found}) does not answer; `ray stop` clears the record")
            address = "local"  # none runs: start one, as ray.init() would with no record
    return RayPool(address, cpus_per_run or 1, gpus_per_run or 0, jobs)


def _recorded_cluster() -> str | None:
    """The address of the cluster ``ray start`` left on this machine, if any (Ray's record)."""
    try:
        from ray._private.utils import read_ray_address
    except ImportError:  # moved in another Ray version: let ray.init() look for itself
        return None
    return read_ray_address()


def _answers(address: str, timeout: float = 5.0) -> bool:
    host, _, port = address.split("://", 1)[-1].rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def _check_reachable(address: str, flag: str = "--ray", timeout: float = 5.0) -> None:
    """A quick TCP look at HOST:PORT (``ray.init`` would wait much longer on a dead address)."""
    hostport = address.split("://", 1)[-1]
    host, sep, port = hostport.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"{flag} {address}: not a Ray address (HOST:PORT, ray://HOST:PORT, "
                         "auto or local)")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            pass
    except OSError as err:
        raise ValueError(f"{flag} {address}: no Ray cluster answers there "
                         f"({exception_line(err)}); start one with `ray start --head`") from None
