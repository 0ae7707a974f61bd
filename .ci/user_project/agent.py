"""A user's script, type-checked by CI against sandrail as a user installs it
(the README's editable install, and the wheel): `mypy --strict` must see the
package and its types, not an untyped module or none at all."""

import sandrail
from sandrail.interpreters.simulator import Simulator
from sandrail.testing import World

toolset = sandrail.Toolset(
    backend=Simulator(),
    session_id="session-1",
    owner=sandrail.AgentOwner(agent_id="agent-1"),
    authorize=lambda request: sandrail.ALLOW,
    assert_authority=lambda request: True,
)
result = toolset.call_sync(
    "run_command", {"command": "echo hi"}, call_id="call-1", operation_key="run-1:call-1"
)
status: str = result.status
# mypy knows `status` is not an int: were sandrail invisible to it (or
# untyped), this ignore would be unused, which --strict reports.
wrong: int = result.status  # type: ignore[assignment]
world: type[World] = World
