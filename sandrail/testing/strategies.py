"""Hypothesis strategies for sandrail: requests and arguments per tool and
owner mode (and schema profile), fault plans and multi-fault schedules, JSON
values and result contents, and hostile values for robustness tests.

Needs hypothesis: ``pip install 'sandrail[testing]'``.
"""

from __future__ import annotations

try:
    import hypothesis  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(
        "sandrail.testing.strategies needs hypothesis: pip install 'sandrail[testing]'"
    ) from exc

from ._st_faults import fault_plans, faults, schedules
from ._st_hostile import (
    Color,
    Hostile,
    HostileInt,
    HostileStr,
    LyingList,
    Raising,
    UnreadableDict,
    UnreadableMapping,
    anything,
    junk,
)
from ._st_json import (
    MAX_SAFE,
    contents,
    contents_and_budgets,
    escape_heavy_text,
    huge_texts,
    identifiers,
    json_scalars,
    json_text,
    json_values,
    locators,
    multibyte_chars,
    presentation_texts,
    result_json_values,
    sandbox_ids,
    small_texts,
)
from ._st_tools import (
    DEFINITIONS,
    DEFINITIONS_WITH_FIELDS,
    PROFILES,
    argument_json_values,
    definition_for,
    foreground_timeouts,
    one_bad_field,
    problems_lists,
    register_profile,
    schema_values,
    tool_arguments,
    tool_definitions,
    tool_requests,
    valid_arguments,
)

__all__ = [
    "DEFINITIONS",
    "DEFINITIONS_WITH_FIELDS",
    "MAX_SAFE",
    "PROFILES",
    "Color",
    "Hostile",
    "HostileInt",
    "HostileStr",
    "LyingList",
    "Raising",
    "UnreadableDict",
    "UnreadableMapping",
    "anything",
    "argument_json_values",
    "contents",
    "contents_and_budgets",
    "definition_for",
    "escape_heavy_text",
    "fault_plans",
    "faults",
    "foreground_timeouts",
    "huge_texts",
    "identifiers",
    "json_scalars",
    "json_text",
    "json_values",
    "junk",
    "locators",
    "multibyte_chars",
    "one_bad_field",
    "presentation_texts",
    "problems_lists",
    "register_profile",
    "result_json_values",
    "sandbox_ids",
    "schedules",
    "schema_values",
    "small_texts",
    "tool_arguments",
    "tool_definitions",
    "tool_requests",
    "valid_arguments",
]
