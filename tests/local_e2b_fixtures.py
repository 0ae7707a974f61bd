"""Fixtures shared by the local-e2b tests that talk to one sandbox through
the unmodified SDK (a plugin of tests/conftest.py). A test module that uses
them defines its own module-scoped ``server`` (each file starts its server
with the options it tests); a module's own ``sandbox`` or ``folder`` wins."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import e2b
import pytest

from sandrail.local_e2b import LocalE2B


@pytest.fixture(scope="module")
def sandbox(server: LocalE2B) -> Iterator[e2b.Sandbox]:
    """One sandbox of the module's server, killed after the module."""
    made = e2b.Sandbox.create(**server.sdk_options)
    yield made
    made.kill()


@pytest.fixture
def folder(sandbox: e2b.Sandbox) -> str:
    """A fresh directory of the user's own in that sandbox."""
    path = f"/home/user/t-{uuid.uuid4().hex[:8]}"
    sandbox.files.make_dir(path)
    return path
