"""Fuzz bench: many generated bad inputs through every reader of outside data, outside pytest.

    python bench/fuzz_bench.py                     # 100,000 cases, seed 0
    python bench/fuzz_bench.py --cases 20000 --seed 7 --save /tmp/fuzz-failures

Targets (weights in ``TARGETS``): the exposition parser (text, bytes, and the "good lines are
kept" differential against prometheus_client), the three dump formats (plain, gzip, truncated
or corrupted gzip) through ``read_dump``, the events JSONL loader, the config loader (YAML file
plus ``DETECTOR_*`` environment) and both rules loaders. Inputs are real payloads
(tests/data: node_exporter's e2e output, dcgm pages generated from the dcgm counter lists),
the shipped config and rules, cut to small random windows and mutated: line deletions,
duplications and swaps, character flips, truncation, huge lines, NaN/Inf spellings, bad
escapes, unbalanced braces, stray keywords, JSON/YAML values swapped for hostile ones.

A case FAILS when the target raises anything but the project's own error for it (ParseError
only inside ``Exposition.errors``, DumpError, EventsError, ConfigError), breaks an output
invariant, or runs longer than ``--timeout`` seconds. Failures are grouped by exception type
and raising line, each with the id of its first case; ``--repro ID`` reruns that one case and
shows the traceback (every case has its own seeded generator, so ids are stable).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import math
import random
import signal
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from detector.config.load import load_config
from detector.config.rules import load_signal_rules, load_xid_catalog
from detector.errors import ConfigError, DumpError, EventsError, ParseError
from detector.ingest.dumps.read import DumpStats, read_dump
from detector.ingest.events import load_events, parse_events
from detector.ingest.kernel_log import parse_kernel_log
from detector.ingest.parse import parse_exposition, split_series
from detector.logs import configure_logging
from detector.series.index import SeriesIndex

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data" / "exporters"
# The "good lines are kept" reference is the fuzz test's own, so the two cannot drift apart.
sys.path.insert(0, str(REPO / "tests"))
from test_fuzz import parsed_rows, reference_rows  # noqa: E402

T0 = 1_700_000_000

# --- corpora ---------------------------------------------------------------------------------


def dcgm_page(csv: Path, gpus: int = 8) -> list[str]:
    """A dcgm-exporter page (HELP, TYPE, one sample per GPU) for a dcgm counters CSV."""
    out: list[str] = []
    for f, line in enumerate(csv.read_text().split("\n")):
        if not line.strip() or line.startswith("#"):
            continue
        name, kind, help_text = (part.strip() for part in line.split(",", 2))
        if kind == "label":
            continue
        out += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        for gpu in range(gpus):
            out.append(
                f'{name}{{gpu="{gpu}",UUID="GPU-{gpu:08x}-{f:04d}",device="nvidia{gpu}",'
                f'modelName="NVIDIA B200",Hostname="node-01"}} {f * 10 + gpu}.5'
            )
    return out


NODE = (DATA / "node_exporter" / "e2e-output.txt").read_text().split("\n")
DCGM = dcgm_page(DATA / "dcgm" / "default-counters.csv") + dcgm_page(
    DATA / "dcgm" / "dcp-metrics-included.csv", gpus=2
)
CORPORA = (NODE, DCGM)
CONFIG = yaml.safe_load((REPO / "deploy" / "config.example.yaml").read_text())
SIGNALS = yaml.safe_load((REPO / "rules" / "signals.yaml").read_text())
XIDS = yaml.safe_load((REPO / "rules" / "xid.yaml").read_text())

# --- mutations -------------------------------------------------------------------------------
NUMBERS = [
    "NaN", "nan", "NAN", "+Inf", "-Inf", "inf", "+inf", "Infinity", "-infinity", "iNf", "+NaN",
    "nan(1)", "1e309", "-1e309", "1e-400", "0x10", "1_000", "∞", "", "1.", ".5", "-0", "1e",
    "9223372036854775794", "1" * 400, "٣", "²", "1e+", "+-1", "--1", "1.2.3",
]  # fmt: skip
CHARS = '\\"{}=,# \t\r\n\x00\x0b\x0c\u2028\u0085\ufeff\udcff\u00e9\U0001f600' + "a0_:Z"
TOKEN_LINES = [
    "# EOF", "#EOF", "# TYPE x gaugy", "# TYPE", "# HELP", "# UNIT x", "#", "{", "}", "=",
    'x{a="b"} 1 2 3', 'x{a="b"', 'x{a=b} 1', 'x{a="\\q"} 1', 'x{,} 1', "x 1 # {a=\"b\"} 1",
    'x{a="1",a="2"} 1', "x_created 1", "x 1 1.5", "x 1 -1", "x\t\t1", "9x 1", "x{} 1",
]  # fmt: skip
HOSTILE_JSON: list[Any] = [
    None, True, False, 0, -1, 10**400, 1e308, float("nan"), float("inf"), -float("inf"), "",
    "NaN", "+Inf", "1e400", "x" * 10_000, "²", "2023-02-30T00:00:00Z", "2023-01-01T00:00:00",
    "1700000000000", [], {}, [[]], [1], [1, 2, 3], {"a": 1}, "1" * 5000, [[[[[[[[[[1]]]]]]]]]],
]  # fmt: skip
HOSTILE_YAML = [
    "2023-02-30", "2023-13-01", ".inf", "-.inf", ".nan", "~", "null", "[", "{", "!!binary xx",
    "!!python/object:os.system x", "&a [*a]", "*undefined", "0x1F", "0o17", "1_000", "yes",
    "'", '"\\q"', "- - - -", "? ", "%YAML 1.1", "1e400", "-1", "0", "{a: 1, a: 2}",
    "[" * 500 + "]" * 500, "x" * 10_000, "\t", "\x00", "\ufeff", "@", "`", "| \n",
]  # fmt: skip


def mutate_lines(rng: random.Random, lines: list[str], rounds: int) -> list[str]:
    """``rounds`` random line-level mutations (see the module docstring)."""
    lines = list(lines) or [""]
    for _ in range(rounds):
        i = rng.randrange(len(lines))
        line = lines[i]
        op = rng.randrange(11)
        if op == 0 and len(lines) > 1:
            del lines[i]
        elif op == 1:
            lines.insert(i, line)
        elif op == 2:
            j = rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == 3 and line:
            at = rng.randrange(len(line))
            lines[i] = line[:at] + rng.choice(CHARS) + line[at + rng.randint(0, 1) :]
        elif op == 4:
            lines[i] = line[: rng.randrange(len(line) + 1)]
        elif op == 5:
            at = line.find('"') + 1
            size = rng.choices((1000, 100_000, 1_000_000), (10, 5, 1))[0]
            lines[i] = line[:at] + "x" * size + line[at:]
        elif op == 6:
            head, _, _ = line.rpartition(" ")
            lines[i] = f"{head or line} {rng.choice(NUMBERS)}"
        elif op == 7:
            at = line.find('"') + 1
            lines[i] = line[:at] + "\\" + rng.choice("qxu0\\\"n'") + line[at:]
        elif op == 8:
            brace = rng.choice("{}")
            lines[i] = line.replace(brace, "", 1) if brace in line else line + brace
        elif op == 9:
            lines.insert(i, rng.choice(TOKEN_LINES))
        else:
            size = rng.randint(1, 80)
            lines.insert(i, "".join(rng.choice(CHARS) for _ in range(size)))
    return lines


def mutate_tree(rng: random.Random, tree: Any, pool: list[Any]) -> Any:
    """One node of a JSON/YAML tree (chosen at random depth) replaced by a pool value."""
    if not isinstance(tree, (dict, list)) or not tree or rng.random() < 0.15:
        return rng.choice(pool)
    if isinstance(tree, dict):
        out = dict(tree)
        key = rng.choice(list(out))
        if rng.random() < 0.1:
            out[rng.choice(["", "x", 1, "__name__", "time", "extra_key"])] = out.pop(key)
        else:
            out[key] = mutate_tree(rng, out[key], pool)
        return out
    out_list = list(tree)
    i = rng.randrange(len(out_list))
    out_list[i] = mutate_tree(rng, out_list[i], pool)
    return out_list


def window(rng: random.Random, lines: list[str], most: int = 200) -> list[str]:
    size = rng.randint(1, most)
    start = rng.randrange(max(1, len(lines) - size))
    return lines[start : start + size]


def finish_bytes(rng: random.Random, text: str) -> bytes:
    """UTF-8, maybe truncated, maybe with raw bytes flipped (invalid UTF-8)."""
    data = text.encode("utf-8", errors="surrogatepass")
    if rng.random() < 0.2:
        data = data[: rng.randrange(len(data) + 1)]
    for _ in range(rng.choice((0, 0, 1, 3))):
        if data:
            at = rng.randrange(len(data))
            data = data[:at] + bytes([rng.randrange(256)]) + data[at + 1 :]
    return data


def maybe_gzip(rng: random.Random, data: bytes) -> bytes:
    """Plain (60%), gzip, truncated gzip or gzip with a flipped byte."""
    if rng.random() < 0.6:
        return data
    packed = gzip.compress(data, mtime=0)
    roll = rng.random()
    if roll < 0.3:
        return packed[: rng.randrange(2, len(packed))]
    if roll < 0.45:
        at = rng.randrange(10, len(packed))
        return packed[:at] + bytes([packed[at] ^ 0xFF]) + packed[at + 1 :]
    return packed


# --- targets: each generates one input, runs it, checks the contract ----------------------


def case_parse(rng: random.Random, tmp: Path) -> Any:
    lines = mutate_lines(rng, window(rng, rng.choice(CORPORA)), rng.randint(1, 6))
    text = ("\r\n" if rng.random() < 0.1 else "\n").join(lines)
    data: str | bytes = finish_bytes(rng, text) if rng.random() < 0.4 else text
    exp = parse_exposition(data, "fuzz", openmetrics=rng.choice((None, None, True, False)))
    assert len(exp.keys) == len(exp.values) == len(exp.timestamps), "ragged exposition"
    assert all(isinstance(e, ParseError) for e in exp.errors), "foreign error in errors"
    numbers = [e.line for e in exp.errors if isinstance(e, ParseError)]
    assert numbers == sorted(numbers), "errors not sorted by line"
    assert all(1 <= n <= exp.lines + 1 for n in numbers), "error line out of range"
    for key in exp.keys[:50]:
        with contextlib.suppress(ParseError):
            split_series(key)
    return data


BAD_LINES = [
    "9bad_name 1", 'x{a="b} 1', 'x{a="b"', 'x{a="\\q"} 1', "x one", "x", "x 1 2 3",
    "# TYPE x gaugy", 'x{a=b} 1', "{} 1", 'x{a="b"}} 1', "x 1 12.5", "x NaNa", "x\x001",
]  # fmt: skip


def case_parse_good_lines(rng: random.Random, tmp: Path) -> Any:
    good = [line for line in window(rng, rng.choice(CORPORA), 120) if line.strip()]
    mixed = list(good)
    for _ in range(rng.randint(1, 5)):
        mixed.insert(rng.randrange(len(mixed) + 1), rng.choice(BAD_LINES))
    exp = parse_exposition("\n".join(mixed) + "\n", "fuzz")
    assert len(exp.errors) == len(mixed) - len(good), "a bad line was not reported"
    ours = parsed_rows(exp)
    assert reference_rows("\n".join(good) + "\n") == ours, "good lines differ from reference"
    return "\n".join(mixed)


def dump_samples(rng: random.Random) -> list[tuple[str, dict[str, str], str]]:
    exp = parse_exposition("\n".join(window(rng, rng.choice(CORPORA), 60)) + "\n", "base")
    out = []
    for key, value in zip(exp.keys, exp.values, strict=True):
        name, labels = split_series(key)
        out.append((name, dict(labels), repr(value)))
    return out or [("up", {"job": "x"}, "1.0")]


def om_dump(rng: random.Random) -> bytes:
    lines = []
    for tick in range(rng.randint(1, 4)):
        for name, labels, value in dump_samples(rng):
            body = ",".join(f"{k}={json.dumps(v)}" for k, v in labels.items())
            lines.append(f"{name}{{{body}}} {value} {T0 + 30 * tick}")
    lines = mutate_lines(rng, lines, rng.randint(0, 5))
    return finish_bytes(rng, "\n".join(lines) + ("\n# EOF\n" if rng.random() < 0.5 else "\n"))


def tsdb_dump(rng: random.Random) -> bytes:
    lines = []
    for name, labels, value in dump_samples(rng):
        body = ", ".join(f"{k}={json.dumps(v)}" for k, v in {"__name__": name, **labels}.items())
        for tick in range(rng.randint(1, 4)):
            lines.append(f"{{{body}}} {value} {(T0 + 30 * tick) * 1000}")
    return finish_bytes(rng, "\n".join(mutate_lines(rng, lines, rng.randint(0, 5))) + "\n")


def json_dump(rng: random.Random) -> bytes:
    result = []
    for name, labels, value in dump_samples(rng):
        points = [[T0 + 30 * t, value] for t in range(rng.randint(1, 4))]
        result.append({"metric": {"__name__": name, **labels}, "values": points})
    doc: Any = {"status": "success", "data": {"resultType": "matrix", "result": result}}
    for _ in range(rng.randint(0, 3)):
        doc = mutate_tree(rng, doc, HOSTILE_JSON)
    text = json.dumps(doc)
    if rng.random() < 0.3:
        text = "\n".join(mutate_lines(rng, text.replace(", ", ",\n").split("\n"), 2))
    return finish_bytes(rng, text)


def check_dump(rng: random.Random, tmp: Path, data: bytes) -> Any:
    path = tmp / f"dump-{rng.randrange(1 << 30)}"
    path.write_bytes(maybe_gzip(rng, data))
    index, stats, last = SeriesIndex(), DumpStats(), -math.inf
    cache = rng.random() < 0.05
    try:
        for batch in read_dump(path, index, cache=cache, cache_dir=tmp / "c", stats=stats):
            assert len(batch.times) == len(batch.columns) == len(batch.values), "ragged"
            if len(batch):
                assert bool((batch.times[1:] >= batch.times[:-1]).all()), "not time-sorted"
                assert batch.times[0] >= last, "batches out of order"
                assert bool((batch.columns < len(index)).all()), "column beyond index"
                last = float(batch.times[-1])
        assert math.isfinite(last) or last == -math.inf, "non-finite sample time"
    except DumpError:
        pass
    finally:
        path.unlink()
    return data


def case_dump_openmetrics(rng: random.Random, tmp: Path) -> Any:
    return check_dump(rng, tmp, om_dump(rng))


def case_dump_json(rng: random.Random, tmp: Path) -> Any:
    return check_dump(rng, tmp, json_dump(rng))


def case_dump_tsdb(rng: random.Random, tmp: Path) -> Any:
    return check_dump(rng, tmp, tsdb_dump(rng))


def case_events(rng: random.Random, tmp: Path) -> Any:
    records: list[Any] = []
    for i in range(rng.randint(1, 6)):
        record: dict[str, Any] = {"time": T0 + i, "node": f"n{i}", "gpu": str(i), "xid": 79}
        if rng.random() < 0.3:
            record["time"] = "2023-11-14T22:13:20Z"
        if rng.random() < 0.3:
            record["end"] = T0 + 60 + i
        records.append(record)
    for _ in range(rng.randint(0, 3)):
        records = mutate_tree(rng, records, HOSTILE_JSON)
    lines = [json.dumps(r) for r in records] if isinstance(records, list) else [json.dumps(records)]
    lines = mutate_lines(rng, lines, rng.randint(0, 2))
    text = "\n".join(lines) + "\n"
    try:
        if rng.random() < 0.1:
            path = tmp / f"events-{rng.randrange(1 << 30)}.jsonl.gz"
            path.write_bytes(maybe_gzip(rng, finish_bytes(rng, text)))
            load_events(path)
            path.unlink()
        else:
            parse_events(text.split("\n"), "fuzz.jsonl")
    except EventsError:
        pass
    return text


def yaml_text(rng: random.Random, tree: Any) -> str:
    for _ in range(rng.randint(0, 3)):
        tree = mutate_tree(rng, tree, [yaml.safe_load("[1, {a: b}]"), None, 0, -1, "x", 1e400])
    text = yaml.safe_dump(tree, sort_keys=False, allow_unicode=True)
    lines = text.split("\n")
    for _ in range(rng.randint(0, 3)):
        i = rng.randrange(len(lines))
        head, sep, _ = lines[i].partition(": ")
        if sep and rng.random() < 0.7:
            lines[i] = f"{head}: {rng.choice(HOSTILE_YAML)}"
        else:
            lines = mutate_lines(rng, lines, 1)
    return "\n".join(lines)


def load_yaml_file(rng: random.Random, tmp: Path, text: str, loader: Callable[[Path], Any]) -> None:
    path = tmp / f"cfg-{rng.randrange(1 << 30)}.yaml"
    path.write_bytes(
        finish_bytes(rng, text) if rng.random() < 0.3 else text.encode(errors="surrogatepass")
    )
    try:
        loader(path)
    except ConfigError:
        pass
    finally:
        path.unlink()


ENV_NAMES = [
    "DETECTOR_SCRAPE__TIMEOUT_S", "DETECTOR_ALERTS__THRESHOLD", "DETECTOR_MODE", "DETECTOR_",
    "DETECTOR_SCRAPE", "DETECTOR_SCRAPE__", "DETECTOR___X", "DETECTOR_ALERTS__STORM__FRACTION",
    "DETECTOR_TARGETS__STATIC", "DETECTOR_SERVER__BASIC_AUTH", "DETECTOR_NODE_NAME",
    "DETECTOR_SCRAPE__TIMEOUT_S__X", "detector_logging__level", "DETECTOR_STATE__PATH",
]  # fmt: skip


def case_config(rng: random.Random, tmp: Path) -> Any:
    text = yaml_text(rng, CONFIG)
    env = {rng.choice(ENV_NAMES): rng.choice(HOSTILE_YAML) for _ in range(rng.randint(0, 3))}
    if rng.random() < 0.2:  # the environment alone, no file
        with contextlib.suppress(ConfigError):
            load_config(None, env)
    else:
        load_yaml_file(rng, tmp, text, lambda p: load_config(p, env))
    return {"yaml": text, "env": env}


def case_rules_signals(rng: random.Random, tmp: Path) -> Any:
    tree = dict(SIGNALS)
    tree["signals"] = rng.sample(SIGNALS["signals"], rng.randint(1, 8))
    text = yaml_text(rng, tree)
    load_yaml_file(rng, tmp, text, load_signal_rules)
    return text


def case_rules_xid(rng: random.Random, tmp: Path) -> Any:
    tree = dict(XIDS)
    tree["xids"] = rng.sample(XIDS["xids"], rng.randint(1, 8))
    text = yaml_text(rng, tree)
    load_yaml_file(rng, tmp, text, load_xid_catalog)
    return text


_XID_TEXT = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
KERNEL_LOG_SHAPES = [  # every shape kernel_log.py accepts, and one it skips
    f"2026-11-30T13:37:13+0000 gpu-05 kernel: {_XID_TEXT}",
    f"2026-11-30T13:37:13.250000+01:00 gpu-05 kernel: [ 8123.456789] {_XID_TEXT}",
    f"2026-11-30T13:37:13,000000+00:00 {_XID_TEXT}",
    f'2026-11-30T13:37:13Z {{host="gpu-05", job="kernel"}} {_XID_TEXT}',
    json.dumps(
        {"__REALTIME_TIMESTAMP": "1796045833000000", "_HOSTNAME": "g", "MESSAGE": _XID_TEXT}
    ),
    "__REALTIME_TIMESTAMP=1796045833000000\n_HOSTNAME=gpu-05\nMESSAGE=" + _XID_TEXT + "\n",
    "nvidia-nvswitch0: SXid (PCI:0000:07:00.0): 12028, Non-fatal, Link 45 egress",
    "2026-11-30T13:00:00+0000 gpu-05 kernel: e1000e: eth0 NIC Link is Up",
    "1796045833.250000 gpu-05 kernel: " + _XID_TEXT,
    json.dumps(
        {"labels": {"host": "gpu-05"}, "line": _XID_TEXT, "timestamp": "2026-11-30T13:37:13Z"}
    ),
]


def case_kernel_log(rng: random.Random, tmp: Path) -> Any:
    """A kernel log export as ``--events``: the accepted shapes, mutated, read through the
    events loader's sniffing (a file) or the log parser itself."""
    lines = "\n".join(rng.choice(KERNEL_LOG_SHAPES) for _ in range(rng.randint(1, 12)))
    text = "\n".join(mutate_lines(rng, lines.split("\n"), rng.randint(0, 3))) + "\n"
    try:
        if rng.random() < 0.3:
            path = tmp / f"gpu-{rng.randrange(1 << 30)}.log"
            path.write_bytes(maybe_gzip(rng, finish_bytes(rng, text)))
            events = load_events(path)
            path.unlink()
        else:
            events = parse_kernel_log(text.split("\n"), "fuzz.log", "gpu-05")
    except EventsError:
        return text
    assert all(0 <= e.time <= 1e11 and e.node and e.xid > 0 for e in events)
    return text


