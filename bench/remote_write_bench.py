"""Remote-write ingest speed (samples/s per core) beside a plain protobuf decode, same requests.

    python bench/remote_write_bench.py [--nodes N] [--rounds R] [--per-request S] [--profile]

What runs: the requests Prometheus would send for ``--nodes`` GPU nodes, each the real
node-exporter page (tests/data/exporters/node_exporter/e2e-output.txt, 3,027 samples)
and a dcgm-exporter page of 8 GPUs with the whole field list of dcgm-exporter's
dcp-metrics-included.csv (labels as dcgm-exporter writes them), plus the target labels
Prometheus adds (instance, job, node); ``--per-request`` samples a request (Prometheus'
``max_samples_per_send``: 500 in 2.42, 2,000 in later releases), snappy-compressed. One round
is one scrape of every node at a new timestamp; the series index is warmed by a first round
(new series are a one-off cost, printed apart), then every contender takes the same ``--rounds``
rounds, contenders interleaved round by round so machine noise hits all alike. Times are this
process's CPU time (``time.process_time``): the machine is shared.

Contenders (samples/s per core; ratio against the plain protobuf decode):
- protobuf ParseFromString: snappy + ``WriteRequest.ParseFromString`` and nothing read back,
  the floor of any receiver built on protobuf's classes.
- protobuf, fields read: the same plus every label and sample read from the parsed messages
  into keys and arrays (what decode.py does when numba is absent).
- remote_write ingest: ``RemoteWriteSource.receive`` on every request (headers, snappy, the
  compiled wire walk, series index lookup, per-series order check) and ``frame(now)`` once a
  round: what ``detector run`` does with remote-written samples, up to the pipeline.

Goal (issue 41): ingest at least 1M samples/s per core. ``--profile`` prints where the
ingest's time goes (cProfile, by own time).
"""

from __future__ import annotations

import argparse
import cProfile
import csv
import pstats
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import cramjam

from detector.ingest import RemoteWriteSource
from detector.ingest.parse import parse_exposition, split_series
from detector.ingest.remote_write import encode_write_request
from detector.ingest.remote_write import prompb_pb2 as pb
from detector.ingest.remote_write.decode import key_of
from detector.series import SeriesIndex

SHARED = Path(__file__).resolve().parents[1] / "tests/data/exporters"  # copies with licences
NODE_PAGE = SHARED / "node_exporter/e2e-output.txt"
DCGM_FIELDS = SHARED / "dcgm/dcp-metrics-included.csv"
HEADERS = {"content-encoding": "snappy", "content-type": "application/x-protobuf"}
T0 = 1_700_000_000_000

Series = tuple[str, tuple[tuple[str, str], ...]]


def dcgm_fields() -> list[str]:
    with DCGM_FIELDS.open() as f:
        rows = [r for r in csv.reader(f) if r and not r[0].lstrip().startswith("#")]
    return [r[0].strip() for r in rows]


def node_series(node: int) -> list[Series]:
    """One node's series as Prometheus remote-writes them (target labels added)."""
    name = f"gpu-node-{node:04d}"
    out: list[Series] = []
    for g in range(8):
        gpu = (
            ("DCGM_FI_DRIVER_VERSION", "570.124.06"),
            ("Hostname", name),
            ("UUID", f"GPU-{node:08x}-{g:04x}-4b2c-9d1e-{g:012x}"),
            ("device", f"nvidia{g}"),
            ("gpu", str(g)),
            ("instance", f"10.1.{node // 250}.{node % 250}:9400"),
            ("job", "dcgm-exporter"),
            ("modelName", "NVIDIA B200"),
            ("node", name),
            ("pci_bus_id", f"00000000:{0x1B + g:02X}:00.0"),
        )
        out.extend((field, gpu) for field in dcgm_fields())
    target = (
        ("instance", f"10.1.{node // 250}.{node % 250}:9100"),
        ("job", "node-exporter"),
        ("node", name),
    )
    for key in parse_exposition(NODE_PAGE.read_bytes(), "node page").keys:
        metric, labels = split_series(key)
        # as Prometheus without honor_labels: an exporter's label the target sets is kept
        # as exported_<name> (node-exporter's drbd series carry node="local")
        own = {(f"exported_{k}" if k in dict(target) else k): v for k, v in labels}
        out.append((metric, tuple(sorted((own | dict(target)).items()))))
    return out


