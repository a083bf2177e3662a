"""`evaluate` fanned out to Ray: one actor per GPU (or per CPU slot on a CPU-only cluster), each
loading the target and drafts once (backend.service.models caches them per process) and taking
(draft, sample) pairs from the driver's queue; every run goes to the shared database.

A worker that dies (its node lost, the process killed) costs only its current pair: the driver
sees the actor error, puts the pair back in the queue for another actor (MAX_ATTEMPTS in all), and
starts a replacement actor when the cluster still has room. Its half-written run is left to the
store's reaper (it shows as interrupted), and the pair's finished run comes from the retry.

evaluate.evaluate(where=Where(ray=...)) runs its pairs here and reads the summary back from the stored
runs (evaluate.summarise), so a Ray evaluation prints the same table as a local one of the same runs.
"""

from __future__ import annotations

import os
import re
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from backend import BadInput
from backend.run.records import Progress, no_progress
from backend.service.eval_pairs import Pair, existing_run, run_pair

MAX_ATTEMPTS = 3  # tries per pair before the evaluation fails
REPO = Path(__file__).resolve().parents[2]  # workers import backend from here (same path on every node)


class EvalWorker:
    """One Ray actor: replays pairs into the database, models loaded once for its lifetime."""

    def __init__(self, db_url: str | None):
        self.db_url = db_url

    def run(self, pair: Pair) -> int:
        return run_pair(self.db_url, pair)


RAY_CONNECT_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Cluster:
    """Where the pairs run: a Ray address ('local' starts a cluster on this machine), how many workers
    to start (None: one per GPU, else one per CPU slot) and how long to wait for the cluster."""

    address: str = "local"
    workers: int | None = None
    timeout: float = RAY_CONNECT_TIMEOUT_S


ADDRESS = re.compile(r"(ray://)?[A-Za-z0-9_.\-\[\]:]+:\d{1,5}")


def address_problem(address: str) -> str | None:
    """Why `address` is not a Ray address this accepts ('local', 'auto', host:port, ray://host:port), in
    one line; None when it is one. Ray's own check raises a bare ValueError deep in ray.init."""
    if address in ("local", "auto", "") or ADDRESS.fullmatch(address):
        return None
    return f"Ray address {address!r}: not 'local', 'auto', host:port or ray://host:port (e.g. 10.0.0.5:6379)"


def wait_for_listener(address: str, timeout: float) -> None:
    """BadInput unless something accepts a TCP connection at a `host:port` (or `ray://host:port`) address
    within `timeout` s. Ray's own connect retries an address with nothing listening without end."""
    rest = address.split("://", 1)[-1]
    host, _, port = rest.rpartition(":")
    if not host or not port.isdigit():
        return  # 'local', 'auto' or a form Ray resolves itself
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=min(5.0, max(0.1, timeout))):
                return
        except OSError as error:
            if time.monotonic() >= deadline:
                raise BadInput(
                    f"Ray cluster {address}: nothing answers at {host}:{port} after {timeout:g} s ({error}); "
                    "start the cluster (ray start --head) or raise --ray-timeout"
                ) from None
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))


def connect(address: str, timeout: float = RAY_CONNECT_TIMEOUT_S):
    try:
        import ray
    except ImportError:
        raise BadInput("--ray needs the ray package: pip install ray") from None
    if not ray.is_initialized():
        said = address_problem(address)
        if said:
            raise BadInput(said)
        wait_for_listener(address, timeout)
        try:
            ray.init(
                address=None if address in ("local", "") else address,
                include_dashboard=False,
                log_to_driver=False,
                ignore_reinit_error=True,
                runtime_env={
                    "env_vars": {
                        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
                    }
                },
            )
        except (ConnectionError, ValueError) as error:
            raise BadInput(f"Ray cluster {address}: {error}") from None
    return ray


def run_pairs_on_ray(
    db_url: str | None,
    pairs: list[Pair],
    cluster: Cluster | None = None,
    resume: bool = True,
    progress: Progress = no_progress,
    hook: Callable[[dict], None] | None = None,
    stats: dict | None = None,
) -> tuple[dict[Pair, int], int]:
    """Each pair's run id and how many were found stored (as evaluate.run_pairs). `hook(state)` is
    called after each finished pair with {"done": n, "busy": {actor: pair}} (tests use it to kill
    a busy worker mid-way); `stats` receives {"workers": actors started, "retried": pairs retried}."""
    from backend.service.database import database_url

    cluster = cluster or Cluster()
    db_url = database_url(db_url)  # every worker writes where the driver reads
    ray = connect(cluster.address, cluster.timeout)
    run_ids: dict[Pair, int] = {}
    if resume:
        for pair in pairs:
            found = existing_run(db_url, pair)
            if found is not None:
                run_ids[pair] = found.id
    reused = len(run_ids)
    queue = [pair for pair in pairs if pair not in run_ids]
    resources = ray.cluster_resources()
    gpus = int(resources.get("GPU", 0))
    slots = gpus if gpus else max(1, int(resources.get("CPU", 1)))
    count = max(1, min(cluster.workers or slots, len(queue) or 1))
    actor_class = ray.remote(num_gpus=1 if gpus else 0, num_cpus=0 if gpus else 1, max_restarts=0)(EvalWorker)
    actors = [actor_class.remote(db_url) for _ in range(count)] if queue else []
    idle, busy, attempts = list(actors), {}, {}  # busy: object ref -> (actor, pair)
    stats = stats if stats is not None else {}
    stats.update(workers=len(actors), retried=0)
    total = len(pairs)
    progress(
        reused / total, f"{reused} already stored, {len(queue)} to replay on {len(actors)} Ray worker(s)"
    )
    try:
        while queue or busy:
            while queue and idle:
                actor, pair = idle.pop(), queue.pop(0)
                attempts[pair] = attempts.get(pair, 0) + 1
                busy[actor.run.remote(pair)] = (actor, pair)
            ready, _ = ray.wait(list(busy), num_returns=1)
            actor, pair = busy.pop(ready[0])
            try:
                run_ids[pair] = ray.get(ready[0])
            except ray.exceptions.RayActorError:
                if attempts[pair] >= MAX_ATTEMPTS:
                    raise RuntimeError(f"{pair.label}: {MAX_ATTEMPTS} workers died on it") from None
                queue.insert(0, pair)  # retried first, on another worker
                stats["retried"] += 1
                actors.append(actor_class.remote(db_url))  # the dead one's replacement
                idle.append(actors[-1])
                stats["workers"] = len(actors)
                continue
            except ray.exceptions.RayTaskError as error:
                cause = getattr(error, "cause", None) or error
                message = (str(cause).splitlines() or [type(cause).__name__])[0]
                if isinstance(cause, BadInput):
                    raise BadInput(message) from None
                raise RuntimeError(f"{pair.label}: {message}") from None
            idle.append(actor)
            done = len(run_ids)
            progress(done / total, f"{pair.label} done ({done}/{total}, {reused} already stored)")
            if hook is not None:
                hook({"done": done - reused, "busy": {a: p for a, p in busy.values()}})
    finally:
        for actor in actors:
            ray.kill(actor)
    return run_ids, reused
