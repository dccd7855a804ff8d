"""Reading YAML files people write (config, rules): strictly, with errors that name the line.

One loader for every YAML file the project reads. It is PyYAML's SafeLoader plus two rules a
person expects: a key given twice in one mapping is an error (YAML would silently keep the
last), and an impossible date (2023-02-30) is an error with a position rather than a bare
ValueError. Every failure becomes a ``ConfigError`` naming ``path:line:column``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigError


class StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys and reports bad dates with their position."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_timestamp(self, node: yaml.ScalarNode) -> Any:
        try:
            return super().construct_yaml_timestamp(node)
        except ValueError as exc:
            raise yaml.constructor.ConstructorError(
                None, None, f"invalid date {node.value!r} ({exc})", node.start_mark
            ) from None


StrictLoader.add_constructor("tag:yaml.org,2002:timestamp", StrictLoader.construct_yaml_timestamp)


def parse_yaml(text: str, source: str) -> Any:
    """The document in ``text``; ConfigError naming ``source:line:column`` when it is not YAML."""
    try:
        return yaml.load(text, Loader=StrictLoader)  # a SafeLoader subclass: safe
    except yaml.reader.ReaderError as exc:  # its str() spans lines and names no line
        line = text.count("\n", 0, exc.position) + 1
        raise ConfigError(
            f"{source}:{line}: invalid YAML: unacceptable character #x{exc.character:04x}"
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{source}{at}: invalid YAML: {problem}") from None
    except RecursionError:  # PyYAML's composer recurses per nesting level
        raise ConfigError(f"{source}: invalid YAML: nested too deeply") from None


def read_yaml(path: Path) -> Any:
    """The YAML document in the file at ``path`` (UTF-8); ConfigError naming the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    return parse_yaml(text, str(path))