def requests(series: list[Series], stamp: int, per_request: int) -> list[bytes]:
    bodies = []
    for i in range(0, len(series), per_request):
        chunk = series[i : i + per_request]
        bodies.append(
            encode_write_request(
                (metric, labels, [(stamp, float(j))]) for j, (metric, labels) in enumerate(chunk)
            )
        )
    return bodies


def plain_protobuf(bodies: list[bytes]) -> None:
    for body in bodies:
        pb.WriteRequest().ParseFromString(bytes(cramjam.snappy.decompress_raw(body)))


def protobuf_read(bodies: list[bytes]) -> None:
    for body in bodies:
        request = pb.WriteRequest()
        request.ParseFromString(bytes(cramjam.snappy.decompress_raw(body)))
        keys, values, stamps = [], [], []
        for ts in request.timeseries:
            keys.append(key_of(ts.labels))
            for sample in ts.samples:
                values.append(sample.value)
                stamps.append(sample.timestamp)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=20, help="GPU nodes (default 20)")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (default 5)")
    parser.add_argument(
        "--per-request", type=int, default=2000, help="samples a request (default 2000)"
    )
    parser.add_argument("--profile", action="store_true", help="cProfile the ingest")
    args = parser.parse_args()

    series = [s for node in range(args.nodes) for s in node_series(node)]
    rounds = [requests(series, T0 + 15_000 * r, args.per_request) for r in range(args.rounds + 1)]
    samples = len(series)
    size = sum(len(b) for b in rounds[0])
    print(
        f"{args.nodes} nodes: {samples:,} series a round "
        f"({samples // args.nodes:,} a node), {len(rounds[0])} requests of "
        f"<= {args.per_request} samples, {size / len(rounds[0]) / 1024:.0f} KiB a request "
        "(snappy)"
    )

    source = RemoteWriteSource(SeriesIndex())
    began = time.process_time()
    for body in rounds[0]:
        source.receive(body, HEADERS)
    source.frame(T0 / 1000)
    cold = time.process_time() - began
    print(
        f"first round (every series new, numba compile included): {cold:.2f} s CPU, "
        f"{len(source.index):,} series indexed"
    )

    ticks = iter(range(1, args.rounds + 1))

    def ingest(bodies: list[bytes]) -> None:
        for body in bodies:
            source.receive(body, HEADERS)
        source.frame(T0 / 1000 + 15 * next(ticks))  # the round's tick

    contenders: dict[str, Callable[[list[bytes]], None]] = {
        "protobuf ParseFromString": plain_protobuf,
        "protobuf, fields read": protobuf_read,
        "remote_write ingest": ingest,
    }
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for bodies in rounds[1:]:
        for name, fn in contenders.items():
            began = time.process_time()
            fn(bodies)
            times[name].append(time.process_time() - began)
    results = source.stats.samples
    if set(results) != {"accepted"}:  # anything else: the bench is wrong
        raise SystemExit(f"unexpected sample results: {dict(results)}")

    base = samples / statistics.median(times["protobuf ParseFromString"])
    print(f"\n{'contender':<28} {'median CPU s':>12} {'samples/s/core':>15} {'x protobuf':>11}")
    for name, spent in times.items():
        rate = samples / statistics.median(spent)
        print(f"{name:<28} {statistics.median(spent):>12.4f} {rate:>15,.0f} {rate / base:>11.2f}")
    print(f"\ngoal: remote_write ingest >= 1,000,000 samples/s per core ({args.rounds} rounds)")
    print(f"sample results: {dict(results)}")
    if args.profile:  # an untimed extra round: the profiler's own cost stays out of the table
        bodies = requests(series, T0 + 15_000 * (args.rounds + 1), args.per_request)
        ticks = iter([args.rounds + 1])
        profile = cProfile.Profile(time.process_time)  # CPU: the machine is shared
        profile.enable()
        ingest(bodies)
        profile.disable()
        print("\nremote_write ingest, top functions by own time (one more round, profiled):")
        pstats.Stats(profile).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
