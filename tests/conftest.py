"""Shared test configuration: hypothesis profiles.

- ``default``: quick local runs.
- ``ci``: what `.ci/run` uses (HYPOTHESIS_PROFILE=ci); enough examples to matter.
- ``campaign``: long runs for hunting rare bugs (HYPOTHESIS_PROFILE=campaign).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

# The real PostgreSQL server of the record and fleet tests (session scope).
pytest_plugins = ["tests.postgres_server"]

settings.register_profile("default", max_examples=60, deadline=None)
settings.register_profile(
    "ci",
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.register_profile(
    "campaign",
    max_examples=5000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
