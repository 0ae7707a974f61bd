"""sandrail inside durable-execution engines, at most once.

An engine re-runs a tool call from its first line whenever the worker that
ran it died before the engine recorded the result. Each module here takes
the call's operation key from the engine's own identity, the one a re-run
keeps, so the re-run reconciles the first launch instead of making a second
one, and builds each workflow's :class:`~sandrail.Toolset` (its session, so
its sandbox, derived from the workflow) on the worker that runs the call:

- :mod:`sandrail.integrations.temporal`: Temporal activities
  (``pip install 'sandrail[temporal]'``);
- :mod:`sandrail.integrations.dbos`: DBOS steps (``pip install 'sandrail[dbos]'``).

What each engine re-runs, and which identity each key comes from:
``docs/explanation/engines.md``.
"""

from __future__ import annotations

__all__: list[str] = []
