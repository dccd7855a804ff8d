"""docs/configuration.md is generated from the config schema (``detector config reference``):
it must be current, name every field, and show defaults and environment variables that
load_config really takes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from detector.cli.main import main
from detector.config import Config, config_reference, load_config, undescribed_fields

REPO = Path(__file__).resolve().parent.parent
COMMITTED = REPO / "docs" / "configuration.md"
ROW = re.compile(r"^\| `(\w+)` \| (.*?) \| (.*?) \| (.*?) \| (.*) \|$")


def rows(text: str) -> dict[str, tuple[str, str, str]]:
    """Dotted key -> (type, default, environment) of every table row, by section heading."""
    found: dict[str, tuple[str, str, str]] = {}
    section = ""
    for line in text.splitlines():
        heading = re.fullmatch(r"## (?:Top level|`(.+)`)", line)
        if heading:
            section = heading.group(1) or ""
        match = ROW.match(line)
        if match:
            name, type_text, default, env, _ = (c.replace("\\|", "|") for c in match.groups())
            found[f"{section}.{name}" if section else name] = (type_text, default, env)
    return found


def test_committed_reference_is_the_generated_one() -> None:
    """docs/configuration.md equals what the schema generates today."""
    fix = "regenerate it: detector config reference > docs/configuration.md"
    assert config_reference() == COMMITTED.read_text("utf-8"), f"{COMMITTED} is stale; {fix}"


def test_every_field_has_a_description() -> None:
    """No field of the schema would show an empty description (section fields use their
    class docstring)."""
    assert [] == undescribed_fields()


def test_every_schema_field_has_a_row_in_its_section() -> None:
    """Walking the models finds the same dotted keys as the reference's tables."""

    def keys(prefix: str, model: type) -> list[str]:
        out = []
        for name, info in model.model_fields.items():  # type: ignore[attr-defined]
            sub = getattr(info.annotation, "model_fields", None)
            if sub is not None:  # a section: a heading of its own, its fields in its table
                out += keys(f"{prefix}{name}.", info.annotation)
            else:
                out.append(f"{prefix}{name}")
        return out

    table = rows(config_reference())
    assert sorted(k for k in keys("", Config)) == sorted(
        k for k in table if "[]" not in k and not k.startswith("shard.")
    )


def test_a_row_shows_type_constraint_default_and_variable() -> None:
    """scrape.timeout_s reads as it is declared: a number > 0, 5 by default, its variable."""
    expected = ("number, > 0", "`5`", "`DETECTOR_SCRAPE__TIMEOUT_S`")
    assert expected == rows(config_reference())["scrape.timeout_s"]


def test_each_variable_set_to_its_default_loads_the_default_config() -> None:
    """Every environment variable the reference names is accepted by load_config, and set
    to the default the reference shows it gives the config that no variable gives (text keys
    take a variable as written, so their null cannot come from the environment)."""
    defaults = load_config(None, {})
    checked = 0
    for key, (type_text, default, env) in rows(config_reference()).items():
        text = type_text.startswith(("string or null", "path or null"))
        if not env or default == "required" or (text and default == "`null`"):
            continue
        variable, value = env.strip("`"), default.strip("`")
        loaded = load_config(None, {variable: value})
        assert defaults == loaded, f"{key}: {variable}={value} changed the config"
        checked += 1
    assert checked > 50  # the rows were found (57 today)


def test_the_cli_prints_the_reference(capsys: pytest.CaptureFixture[str]) -> None:
    """``detector config reference`` writes the reference to stdout and exits 0."""
    assert 0 == main(["config", "reference"])
    assert config_reference() == capsys.readouterr().out


def test_descriptions_read_as_text_not_markup() -> None:
    """Outside code spans no description opens an HTML tag (`<64 hex digits>`) or bold
    (`__name__`), which a Markdown renderer would swallow."""
    text = config_reference()
    body = text[text.index("-->") + 3 :]  # after the generated-file comment
    prose = re.sub(r"(`+).+?\1", "", body)  # code spans, single or double backticks
    assert [] == re.findall(r"<[\w/!][^>]*>?|(?<!\\)__\w+", prose)
