"""What a :class:`~sandrail.testing.World` hands a harness: ports and
toolsets whose calls it records.

Strategy: a port and a toolset of a world get the same options (see
:func:`world_options`): the world's tap (or a cassette recorder around it) as
their backend, and the harness's ``authorize`` and ``assert_authority``
joined with the world's simulated harness, so that fault plans can take
authority away or change the request. A toolset's ports are
:class:`~sandrail.testing.WatchedPort` objects (the toolset's ``_port_type``),
so every call it makes opens a record exactly as a port's call does.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import sandrail
from sandrail import ToolRequest
from sandrail.core import Delivery, Effect, EffectFailure
from sandrail.interpreters.replay import Recorder

from ._calls import AGENT, SCOPE, Mode, WatchedPort, native_identity

if TYPE_CHECKING:
    from ._world import World

__all__ = ["AsyncTap", "WatchedToolset", "checked_groups", "toolset_identity", "world_options"]

_ABANDONED = EffectFailure(Delivery.MAYBE_SENT, "aborted by the harness", aborted=True)
"""What the port makes of a sandbox effect it abandons on abort (C11)."""


class WatchedToolset(sandrail.Toolset):
    """A :class:`~sandrail.Toolset` whose calls its :class:`World` records
    (built by :meth:`World.toolset`; otherwise an ordinary toolset: hand it
    to any adapter)."""

    def __init__(self, *, world: World, **options: Any) -> None:
        self._port_type = functools.partial(WatchedPort, world=world)
        super().__init__(**options)


def world_options(
    world: World,
    label: str,
    *,
    session_id: str,
    owner: sandrail.AgentOwner | sandrail.NativeOwner | Mode | None,
    durable_ownership: bool,
    interleave: bool,
    options: dict[str, Any],
) -> tuple[dict[str, Any], Recorder | None]:
    """The options of a port or toolset on ``world`` (``options`` are the
    caller's, ``backend`` refused), and the cassette recorder that is their
    backend when the world records (``label`` names its file)."""
    if "backend" in options:
        raise TypeError(
            "a world's ports and toolsets use the world's backend: leave out backend= "
            "(the world's tap records every effect for the judge)"
        )
    if owner is None:
        owner = world.default_owner
    if owner == "agent":
        owner = sandrail.AgentOwner(agent_id=AGENT)
    elif owner == "native":
        owner = sandrail.NativeOwner(scope=SCOPE)
    if not isinstance(owner, (sandrail.AgentOwner, sandrail.NativeOwner)):
        raise TypeError('owner must be an AgentOwner, a NativeOwner, "agent" or "native"')
    harness = world.harness
    authorize = options.pop("authorize", None)
    assert_authority = options.pop("assert_authority", None)

    def authorize_both(request: ToolRequest) -> Any:
        decision = harness.authorize(request)
        return decision if authorize is None else authorize(request)

    def authority_both(request: ToolRequest) -> bool:
        held = harness.assert_authority(request)
        return held if assert_authority is None else (held and assert_authority(request))

    if durable_ownership and "resolve_owned_command" not in options:
        resolve, remember = world.durable_record(session_id)
        options["resolve_owned_command"] = resolve
        options.setdefault("remember_owned_command", remember)
    backend: Any = world.tap(interleave)
    recorder: Recorder | None = None
    if world.record_dir is not None:
        path = world.record_dir / f"port-{len(world.recordings) + 1}-{session_id}-{label}.jsonl"
        recorder = backend = Recorder(backend, path, secrets=world.secrets)
        world.recordings.append(path)
        world.keep_recorder(recorder)
    given = {
        "backend": backend,
        "session_id": session_id,
        "owner": owner,
        "authorize": authorize_both,
        "assert_authority": authority_both,
        **options,
    }
    return given, recorder


def toolset_identity(owner: sandrail.AgentOwner | sandrail.NativeOwner, identity: Any) -> Any:
    """``identity`` if given, else the kit's own for ``owner`` (a native
    owner: :func:`native_identity` with fence 1)."""
    if identity is not None:
        return identity
    if isinstance(owner, sandrail.NativeOwner):
        return native_identity(scope=owner.scope)
    return sandrail.AgentIdentity(agent_id=owner.agent_id)


def checked_groups(world: World, tools: Iterable[str]) -> tuple[str, ...]:
    """``tools`` as a tuple; ``ValueError`` for two groups in a world that
    records (a cassette records one port)."""
    groups = tuple(tools)
    if world.record_dir is not None and len(set(groups)) != 1:
        raise ValueError(
            "this world records each port into a cassette, and a cassette records one "
            'port: give world.toolset(tools=("command",)) or tools=("code",)'
        )
    return groups


class AsyncTap:
    """The world's tap as an asynchronous backend; with ``interleave`` it
    yields to the loop before each effect, so two calls in flight interleave
    effect by effect."""

    asynchronous = True

    def __init__(self, world: World, interleave: bool) -> None:
        self._world = world
        self._interleave = interleave

    async def __call__(self, effect: Effect) -> Any:
        world = self._world
        if self._interleave:
            await asyncio.sleep(0)
        world._seen += 1
        if world._seen in world.deliver_at or world.late_delivery == "next_effect":
            await world._deliver_held_async()
        mark = world._mark(effect)
        answer: object
        try:
            answer = world.backend(effect)
            if inspect.isawaitable(answer):
                answer = await answer
        except EffectFailure as failure:
            answer = failure
        except asyncio.CancelledError:
            # The port abandoned the effect (an abort woke the call, C11): its
            # request may have left, as the failure the port made of it says.
            with contextlib.suppress(EffectFailure):
                world._settle(effect, _ABANDONED, mark)
            raise
        return world._settle(effect, answer, mark)
