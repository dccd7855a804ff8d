"""Small HTML pieces the report's sections share."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape


def html_table(cls: str, header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A table of class ``cls``: ``header`` cells, then ``rows`` (cells are HTML already)."""
    head = "".join(f"<th>{h}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table class={cls}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def node_link(node: str) -> str:
    """A link to the node's timeline."""
    return f"<a href='#node-{escape(node)}'>{escape(node)}</a>"
