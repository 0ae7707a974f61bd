"""Shared test configuration: the hypothesis profiles, and how a run is measured.

``HYPOTHESIS_PROFILE`` picks a profile:

- ``default``: the quick run a contributor makes every few minutes,
  ``python -m pytest -n auto`` (every test, 30 examples a property).
- ``ci``: what `.ci/run` runs, ``HYPOTHESIS_PROFILE=ci python -m pytest -n auto
  --cov``: 300 examples a property; the schema-honesty property keeps its 500
  draws a tool and profile, the state machines 300 runs of 25 steps.
- ``campaign``: long hunts for rare bugs (5,000 examples a property).

Coverage is off unless ``--cov`` asks for it (pyproject.toml: 95% branch
coverage of ``sandrail.core``), so one file runs green alone. Tests marked
``untraced`` (heavy ones whose core branches lighter tests also reach) run
with coverage paused: ``tests/coverage_pause.py`` says why pytest-cov's own
``no_cover`` cannot do that under pytest-xdist.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

# The real PostgreSQL server of the record and fleet tests (session scope),
# the ``untraced`` marker that pauses coverage for a test (under --cov), and
# the order that starts ``long`` and ``untraced`` tests first.
pytest_plugins = [
    "tests.postgres_server",
    "tests.coverage_pause",
    "tests.local_e2b_fixtures",
    "tests.run_order",
]

settings.register_profile("default", max_examples=30, deadline=None)
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
