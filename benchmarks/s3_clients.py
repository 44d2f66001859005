"""obstore against boto3 on a local versitygw: which S3 client for SDM's object store backend.

Run from the repository with plain Python (it starts its own versitygw on 127.0.0.1 with
tests/integration/s3server.py, in a temporary directory removed afterwards)::

    PYTHONPATH=src python benchmarks/s3_clients.py                 # ~2-4 min on 2 cores
    PYTHONPATH=src python benchmarks/s3_clients.py --quick --out /tmp/r

Workloads, each timed for both clients, interleaved (the order alternates from round to
round), ``--repeat`` rounds, medians with min-max:

* **ranged GETs**: ``--ranges`` random ranges of 4 KiB, 64 KiB and 1 MiB from one 64 MiB
  object, at most 10 requests in flight (obstore ``get_ranges`` without coalescing;
  boto3 ``get_object(Range=...)`` from 10 threads);
* **multipart PUT** of a 64 MiB and a 256 MiB file in 8 MiB parts, 8 at a time (obstore
  ``put(Path)``; boto3 ``upload_file`` with the same ``TransferConfig``);
* **small PUTs**: ``--small`` objects of 4 KiB one after the other (per-request latency).

Every GET is checked byte for byte against the source. Writes ``s3_clients.json``, ``.md``
and ``.png`` into ``--out`` (default ``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from statistics import median
from typing import Any, Callable

import numpy as np
from mpi4py import MPI

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "integration"))
from _io_bench import RESULTS, meta, write_results  # noqa: E402
from s3server import S3Server  # noqa: E402

MIB = 1024 * 1024
CLIENTS = ("obstore", "boto3")
BUCKET = "sdm-bench"


def make_clients(server: S3Server, inflight: int) -> dict[str, Any]:
    """Both clients on *server*, credentials from its AWS variables, no retries."""
    import boto3
    from botocore.config import Config
    from obstore.store import S3Store

    creds = server.env()
    boto = boto3.client("s3", endpoint_url=server.endpoint, aws_access_key_id=creds["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=creds["AWS_SECRET_ACCESS_KEY"], region_name=server.region,
                        config=Config(max_pool_connections=inflight, retries={"max_attempts": 1}))
    boto.create_bucket(Bucket=BUCKET)
    obs = S3Store(BUCKET, endpoint=server.endpoint, access_key_id=creds["AWS_ACCESS_KEY_ID"],
                  secret_access_key=creds["AWS_SECRET_ACCESS_KEY"], region=server.region,
                  client_options={"allow_http": True}, retry_config={"max_retries": 0})
    return {"obstore": obs, "boto3": boto}


def ranged_gets(client: str, handle: Any, key: str, ranges: list[tuple[int, int]], inflight: int) -> list[bytes]:
    """Fetch every range with at most *inflight* requests at once."""
    if client == "obstore":
        import obstore

        return [bytes(b) for b in obstore.get_ranges(handle, key, starts=[o for o, _ in ranges],
                                                     lengths=[n for _, n in ranges], coalesce=0)]

    def one(rng: tuple[int, int]) -> bytes:
        offset, nbytes = rng
        return bytes(handle.get_object(Bucket=BUCKET, Key=key, Range=f"bytes={offset}-{offset + nbytes - 1}")["Body"].read())

    with ThreadPoolExecutor(inflight) as pool:
        return list(pool.map(one, ranges))


def put_file(client: str, handle: Any, key: str, path: Path, part: int, inflight: int) -> None:
    """Multipart upload of *path* in parts of *part* bytes, *inflight* at once."""
    if client == "obstore":
        import obstore

        obstore.put(handle, key, path, chunk_size=part, max_concurrency=inflight)
    else:
        from boto3.s3.transfer import TransferConfig

        handle.upload_file(str(path), BUCKET, key, Config=TransferConfig(
            multipart_threshold=part, multipart_chunksize=part, max_concurrency=inflight, use_threads=True))


def small_puts(client: str, handle: Any, count: int, payload: bytes) -> None:
    """*count* PUTs of *payload*, one after the other."""
    for i in range(count):
        key = f"small/{client}/{i}"
        if client == "obstore":
            import obstore

            obstore.put(handle, key, payload)
        else:
            handle.put_object(Bucket=BUCKET, Key=key, Body=payload)


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def stats(values: list[float]) -> dict[str, float]:
    return {"median": median(values), "min": min(values), "max": max(values)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--ranges", type=int, default=200, help="ranged GETs per size")
    parser.add_argument("--small", type=int, default=200, help="small PUTs per round")
    parser.add_argument("--put-mib", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--inflight", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke test)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.quick:
        args.repeat, args.ranges, args.small, args.put_mib = 2, 20, 10, [8]
    range_sizes = [4096, 64 * 1024, MIB]
    part = 8 * MIB
    load_before = os.getloadavg()[0]
    scratch = Path(tempfile.mkdtemp(prefix="sdm-s3bench-"))
    samples: dict[str, dict[str, list[float]]] = {}
    try:
        with S3Server() as server:
            clients = make_clients(server, args.inflight)
            source_mib = 8 if args.quick else 64
            source = np.random.default_rng(0).integers(0, 256, source_mib * MIB, dtype=np.uint8).tobytes()
            import obstore

            obstore.put(clients["obstore"], "source", source)
            files = {}
            for mib in args.put_mib:
                files[mib] = scratch / f"{mib}.bin"
                files[mib].write_bytes(np.random.default_rng(mib).integers(0, 256, mib * MIB, dtype=np.uint8).tobytes())
            rng = np.random.default_rng(1)
            payload = bytes(4096)
            for rnd in range(args.repeat):
                order = CLIENTS if rnd % 2 == 0 else CLIENTS[::-1]
                for size in range_sizes:
                    ranges = [(int(o), size) for o in rng.integers(0, len(source) - size, args.ranges)]
                    for client in order:
                        seconds, got = timed(lambda: ranged_gets(client, clients[client], "source", ranges, args.inflight))
                        assert got == [source[o:o + n] for o, n in ranges], f"{client}: wrong bytes"
                        samples.setdefault(f"get {size // 1024} KiB", {}).setdefault(client, []).append(
                            args.ranges / seconds)
                for mib, path in files.items():
                    for client in order:
                        seconds, _ = timed(lambda: put_file(client, clients[client], f"put/{client}", path, part,
                                                            min(8, args.inflight)))
                        samples.setdefault(f"put {mib} MiB", {}).setdefault(client, []).append(mib * MIB / seconds / 1e6)
                for client in order:
                    seconds, _ = timed(lambda: small_puts(client, clients[client], args.small, payload))
                    samples.setdefault("small put 4 KiB", {}).setdefault(client, []).append(args.small / seconds)
                print(f"round {rnd + 1}/{args.repeat} done", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    units = {name: ("MB/s" if name.startswith("put ") else "requests/s") for name in samples}
    results = {name: {client: stats(v) for client, v in per.items()} for name, per in samples.items()}
    data = {"meta": meta(MPI.COMM_SELF, Path(tempfile.gettempdir()), load_before, server="versitygw v1.8.0 posix",
                         inflight=args.inflight, part_size=part, repeat=args.repeat, ranges=args.ranges,
                         small=args.small, quick=args.quick),
            "units": units, "results": results, "samples": samples}
    lines = ["# S3 clients on versitygw: obstore vs boto3", "",
             f"{args.repeat} interleaved rounds, medians (min-max); at most {args.inflight} requests in flight, "
             f"8 MiB parts. Higher is better.", "",
             "| workload | unit | obstore | boto3 | obstore/boto3 |", "|---|---|---|---|---|"]
    for name, per in results.items():
        cells = [f"{per[c]['median']:.1f} ({per[c]['min']:.1f}-{per[c]['max']:.1f})" for c in CLIENTS]
        lines.append(f"| {name} | {units[name]} | {cells[0]} | {cells[1]} | "
                     f"{per['obstore']['median'] / per['boto3']['median']:.2f} |")
    lines += ["", f"SDM {data['meta']['sdm_version']} ({data['meta']['git_commit']}), {data['meta']['cores']} cores, "
              f"backend directory on {data['meta']['fs']}, {data['meta']['date']}.", ""]

    def plot(path: Path) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        from _plots import save_png

        names = list(results)
        fig, ax = plt.subplots(figsize=(6.4, 3.2))
        ratios = [results[n]["obstore"]["median"] / results[n]["boto3"]["median"] for n in names]
        ax.barh(names, ratios, color="tab:blue")
        ax.axvline(1.0, color="black", lw=0.8)
        ax.set_xlabel("obstore / boto3 (median throughput; > 1: obstore faster)")
        fig.tight_layout()
        save_png(fig, path)
        plt.close(fig)

    write_results(args.out, "s3_clients", data, "\n".join(lines), plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
