"""What README.md and docs/*.md tell a reader to run exists: every ``detector`` command and
its flags in the CLI's argparse parser, every flag named on its own in some ``detector``
command (or in the list of other programs' flags below), every ``section.key`` in the config
schema, every ``python bench/<x>.py`` with its flags in that script, every ``bench/``,
``scripts/`` and ``tests/`` path in the repository.

Only code is read: fenced and indented code blocks and inline code spans. A failure names the
document and line, so a renamed or removed flag shows where the docs still use it.
"""

from __future__ import annotations

import argparse
import re
import shlex
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from detector.cli.args import build_parser
from detector.config import Config

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

# Flags of other programs that the docs name on their own (not in a command line of theirs,
# which is not checked): flag -> its program.
FOREIGN_FLAGS = {
    "--web.enable-admin-api": "prometheus",
    "--query.max-samples": "prometheus",
    "--min-time": "promtool tsdb dump",
    "--max-time": "promtool tsdb dump",
    "--match": "promtool tsdb dump",
    "--hpc-job-mapping-dir": "dcgm-exporter",
    "--set": "helm",
    "--build-arg": "docker build",
}
# Flags the docs already use that another branch is adding (issue 39 item 3: planted failures
# and a clock speed for `simulate --serve`). Each entry fails the test once the parser has
# it, so the list empties itself after the merge.
PENDING_FLAGS: set[tuple[str, str]] = set()

_FENCE = re.compile(r"^\s*```")
_SPAN = re.compile(r"`([^`]+)`")
_PATH = re.compile(r"(?<![\w./-])((?:bench|scripts|tests)/[\w./-]*[\w])")
_ENV = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=\S*")
# `section.key` or `section.key: value` (a file name such as kmsg.conf is no key)
_CONFIG_KEY = re.compile(r"([a-z_]+(?:\.[a-z_]+)+)(?::\s.*)?")
_FILE_SUFFIX = re.compile(r"\.(?:conf|ya?ml|json|py|md|txt|gz|csv|service)$")


@dataclass(frozen=True)
class Mention:
    """One piece of code in a document: where it is and its text."""

    doc: str
    line: int
    text: str

    def where(self) -> str:
        return f"{self.doc}:{self.line}: `{self.text.strip()}`"


def code_mentions(path: Path) -> Iterator[Mention]:
    """Code block lines and inline code spans of prose. A code line continues the one before
    when that ends in a backslash or when it is indented further (a wrapped synopsis)."""
    doc = path.relative_to(REPO).as_posix()
    in_fence = False
    block: list[tuple[int, str]] = []  # the current code line: (first line number, text)
    for number, line in enumerate(path.read_text("utf-8").splitlines(), start=1):
        if _FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence or line.startswith("    "):
            code = line if in_fence else line[4:]
            if block and (block[-1][1].endswith("\\") or code[:1].isspace()):
                first, text = block[-1]
                block[-1] = (first, text.removesuffix("\\").rstrip() + " " + code.strip())
            else:
                block.append((number, code.strip()))
            continue
        yield from (Mention(doc, first, text) for first, text in block if text)
        block = []
        for span in _SPAN.findall(line):
            yield Mention(doc, number, span)
    yield from (Mention(doc, first, text) for first, text in block if text)


def commands(text: str) -> Iterator[list[str]]:
    """The words of each command in a piece of code (split at shell operators), prompt and
    environment assignments dropped, bracketed placeholders unwrapped."""
    for piece in re.split(r"\s(?:&&|\|\||\||;|>|2>&1)\s", f" {text} "):
        try:
            words = shlex.split(piece, comments=True)
        except ValueError:  # an unbalanced quote in prose code: take it as written
            words = piece.split()
        if words and words[0] == "$":
            words = words[1:]
        while words and _ENV.fullmatch(words[0]):
            words = words[1:]
        yield [w.strip("[]") for w in words if w.strip("[]") not in ("", "...")]


def detector_words(words: list[str]) -> list[str] | None:
    """The arguments after ``detector`` (the console script, by any path, or python -m)."""
    if words and (words[0] == "detector" or words[0].endswith("/bin/detector")):
        return words[1:]
    if (
        words[:2] == ["python", "-m"]
        and len(words) > 2
        and words[2] in ("detector", "detector.cli")
    ):
        return words[3:]
    return None


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found.update(action.choices)
    return found


def options(parser: argparse.ArgumentParser) -> set[str]:
    return {flag for action in parser._actions for flag in action.option_strings}


PARSER = build_parser()
COMMANDS = subparsers(PARSER)
ALL_OPTIONS = options(PARSER).union(*(options(p) for p in COMMANDS.values()))


def flags_in(words: list[str]) -> list[str]:
    return [w.split("=", 1)[0] for w in words if w.startswith("--") and len(w) > 2]


def check_detector_command(args: list[str], where: str) -> list[str]:
    """Problems with one ``detector ...`` command: unknown command, action or flag."""
    if not args or args[0].startswith("-"):
        known = options(PARSER)
        return [f"{where}: no option {f} of detector" for f in flags_in(args) if f not in known]
    name = args[0]
    if name.isupper():  # a placeholder, e.g. `detector COMMAND --help`
        return [
            f"{where}: {f} is an option of no command"
            for f in flags_in(args)
            if f not in ALL_OPTIONS
        ]
    if name not in COMMANDS:
        return [f"{where}: detector has no command {name!r} (it has: {', '.join(COMMANDS)})"]
    parser = COMMANDS[name]
    actions = subparsers(parser)
    rest = args[1:]
    if actions and rest and not rest[0].startswith("-") and not rest[0].isupper():
        if rest[0] not in actions:
            return [f"{where}: detector {name} has no action {rest[0]!r}"]
        parser = actions[rest[0]]
    known = options(parser)
    return [
        f"{where}: detector {name} has no option {flag}"
        for flag in flags_in(rest)
        if flag not in known and (name, flag) not in PENDING_FLAGS
    ]


