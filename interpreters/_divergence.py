"""What a replay says when it diverges: :class:`DivergenceError`, and the
JSON values of effects, outcomes and results rendered as one line
(:func:`render`) and compared field by field (:func:`difference`)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from sandrail.core import REDACTED, FatalInterpreterError

from ._transcript import ReplayReport

__all__ = [
    "DivergenceError",
    "describe_request",
    "difference",
    "differs",
    "hidden_values",
    "render",
    "render_value",
]


class DivergenceError(FatalInterpreterError):
    """The live core did not do what the recording says: a failing test.

    The port lets it through instead of turning it into a result. Attributes
    say where: ``step`` (over the whole recording, ``None`` for a result or a
    request), ``call``, ``line`` of the cassette, ``expected`` and ``got``
    (JSON data), and ``field`` (a dotted path, ``None`` when a whole record is
    missing). ``report`` is the replay so far, when :func:`replay_file` ran it.
    """

    def __init__(
        self,
        message: str,
        *,
        call: int | None = None,
        step: int | None = None,
        line: int | None = None,
        expected: Any = None,
        got: Any = None,
        field: str | None = None,
    ) -> None:
        super().__init__(message)
        self.call = call
        self.step = step
        self.line = line
        self.expected = expected
        self.got = got
        self.field = field
        self.report: ReplayReport | None = None


def render(data: Any, *, width: int = 48) -> str:
    """An effect or outcome (JSON data) as one readable line:
    ``Start(sandbox_id="sbx-1", ...)``; strings longer than ``width`` are
    shortened in the middle."""
    if not isinstance(data, Mapping) or "type" not in data:
        return render_value(data, width)
    fields = ", ".join(
        f"{key}={render_value(value, width)}" for key, value in data.items() if key != "type"
    )
    return f"{data['type']}({fields})"


def render_value(value: Any, width: int = 200) -> str:
    if isinstance(value, Mapping) and "type" in value:
        return render(value, width=width)
    if isinstance(value, Mapping) and value and len(value) <= 8:
        inner = ", ".join(f"{key}={render_value(item, width)}" for key, item in value.items())
        return "{" + inner + "}"
    text = json.dumps(value, ensure_ascii=False)
    if len(text) > width:
        keep = max(width // 2 - 2, 4)
        text = f"{text[:keep]}…{text[-keep:]}"
    return text


def difference(expected: Any, got: Any, path: str = "") -> tuple[str, Any, Any] | None:
    """The first field where two JSON values differ: (dotted path, expected, got)."""
    if isinstance(expected, dict) and isinstance(got, dict):
        if expected.get("type") != got.get("type"):
            return (_join(path, "type"), expected.get("type"), got.get("type"))
        for key in [*expected, *(k for k in got if k not in expected)]:
            if key not in got or key not in expected:
                return (_join(path, key), expected.get(key, "<absent>"), got.get(key, "<absent>"))
            found = difference(expected[key], got[key], _join(path, key))
            if found is not None:
                return found
        return None
    if isinstance(expected, list) and isinstance(got, list):
        for index, (left, right) in enumerate(zip(expected, got, strict=False)):
            found = difference(left, right, _join(path, str(index)))
            if found is not None:
                return found
        if len(expected) != len(got):
            return (_join(path, "length"), len(expected), len(got))
        return None
    if expected == got and type(expected) is type(got):
        return None
    numbers = (
        isinstance(expected, int | float)
        and isinstance(got, int | float)
        and not isinstance(expected, bool)
        and not isinstance(got, bool)
    )
    if numbers and expected == got:
        return None
    return (path or "<value>", expected, got)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def hidden_values(expected: Any, got: Any) -> tuple[str, ...]:
    """What the live text ``got`` holds where the recorded text ``expected``
    shows the redaction marker, when the two are otherwise the same: values
    the recording cut (a secret) that the replay was not told to cut. None
    for values of any other shape."""
    if not (isinstance(expected, str) and isinstance(got, str)) or REDACTED not in expected:
        return ()
    # Touching markers are one run of cut text: one value.
    pieces = re.sub(f"(?:{re.escape(REDACTED)})+", REDACTED, expected).split(REDACTED)
    pattern = "(.+?)".join(re.escape(piece) for piece in pieces)
    found = re.fullmatch(pattern, got, flags=re.DOTALL)
    return tuple(value for value in found.groups() if value) if found else ()


def differs(field: str, expected: Any, got: Any) -> str:
    """The line of a divergence message that names the first field that
    differs, and its recorded and live values. A live value that differs
    only where the recording cut a secret is not shown: it is most likely
    that secret, which the replay was not named."""
    if hidden_values(expected, got):
        return (
            f"  differs:  {field}: recorded {render_value(expected)}, live the same but for "
            "what stands where the recording cut a secret (not shown: name that secret to "
            "the Replayer, Replayer(path, secrets=[...]))"
        )
    return f"  differs:  {field}: recorded {render_value(expected)}, live {render_value(got)}"


def describe_request(data: Mapping[str, Any]) -> str:
    call = data.get("call", {})
    return f"{call.get('name')}, call_id {call.get('call_id')!r}"
