"""Griffe extension: sandrail's docstrings, written for reST readers, as Markdown.

The source's docstrings use Sphinx roles (``:class:`~sandrail.Toolset```),
reST literal blocks (a paragraph ending in ``::``) and reST simple tables
(columns framed by ``====`` rules). mkdocstrings renders docstrings as
Markdown, where those show as noise. This extension rewrites them when
griffe loads each object, and changes nothing in the source:

- a role becomes an optional cross-reference (``<autoref ... optional>``)
  to the name it resolves to from the object's scope: a link when the
  reference documents that name, plain code when it does not (a private
  module, say), never a broken link;
- ``::`` before an indented block becomes ``:`` and a fenced code block;
- a simple table becomes a Markdown table (a row whose first cell is blank
  continues the row above).
"""

from __future__ import annotations

import html
import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|data|exc|obj|const):`(~?)([^`]+)`")
_TABLE_RULE = re.compile(r"^(\s*)(=+(?: +=+)+)\s*$")


def _resolve(obj: griffe.Object, name: str) -> str | None:
    """The full path ``name`` stands for, seen from ``obj``; None if unknown."""
    if name.startswith("."):
        base = obj.module.path
        for _ in range(len(name) - len(name.lstrip(".")) - 1):
            base = base.rpartition(".")[0]
        return f"{base}.{name.lstrip('.')}"
    head, _, rest = name.partition(".")
    for scope in (obj, obj.parent):
        if scope is None:
            continue
        try:
            resolved = scope.resolve(head)
        except (griffe.NameResolutionError, AttributeError, KeyError, ValueError):
            continue
        return f"{resolved}.{rest}" if rest else resolved
    return name if "." in name else None


def _role(obj: griffe.Object, match: re.Match[str]) -> str:
    short, target = match.group(1) == "~", match.group(2).strip()
    text = target.rsplit(".", 1)[-1] if short else target.lstrip(".")
    path = _resolve(obj, target)
    code = f"<code>{html.escape(text)}</code>"
    if path is None:
        return code
    return f'<autoref identifier="{html.escape(path)}" optional>{code}</autoref>'


def _literal_blocks(lines: list[str]) -> list[str]:
    out: list[str] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.rstrip().endswith("::") and not line.strip().startswith(".."):
            body_start = index + 1
            while body_start < len(lines) and not lines[body_start].strip():
                body_start += 1
            indent = len(line) - len(line.lstrip())
            body_end = body_start
            while body_end < len(lines) and (
                not lines[body_end].strip()
                or len(lines[body_end]) - len(lines[body_end].lstrip()) > indent
            ):
                body_end += 1
            body = lines[body_start:body_end]
            while body and not body[-1].strip():
                body.pop()
            if body:
                text = line.rstrip()[:-2].rstrip()
                if text.strip():
                    out.append(text + ":")
                out.append("")
                depth = min(len(b) - len(b.lstrip()) for b in body if b.strip())
                fence = " " * indent + "```python"
                out.append(fence)
                out.extend(" " * indent + b[depth:] if b.strip() else "" for b in body)
                out.append(" " * indent + "```")
                out.append("")
                index = body_end
                continue
        out.append(line)
        index += 1
    return out


def _cells(line: str, spans: list[tuple[int, int]]) -> list[str]:
    cells = []
    for number, (start, end) in enumerate(spans):
        last = number == len(spans) - 1
        cells.append(line[start : None if last else end].strip())
    return cells


def _tables(lines: list[str]) -> list[str]:
    out: list[str] = []
    index = 0
    while index < len(lines):
        rule = _TABLE_RULE.match(lines[index])
        rules = (
            [n for n in range(index, len(lines)) if _TABLE_RULE.match(lines[n])][:3] if rule else []
        )
        if len(rules) < 3 or rules[0] != index:
            out.append(lines[index])
            index += 1
            continue
        spans = [(m.start(), m.end()) for m in re.finditer(r"=+", lines[index])]
        rows: list[list[str]] = []
        for number in range(rules[1] + 1, rules[2]):
            if not lines[number].strip():
                continue
            cells = _cells(lines[number], spans)
            if rows and not cells[0]:
                rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], cells, strict=True)]
            else:
                rows.append(cells)
        header = _cells(lines[rules[0] + 1], spans)
        prefix = rule.group(1) if rule else ""
        out.append(prefix + "| " + " | ".join(header) + " |")
        out.append(prefix + "|" + "---|" * len(header))
        for row in rows:
            out.append(prefix + "| " + " | ".join(c.replace("|", r"\|") for c in row) + " |")
        index = rules[2] + 1
    return out


def to_markdown(text: str, obj: griffe.Object) -> str:
    """``text`` (a docstring) rewritten as Markdown, roles resolved from ``obj``."""
    lines = _tables(_literal_blocks(text.splitlines()))
    converted = "\n".join(lines)
    return _ROLE.sub(lambda match: _role(obj, match), converted)


def _rewrite(obj: griffe.Object, seen: set[str]) -> None:
    if obj.path in seen:
        return
    seen.add(obj.path)
    if obj.docstring is not None:
        obj.docstring.value = to_markdown(obj.docstring.value, obj)
    for member in obj.members.values():
        if not member.is_alias:
            _rewrite(member, seen)  # type: ignore[arg-type]


class ReSTDocstrings(griffe.Extension):
    """Rewrite every docstring of a package once it is loaded whole (a name
    a docstring mentions may be defined below it, or in another module)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        _rewrite(pkg, set())