def check_bench_command(words: list[str], where: str) -> list[str]:
    """``python bench/x.py --flag``: the script exists and names each flag."""
    if not (len(words) > 1 and words[0] == "python" and words[1].startswith("bench/")):
        return []
    script = REPO / words[1]
    if not script.is_file():
        return []  # the path check reports it
    source = script.read_text("utf-8")
    return [
        f"{where}: {words[1]} has no option {flag}"
        for flag in flags_in(words[2:])
        if f'"{flag}"' not in source
    ]


BENCH_SOURCES = "\n".join(p.read_text("utf-8") for p in sorted((REPO / "bench").glob("*.py")))


def check_bare_flag(text: str, where: str) -> list[str]:
    """A span that is a flag on its own (`--events DIR`) names an option of some detector
    command or bench script, or of another program listed in FOREIGN_FLAGS."""
    flag = text.split()[0].split("=", 1)[0]
    if flag in ALL_OPTIONS or flag in FOREIGN_FLAGS or f'"{flag}"' in BENCH_SOURCES:
        return []
    if any(f == flag for _, f in PENDING_FLAGS):
        return []
    return [
        f"{where}: {flag} is an option of no detector command (another program's? add it to "
        "FOREIGN_FLAGS with its program)"
    ]


def config_keys(model: type = Config, prefix: str = "") -> set[str]:
    """Every dotted key of the config schema, sections included."""
    keys = set()
    for name, info in model.model_fields.items():  # type: ignore[attr-defined]
        keys.add(prefix + name)
        inner = [info.annotation, *typing.get_args(info.annotation)]
        for sub in (a for a in inner if hasattr(a, "model_fields")):
            keys |= config_keys(sub, f"{prefix}{name}.")
    return keys


CONFIG_KEYS = config_keys()
SECTIONS = set(Config.model_fields)


def check_config_key(text: str, where: str) -> list[str]:
    """A span naming `section.key` of the config names a key the schema has."""
    match = _CONFIG_KEY.fullmatch(text.strip())
    if match is None or _FILE_SUFFIX.search(match.group(1)):
        return []
    key = match.group(1)
    if key.split(".")[0] not in SECTIONS or key in CONFIG_KEYS:
        return []
    return [f"{where}: the config has no key {key} (docs/configuration.md lists them)"]


def problems(mention: Mention) -> list[str]:
    where = mention.where()
    found = [
        f"{where}: {path} does not exist"
        for path in _PATH.findall(mention.text)
        if not (REPO / path).exists()
    ]
    found += check_config_key(mention.text, where)
    if re.fullmatch(r"--[\w.-]+(?:[ =]\S+)?", mention.text.strip()):
        return found + check_bare_flag(mention.text.strip(), where)
    for words in commands(mention.text):
        args = detector_words(words)
        if args is not None:
            found += check_detector_command(args, where)
        found += check_bench_command(words, where)
    return found


def all_mentions() -> list[Mention]:
    return [m for doc in DOCS for m in code_mentions(doc)]


def test_every_command_flag_script_and_path_the_docs_name_exists() -> None:
    """README.md and docs/*.md name only detector commands, actions and flags the parser has,
    config keys the schema has, bench scripts with the flags they take, and bench/, scripts/
    and tests/ paths that exist (the old deploy.md's `--shard i/N` fails here)."""
    found = [problem for mention in all_mentions() for problem in problems(mention)]
    assert [] == found


def test_the_docs_are_read() -> None:
    """The reader finds the commands it is meant to check (it is not silently reading
    nothing): the README's set-up command, its live demo, a flag and a config key of docs/."""
    texts = [(m.doc, m.text) for m in all_mentions()]
    assert ("README.md", "pip install -e . && detector replay") in texts
    assert any(doc == "README.md" and "detector run --config demo.yaml" in t for doc, t in texts)
    assert ("docs/evaluate.md", "--no-signal-weights") in texts
    assert ("docs/deploy.md", "alerts.shadow: true") in texts


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("detector replay --shard 0/4", "detector replay has no option --shard"),
        ("detector frobnicate", "detector has no command 'frobnicate'"),
        ("detector config refrence", "detector config has no action 'refrence'"),
        ("--shard i/N", "--shard is an option of no detector command"),
        ("python bench/nab_cv.py --data x", "bench/nab_cv.py does not exist"),
        ("python bench/nab.py --no-such-flag", "bench/nab.py has no option --no-such-flag"),
        ("see tests/test_nothing_here.py", "tests/test_nothing_here.py does not exist"),
        ("alerts.shadoww: true", "the config has no key alerts.shadoww"),
    ],
)
def test_a_wrong_mention_is_reported_with_its_place(text: str, expected: str) -> None:
    """Each kind of mistake is caught, and the message names the document and line."""
    found = problems(Mention("docs/x.md", 7, text))
    assert 1 == len(found), found
    assert found[0].startswith(f"docs/x.md:7: `{text}`: ")
    assert expected in found[0]


def test_pending_flags_are_not_in_the_parser_yet() -> None:
    """PENDING_FLAGS lists only flags still to come: once one exists, remove it from the list
    so the docs' use of it is checked like any other."""
    arrived = sorted(f"{c} {f}" for c, f in PENDING_FLAGS if f in options(COMMANDS[c]))
    assert [] == arrived
