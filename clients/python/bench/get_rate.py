#!/usr/bin/env python3
"""Gets per second from one Python process: sync, sync pipelined, asyncio pipelined.

Loads --users profiles of --segments segments each (unless --no-load), then
for --seconds each runs:

- sync: one Client, one get at a time (a round trip each);
- sync pipeline: one Client, Pipeline of --depth gets at a time;
- asyncio: one AsyncClient, --depth tasks each doing gets in a loop, so
  --depth requests are in flight on the one connection.

Prints, per mode, gets/s, latency percentiles (per get; a pipeline's gets
share their batch's time) and this process's CPU time per get: Python's
cost, which is what bounds one process.

    /usr/bin/python3 clients/python/bench/get_rate.py --server 127.0.0.1:7700
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import resource
import sys
import time
from pathlib import Path
from typing import Callable, List, Tuple

try:
    import segstore
except ImportError:  # run from the source tree without installing
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import segstore

from segstore import AsyncClient, Client, SegmentUpdate, UpsertItem


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def percentile(sorted_values: List[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


class Result:
    def __init__(self, name: str, gets: int, seconds: float, cpu: float, latencies: List[float]):
        self.name, self.gets, self.seconds, self.cpu = name, gets, seconds, cpu
        self.latencies = sorted(latencies)

    def row(self) -> str:
        lat = self.latencies
        return (
            f"{self.name:<15} {self.gets / self.seconds:>10,.0f} "
            f"{percentile(lat, 0.5) * 1e6:>9,.0f} {percentile(lat, 0.99) * 1e6:>9,.0f} "
            f"{self.cpu / self.gets * 1e6:>12,.1f}"
        )


def load(c: Client, users: List[str], segments: int, rnd: random.Random) -> None:
    info = c.server_info
    batch = info.max_batch if info else 100
    frame = info.max_frame_bytes if info else 1 << 20
    per = max(1, min(batch, frame // (segments * 16 + 64)))  # users a batch_upsert
    for start in range(0, len(users), per):
        items = []
        for u in users[start : start + per]:
            ids = sorted(rnd.sample(range(1, 100_000), segments))
            items.append(UpsertItem(u, [SegmentUpdate.expiring_in(i, 30 * 86400) for i in ids]))
        for r in c.batch_upsert(items):
            if isinstance(r, segstore.SegstoreError):
                raise r


Step = Callable[[], Tuple[int, List[float]]]


def timed(seconds: float, warmup: float, step: Step) -> Tuple[int, float, float, List[float]]:
    """Runs step() for warmup then seconds; returns gets, elapsed, CPU, latencies."""
    end = time.perf_counter() + warmup
    while time.perf_counter() < end:
        step()
    gets, latencies = 0, []
    start, cpu0 = time.perf_counter(), cpu_seconds()
    end = start + seconds
    while time.perf_counter() < end:
        n, lat = step()
        gets += n
        latencies += lat
    return gets, time.perf_counter() - start, cpu_seconds() - cpu0, latencies


def run_sync(args, users: List[str], options: dict) -> Result:
    rnd = random.Random(1)
    with Client(args.host, args.port, **options) as c:

        def step():
            t = time.perf_counter()
            c.get(users[rnd.randrange(len(users))], projection=args.projection)
            return 1, [time.perf_counter() - t]

        gets, secs, cpu, lat = timed(args.seconds, args.warmup, step)
    return Result("sync", gets, secs, cpu, lat)


def run_pipeline(args, users: List[str], options: dict) -> Result:
    rnd = random.Random(2)
    with Client(args.host, args.port, **options) as c:

        def step():
            pipe = c.pipeline()
            for _ in range(args.depth):
                pipe.get(users[rnd.randrange(len(users))], projection=args.projection)
            t = time.perf_counter()
            pipe.execute()
            each = time.perf_counter() - t
            return args.depth, [each] * args.depth

        gets, secs, cpu, lat = timed(args.seconds, args.warmup, step)
    return Result("sync pipeline", gets, secs, cpu, lat)


async def run_async(args, users: List[str], options: dict) -> Result:
    rnd = random.Random(3)
    async with AsyncClient(args.host, args.port, **options) as c:
        state = {"measure": False, "stop": False, "gets": 0}
        latencies: List[float] = []

        async def worker() -> None:
            while not state["stop"]:
                t = time.perf_counter()
                await c.get(users[rnd.randrange(len(users))], projection=args.projection)
                if state["measure"]:
                    latencies.append(time.perf_counter() - t)

        tasks = [asyncio.ensure_future(worker()) for _ in range(args.depth)]
        await asyncio.sleep(args.warmup)
        state["measure"] = True
        start, cpu0 = time.perf_counter(), cpu_seconds()
        await asyncio.sleep(args.seconds)
        state["measure"] = False
        secs, cpu = time.perf_counter() - start, cpu_seconds() - cpu0
        gets = len(latencies)
        state["stop"] = True
        await asyncio.gather(*tasks)
    return Result("asyncio", gets, secs, cpu, latencies)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--server", default="127.0.0.1:7700", help="host:port (default %(default)s)")
    ap.add_argument("--users", type=int, default=10_000, help="profiles to load and read")
    ap.add_argument("--segments", type=int, default=100, help="segments a profile")
    ap.add_argument("--projection", choices=["full", "ids"], default="full")
    ap.add_argument("--seconds", type=float, default=5.0, help="measured time a mode")
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument(
        "--depth", type=int, default=64, help="gets in flight (asyncio), a pipeline's length"
    )
    ap.add_argument("--modes", default="sync,pipeline,asyncio")
    ap.add_argument("--no-load", action="store_true", help="the users are there already")
    ap.add_argument("--tls-ca", help="TLS, trusting this PEM CA file")
    ap.add_argument("--auth-secret-file")
    args = ap.parse_args()
    args.host, args.port = segstore.parse_address(args.server)
    options = {"timeout": 30.0}
    if args.tls_ca:
        options["tls"] = segstore.TlsOptions(ca_file=args.tls_ca)
    if args.auth_secret_file:
        options["auth_secret_file"] = args.auth_secret_file

    users = [f"bench-{i}" for i in range(args.users)]
    with Client(args.host, args.port, **options) as c:
        info = c.server_info
        if not args.no_load:
            t = time.perf_counter()
            load(c, users, args.segments, random.Random(0))
            took = time.perf_counter() - t
            print(f"loaded {args.users:,} users x {args.segments} segments in {took:.1f} s")
    print(
        f"server {args.server} ({info.server}); python {sys.version.split()[0]}, "
        f"segstore-py {segstore.__version__}, {os.cpu_count()} CPUs; projection {args.projection}, "
        f"depth {args.depth}, {args.seconds:g} s a mode"
    )
    print(f"{'mode':<15} {'gets/s':>10} {'p50 us':>9} {'p99 us':>9} {'CPU us/get':>12}")
    for mode in args.modes.split(","):
        if mode == "sync":
            r = run_sync(args, users, options)
        elif mode == "pipeline":
            r = run_pipeline(args, users, options)
        elif mode == "asyncio":
            r = asyncio.run(run_async(args, users, options))
        else:
            sys.exit(f"unknown mode {mode!r}")
        print(r.row(), flush=True)


if __name__ == "__main__":
    main()
