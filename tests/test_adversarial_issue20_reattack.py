"""The re-attack of issue 20's fixes (attack-hard), replayed against the
port, the recorder and the command line on the simulator.

Each test is one break the re-attack found, lettered as in its report
(A: SIGHUP, B: standard output closed, C: a later call's task id as an env
value, E: signals before the handlers, F: a signal after the result, and
the Recorder doubt); its name names the contract line it proves. The same
breaks against local-e2b are in ``test_adversarial_issue20_e2b.py``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import sandrail
from sandrail.core import ErrorCode
from tests.rig import Rig

SECRET = "sk-live-0123456789abcdef"
ROOT = Path(__file__).resolve().parent.parent


# -- C: an env value equal to (or inside) a later call's own task id (C17) -----


@pytest.mark.parametrize("part", ["whole", "inside"])
def test_c17_reattack_c_a_later_calls_task_id_held_by_an_env_value_is_refused(part: str) -> None:
    """C: task ids are a public pure function (C1), so an env value can be
    a later call's task id before that call comes; the later call then
    showed the masked value whole in ``task_id``. It is refused when it
    comes, as a later operation key already was."""
    rig = Rig()
    later = rig.task_id("op-later")
    value = later if part == "whole" else later[8:40]
    first = rig.run("run_command", {"command": "true", "env": {"TOKEN": value}}, key="op-1")
    assert first.status == "ok", first.content
    starts = len(rig.sim.effects_seen)
    result = rig.run("run_command", {"command": "echo later"}, key="op-later", call_id="c-later")
    assert result.status == "error", result.content
    assert result.content["error_type"] == ErrorCode.ARGUMENTS_INVALID.value
    assert result.content["executed"] is False
    (problem,) = result.content["problems"]
    assert problem["field"] == "task_id"
    assert value not in result.to_json()
    assert len(rig.sim.effects_seen) == starts  # refused before any effect
    # A call whose task id holds no masked value still runs.
    other = rig.run("run_command", {"command": "echo ok"}, key="op-other", call_id="c-other")
    assert other.status == "ok", other.content