TARGETS: dict[str, tuple[Callable[[random.Random, Path], Any], int]] = {
    "parse": (case_parse, 30),
    "parse_good_lines": (case_parse_good_lines, 8),
    "dump_openmetrics": (case_dump_openmetrics, 10),
    "dump_json": (case_dump_json, 10),
    "dump_tsdb": (case_dump_tsdb, 10),
    "events": (case_events, 15),
    "kernel_log": (case_kernel_log, 5),
    "config": (case_config, 7),
    "rules_signals": (case_rules_signals, 5),
    "rules_xid": (case_rules_xid, 5),
}


class Hang(Exception):
    """A case ran past its time limit."""


def _alarm(signum: int, frame: Any) -> None:
    raise Hang()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds per case")
    parser.add_argument("--only", help="comma-separated target names")
    parser.add_argument("--repro", help="rerun one case id (seed/target/n) and raise")
    args = parser.parse_args(argv)
    if args.repro:
        configure_logging("error", "console")
        name = args.repro.split("/")[1]
        with tempfile.TemporaryDirectory(prefix="fuzz-") as tmpdir:
            data = TARGETS[name][0](random.Random(args.repro), Path(tmpdir))
        print(f"case {args.repro} passed; input: {data!r:.2000}")
        return 0
    configure_logging("error", "console")  # skipped-line warnings are expected by the thousand
    names = args.only.split(",") if args.only else list(TARGETS)
    weights = [TARGETS[n][1] for n in names]
    rng = random.Random(args.seed)
    plan = Counter(rng.choices(names, weights, k=args.cases))
    signal.signal(signal.SIGALRM, _alarm)
    cases: Counter[str] = Counter()
    failures: Counter[str] = Counter()
    groups: dict[tuple[str, str], tuple[str, Any]] = {}
    seconds: Counter[str] = Counter()
    with tempfile.TemporaryDirectory(prefix="fuzz-") as tmpdir:
        tmp = Path(tmpdir)
        for name in names:  # one target after another: timings are per target
            fn = TARGETS[name][0]
            start = time.perf_counter()
            for n in range(plan[name]):
                case_rng = random.Random(f"{args.seed}/{name}/{n}")
                signal.setitimer(signal.ITIMER_REAL, args.timeout)
                try:
                    fn(case_rng, tmp)
                except BaseException as exc:  # every escape is a finding
                    if isinstance(exc, KeyboardInterrupt):
                        raise
                    failures[name] += 1
                    where = traceback.extract_tb(exc.__traceback__)[-1]
                    key = (
                        name,
                        f"{type(exc).__name__} at {Path(where.filename).name}:{where.lineno}",
                    )
                    if key not in groups:
                        groups[key] = (str(exc)[:200], f"{args.seed}/{name}/{n}")
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                cases[name] += 1
            seconds[name] = time.perf_counter() - start
    print(f"fuzz_bench: {sum(cases.values())} cases, seed {args.seed}, timeout {args.timeout:g}s")
    print("| target | cases | failures | seconds | cases/s |")
    print("|---|---:|---:|---:|---:|")
    for name in names:
        rate = cases[name] / seconds[name] if seconds[name] else 0.0
        print(f"| {name} | {cases[name]} | {failures[name]} | {seconds[name]:.1f} | {rate:.0f} |")
    total_s = sum(seconds.values())
    print(f"| **total** | {sum(cases.values())} | {sum(failures.values())} | {total_s:.1f} | |")
    for (name, where), (message, seed) in sorted(groups.items()):
        print(f"FAIL {name}: {where}: {message!r} (case {seed})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
