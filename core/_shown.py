"""Identity values a session's results show whole, and the env values they
would expose (C13 against C17).

Every result shows its identity fields whole and never cut (C13): the
owner's identity, the session, the operation key and call id, and the
sandbox and task ids once known; an ``approval_required`` result its
interaction id. Every env value of 8 characters or more is masked in what a
command prints (C17), but an env value that is one of these identity
values, or inside one, would show in clear in a field nothing may change.
So a call whose env holds one is refused before anything runs, naming the
env variable, never the value:

- its own identity (the locator of the request) and, for a launch, its own
  task id (C1: known before anything is sent);
- every identity value earlier results of the session showed
  (:class:`ShownIdentities`, kept by the port for as long as its backend
  holds the session): a later read of an earlier task shows its id again,
  a retry of an earlier call its operation key and call id;
- the sandbox id, which is known only once ``Ensure`` names it: a launch
  whose env value is inside it is refused then, before any ``Start``
  (:func:`exposed_in_sandbox_id`), so a harness that never showed it (a
  restart) still never launches with it.

The reverse (a value the session masks turning up in a later call's
identity) is the program's ``_masked_in_identity`` rule.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final

import attrs

from ._masking import MIN_REDACTED_LENGTH, redaction_secrets
from ._rejection import ArgumentProblem

__all__ = [
    "IDENTITY_FIELDS",
    "MAX_SHOWN_BYTES",
    "NOTHING_SHOWN",
    "ShownIdentities",
    "exposed_env",
    "exposed_in_sandbox_id",
    "joined",
    "shown_by",
]

IDENTITY_FIELDS: Final = frozenset(
    {
        "session_id",
        "operation_key",
        "call_id",
        "sandbox_id",
        "task_id",
        "agent_id",
        "scope",
        "run_id",
        "turn_id",
        "build_id",
        "task_chain_id",
        "parent_run_id",
        "interaction_id",
    }
)
"""The result fields that hold identity: shown whole, never cut (C13)."""

MAX_SHOWN_BYTES: Final = 8 * 1024 * 1024
"""The most identity text a session keeps to check env values against (its
operation keys, call ids and task ids: some 50,000 calls). A session that
showed more can no longer prove an env value is none of them: a call with
env values is then refused (nothing runs), one without still runs."""


@attrs.frozen
class ShownIdentities:
    """The identity values a session's results showed whole (of at least
    ``MIN_REDACTED_LENGTH`` characters: a shorter one cannot hold an env
    value that is masked), as one text, the values separated by NUL.
    ``overflowed``: the session showed more than :data:`MAX_SHOWN_BYTES` and
    the text holds only part of it."""

    text: str = ""
    overflowed: bool = False

    def holds(self, value: str) -> bool:
        """Whether ``value`` is one of the values, or inside one."""
        return value in self.text


NOTHING_SHOWN: Final = ShownIdentities()


def shown_by(content: Mapping[str, Any]) -> set[str]:
    """The identity values ``content`` (a result's) shows whole, of at least
    ``MIN_REDACTED_LENGTH`` characters."""
    shown: set[str] = set()
    for key in IDENTITY_FIELDS & content.keys():
        value = content[key]
        if type(value) is str:  # the common case, without walking it
            if len(value) >= MIN_REDACTED_LENGTH:
                shown.add(value)
            continue
        shown.update(text for text in strings(value) if len(text) >= MIN_REDACTED_LENGTH)
    return shown


def exposed_env(
    env: object,
    locator: Mapping[str, Any],
    task: str | None,
    shown: ShownIdentities,
) -> list[ArgumentProblem]:
    """The env variables whose value a result of this call would show in an
    identity field (see the module doc): inside the call's ``locator``, its
    own ``task`` id, or what the session already showed. With an
    ``overflowed`` record of what it showed, every env value counts."""
    if not isinstance(env, Mapping):
        return []
    secrets = redaction_secrets(env)
    if not secrets:
        return []
    own = [*strings(locator), *([task] if task is not None else [])]
    problems = []
    for name, value in sorted(env.items(), key=lambda item: str(item[0])):
        if value not in secrets:
            continue
        if any(value in text for text in own):
            problems.append(_problem(name, "the call's identity (which every result shows whole)"))
        elif shown.overflowed:
            problems.append(
                ArgumentProblem(
                    path=f"arguments.env.{name}",
                    reason=f"cannot be checked against the identities this session showed (more "
                    f"than {MAX_SHOWN_BYTES} bytes of them, more than sandrail keeps), so it "
                    "could not be kept secret: start a new session to pass env values",
                )
            )
        elif shown.holds(value):
            problems.append(
                _problem(
                    name,
                    "an identity an earlier result of this session showed (a task id, the "
                    "sandbox id, an operation key or call id), which later results show whole",
                )
            )
    return problems


def exposed_in_sandbox_id(env: object, sandbox_id: str) -> list[ArgumentProblem]:
    """The env variables whose value is inside ``sandbox_id``, which every
    result of the launch shows from now on."""
    if not isinstance(env, Mapping):
        return []
    secrets = redaction_secrets(env)
    return [
        _problem(name, "the session's sandbox id (which every result shows whole)")
        for name, value in sorted(env.items(), key=lambda item: str(item[0]))
        if value in secrets and value in sandbox_id
    ]


def _problem(name: object, where: str) -> ArgumentProblem:
    return ArgumentProblem(
        path=f"arguments.env.{name}",
        reason=f"holds a value that also appears in {where}, so it could not be kept secret",
    )


def strings(value: object) -> Iterator[str]:
    """Every string in ``value`` (keys and items of mappings, lists and
    tuples, depth first): the texts an identity field shows."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from strings(key)
            yield from strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from strings(item)


def joined(values: Iterable[str]) -> str:
    """``values`` as the text of a :class:`ShownIdentities`."""
    return "\0".join(values)
