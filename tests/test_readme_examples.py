"""README.md's "## Examples" section is executable documentation: every command of its shell
blocks runs, in order, in a scratch directory, exits 0 and writes the files it names, so the
README cannot drift from the code."""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from pathlib import Path

import pytest

from detector.cli.main import main
from detector.config.calibration_file import load_calibration
from detector.ingest.dumps.read import detect_format

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
OUTPUT_OPTIONS = ("--out", "--report-json", "--html", "--scores-out")


def examples_section(text: str) -> str:
    """The text of the '## Examples' section, up to the next second-level heading."""
    found = re.search(r"^## Examples\n(.*?)(?=^## |\Z)", text, flags=re.M | re.S)
    if found is None:
        raise AssertionError("README.md has no '## Examples' section")
    return found.group(1)


def shell_commands(section: str) -> list[list[str]]:
    """The commands of the section's ```sh/```bash/```shell blocks, split as a shell would
    (comments dropped, backslash continuations joined)."""
    blocks = re.findall(r"^```(?:sh|bash|shell|console)\n(.*?)^```", section, flags=re.M | re.S)
    commands = []
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words:
                commands.append(words)
    return commands


def option_values(words: list[str], option: str) -> list[str]:
    return [words[i + 1] for i, word in enumerate(words[:-1]) if word == option]


def written_files(words: list[str]) -> list[str]:
    """The files a command says it writes (simulate's --events is an output too)."""
    out = [value for option in OUTPUT_OPTIONS for value in option_values(words, option)]
    if words[1] == "simulate":
        out += option_values(words, "--events")
    return out


@pytest.fixture(scope="module")
def commands() -> list[list[str]]:
    return shell_commands(examples_section(README.read_text("utf-8")))


def test_examples_cover_the_operator_workflow(commands: list[list[str]]) -> None:
    """The section shows simulate, replay with events and --report-json, calibrate, replay
    with the calibration and --html, and check-config on the example config."""
    assert all("detector" == words[0] for words in commands)
    flags = [(words[1], set(words[2:])) for words in commands]
    assert any(cmd == "simulate" and "--out" in rest for cmd, rest in flags)
    assert any(cmd == "replay" and {"--events", "--report-json"} <= rest for cmd, rest in flags)
    assert any(cmd == "calibrate" and "--fp-per-day" in rest for cmd, rest in flags)
    assert any(cmd == "replay" and {"--calibration", "--html"} <= rest for cmd, rest in flags)
    assert ["detector", "check-config", "deploy/config.example.yaml"] in commands


def test_detector_is_the_console_script_of_cli_main() -> None:
    """The README's `detector` word is the installed entry point that the test calls."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))
    assert "detector.cli:main" == project["project"]["scripts"]["detector"]


def test_readme_examples_run_and_write_their_files(
    commands: list[list[str]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Each example, in order, in a scratch directory (deploy/ linked from the repository):
    exit 0, and every file it names exists with the content its option promises."""
    (tmp_path / "deploy").symlink_to(REPO / "deploy")
    monkeypatch.chdir(tmp_path)
    for words in commands:
        shown = shlex.join(words)
        rc = main(words[1:])
        captured = capsys.readouterr()
        assert 0 == rc, f"{shown}: exit {rc}\n{captured.err}"
        for name in written_files(words):
            assert (tmp_path / name).is_file(), f"{shown}: did not write {name}"
        for name in option_values(words, "--report-json"):
            summary = json.loads((tmp_path / name).read_text())["summary"]
            assert {"failures", "false_positives", "fp_per_day", "days"} <= set(summary)
        for name in option_values(words, "--html"):
            assert "<html" in (tmp_path / name).read_text("utf-8")[:500]
        if words[1] == "simulate":
            for name in option_values(words, "--out"):
                assert "openmetrics" == detect_format(tmp_path / name)
        if words[1] == "calibrate":
            for name in option_values(words, "--out"):
                assert 0.0 < load_calibration(tmp_path / name).threshold < 1.0
        if words[1] == "check-config":
            assert f"{words[2]}: valid" in captured.out
