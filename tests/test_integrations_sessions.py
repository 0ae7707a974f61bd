"""What the engine integrations share: the worker-side secrets join the
``env`` of exactly the tools whose record says they take one."""

from __future__ import annotations

from unittest import mock

import attrs
import pytest

from sandrail.core import DEFAULT_SANDBOX_DESCRIPTION, TOOLS
from sandrail.core import _tools as tools
from sandrail.core._definitions import run_command_definition
from sandrail.integrations._sessions import with_env

SECRETS = {"DEPLOY_TOKEN": "s3cret"}


@pytest.mark.parametrize("name", list(TOOLS))
def test_c17_secrets_join_the_env_of_each_tool_whose_record_takes_one(name: str) -> None:
    record = TOOLS[name]
    assert record.takes_env is ("env" in record.define(300).parameters["properties"])
    joined = with_env(name, {"env": {"A": "1", "DEPLOY_TOKEN": "model"}}, SECRETS)
    if record.takes_env:
        assert joined == {"env": {"A": "1", "DEPLOY_TOKEN": "s3cret"}}
    else:
        assert joined == {"env": {"A": "1", "DEPLOY_TOKEN": "model"}}


def test_c17_a_new_tool_with_an_env_gets_the_secrets_from_its_record_alone() -> None:
    """A tool added to the table whose schema has an ``env`` needs no list
    of its own for the secrets to reach it (nor does one without it get
    them)."""
    write_file = attrs.evolve(
        TOOLS["run_command"],
        name="toy_write_file",
        define=lambda limit, sandbox=DEFAULT_SANDBOX_DESCRIPTION: attrs.evolve(
            run_command_definition(limit, sandbox), name="toy_write_file"
        ),
    )
    with mock.patch.dict(tools._RECORDS, {"toy_write_file": write_file}):
        assert with_env("toy_write_file", {"command": "x"}, SECRETS) == {
            "command": "x",
            "env": SECRETS,
        }
    assert with_env("toy_write_file", {"command": "x"}, SECRETS) == {"command": "x"}


def test_with_env_leaves_what_it_cannot_join_as_it_is() -> None:
    arguments = {"command": "x", "env": ["A=1"]}
    assert with_env("run_command", arguments, SECRETS) is arguments
    assert with_env("run_command", "not a mapping", SECRETS) == "not a mapping"
    assert with_env("run_command", arguments, {}) is arguments
