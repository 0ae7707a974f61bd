"""Arguments drawn by hypothesis-jsonschema: an independent reading of JSON
Schema, for cross-checks of sandrail's schemas (test-only: it pins an older
hypothesis, so the installed kit does not depend on it)."""

from __future__ import annotations

import functools
import json
from typing import Any

import hypothesis_jsonschema
from hypothesis import strategies as st

__all__ = ["jsonschema_values"]


@functools.cache
def jsonschema_values(schema_json: str) -> st.SearchStrategy[Any]:
    """hypothesis-jsonschema's values for a schema given as JSON text."""
    return hypothesis_jsonschema.from_schema(json.loads(schema_json))
