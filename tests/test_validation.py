"""Argument validation and the ``e2b_command_arguments_invalid`` content
(C5: a refused call ran nothing; C12: the refusal fits the budget;
C17: values never echo back)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandrail.core._budget import cut_text, omission_marker, parse_omissions
from sandrail.core._canonical import canonical_json, canonical_size, escaped_size
from sandrail.core._definitions import (
    MIN_MAX_OUTPUT_BYTES,
    ToolDefinition,
)
from sandrail.core._rejection import ArgumentProblem, _cut_first, arguments_rejection
from sandrail.core._results import ErrorCode
from sandrail.core._validation import (
    MAX_ARGUMENT_DEPTH,
    MAX_ARGUMENT_VALUES,
    _checker_for,
    check_arguments,
)
from sandrail.testing.strategies import (
    DEFINITIONS,
    Color,
    Hostile,
    HostileStr,
    LyingList,
    UnreadableMapping,
    anything,
    one_bad_field,
    problems_lists,
    valid_arguments,
)


def _paths(problems: tuple[ArgumentProblem, ...]) -> list[str]:
    return [problem.path for problem in problems]


def _under(path: str, field: str) -> bool:
    return path == field or path.startswith((field + ".", field + "["))


# --- valid arguments ---------------------------------------------------------------------


@pytest.mark.untraced
@given(
    st.sampled_from(list(DEFINITIONS.values())).flatmap(
        lambda d: st.tuples(st.just(d), valid_arguments(d))
    )
)
def test_arguments_built_from_the_schema_are_accepted(case: tuple[ToolDefinition, Any]) -> None:
    definition, arguments = case
    assert check_arguments(definition, arguments) == ()


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("sandbox_status", {}),
        ("run_command", {"command": "echo hi", "env": None, "cwd": None, "timeout": None}),
        ("run_command", {"command": "x", "background": True, "background_timeout": 86400}),
        ("read_command_output", {"task_id": "a" * 64, "stdout_cursor": 2**53 - 1}),
        ("read_command_output", {"task_id": "0" * 64, "max_bytes": 4, "wait_seconds": 600}),
        ("stop_command", {"task_id": "f" * 64}),
        ("run_code", {"code": "print(1)", "language": "ruby"}),  # checked later, by the program
        ("sandbox_run_code", {"code": "1", "env": {"A": ""}, "timeout": 1}),
    ],
)
def test_boundary_arguments_are_accepted(name: str, arguments: dict[str, Any]) -> None:
    assert check_arguments(DEFINITIONS[name], arguments) == ()


def test_json_number_semantics_integral_floats_count_as_integers_bools_do_not() -> None:
    read = DEFINITIONS["read_command_output"]
    assert check_arguments(read, {"task_id": "a" * 64, "max_bytes": 4096.0}) == ()
    assert _paths(check_arguments(read, {"task_id": "a" * 64, "max_bytes": 4096.5})) == [
        "arguments.max_bytes"
    ]
    assert check_arguments(read, {"task_id": "a" * 64, "wait_seconds": True}) == (
        ArgumentProblem("arguments.wait_seconds", "must be an integer from 0 to 600"),
    )


def test_mappings_and_subclasses_are_read_as_their_plain_json() -> None:
    from types import MappingProxyType

    run = DEFINITIONS["run_command"]
    arguments = MappingProxyType({"command": HostileStr("ls"), "timeout": Color.RED})
    assert check_arguments(run, arguments) == ()
    assert check_arguments(run, {"command": "x", "env": None, "cwd": HostileStr("/")}) == ()


# --- each kind of invalid input --------------------------------------------------------


@pytest.mark.untraced
@given(one_bad_field())
def test_a_single_bad_field_is_reported_at_that_field_only(
    case: tuple[ToolDefinition, dict[str, Any], str],
) -> None:
    definition, arguments, name = case
    problems = check_arguments(definition, arguments)
    assert problems
    assert all(_under(path, f"arguments.{name}") for path in _paths(problems))


@pytest.mark.parametrize(
    ("name", "arguments", "expected"),
    [
        # wrong type
        (
            "run_command",
            {"command": 1},
            [
                (
                    "arguments.command",
                    "must be a string that is not blank and holds no NUL character",
                )
            ],
        ),
        (
            "run_command",
            {"command": "x", "background": "yes"},
            [("arguments.background", "must be true or false")],
        ),
        (
            "run_command",
            {"command": "x", "cwd": 3},
            [("arguments.cwd", "must be a string without NUL characters, or null")],
        ),
        (
            "run_command",
            {"command": "x", "env": ["A=1"]},
            [
                (
                    "arguments.env",
                    "must be a JSON object whose every value is a string without NUL "
                    "characters, or null",
                )
            ],
        ),
        (
            "run_command",
            {"command": "x", "env": {"HOME": 1}},
            [("arguments.env.HOME", "must be a string without NUL characters")],
        ),
        ("run_code", {"code": "x", "language": 3}, [("arguments.language", "must be a string")]),
        (
            "stop_command",
            {"task_id": 7},
            [
                (
                    "arguments.task_id",
                    "must be a string matching ^[a-f0-9]{64}$ (64 lowercase hex characters)",
                )
            ],
        ),
        # missing required
        ("run_command", {}, [("arguments.command", "is required")]),
        ("read_command_output", {"max_bytes": 5}, [("arguments.task_id", "is required")]),
        ("run_code", {"language": "py"}, [("arguments.code", "is required")]),
        # extra field
        ("sandbox_status", {"verbose": True}, [("arguments.verbose", "is not an allowed field")]),
        (
            "run_command",
            {"command": "x", "shell": "zsh", "user": "root"},
            [
                ("arguments.shell", "is not an allowed field"),
                ("arguments.user", "is not an allowed field"),
            ],
        ),
        # out of range
        ("run_command", {"command": ""}, [("arguments.command", "must not be empty")]),
        (
            "run_command",
            {"command": "x", "timeout": 0},
            [("arguments.timeout", "must be an integer from 1 to 86400")],
        ),
        (
            "run_command",
            {"command": "x", "background_timeout": 86401},
            [("arguments.background_timeout", "must be an integer from 1 to 86400")],
        ),
        (
            "read_command_output",
            {
                "task_id": "a" * 64,
                "stdout_cursor": -1,
                "stderr_cursor": 2**53,
                "max_bytes": 3,
                "wait_seconds": 601,
            },
            [
                ("arguments.max_bytes", "must be an integer from 4 to 65536"),
                ("arguments.stderr_cursor", "must be an integer from 0 to 9007199254740991"),
                ("arguments.stdout_cursor", "must be an integer from 0 to 9007199254740991"),
                ("arguments.wait_seconds", "must be an integer from 0 to 600"),
            ],
        ),
        # bad pattern
        (
            "stop_command",
            {"task_id": "A" * 64},
            [("arguments.task_id", "must match ^[a-f0-9]{64}$ (64 lowercase hex characters)")],
        ),
        # null where not allowed
        (
            "run_command",
            {"command": None},
            [
                (
                    "arguments.command",
                    "must be a string that is not blank and holds no NUL character",
                )
            ],
        ),
        (
            "run_command",
            {"command": "x", "background": None},
            [("arguments.background", "must be true or false")],
        ),
        ("run_code", {"code": "x", "language": None}, [("arguments.language", "must be a string")]),
        (
            "read_command_output",
            {"task_id": None},
            [
                (
                    "arguments.task_id",
                    "must be a string matching ^[a-f0-9]{64}$ (64 lowercase hex characters)",
                )
            ],
        ),
        # a wrong type inside a nullable field
        (
            "run_code",
            {"code": "x", "timeout": "60"},
            [("arguments.timeout", "must be an integer from 1 to 86400, or null")],
        ),
        (
            "run_code",
            {"code": "x", "timeout": True},
            [("arguments.timeout", "must be an integer from 1 to 86400, or null")],
        ),
    ],
)
def test_each_kind_of_invalid_input_names_its_field(
    name: str, arguments: Any, expected: list[tuple[str, str]]
) -> None:
    problems = check_arguments(DEFINITIONS[name], arguments)
    assert [(p.path, p.reason) for p in problems] == expected


@pytest.mark.parametrize("arguments", [None, [], ["command"], "echo hi", 3, 2.5, True, Hostile()])
def test_non_object_arguments_are_one_root_problem(arguments: Any) -> None:
    for definition in DEFINITIONS.values():
        assert check_arguments(definition, arguments) == (
            ArgumentProblem("arguments", "must be a JSON object"),
        )


def test_a_mapping_that_cannot_be_read_is_not_a_json_object() -> None:
    assert check_arguments(DEFINITIONS["sandbox_status"], UnreadableMapping()) == (
        ArgumentProblem("arguments", "must be a JSON object"),
    )


def test_lone_surrogates_are_reported_in_values_keys_and_nested_keys() -> None:
    lone = "must be valid Unicode text (holds a lone surrogate)"
    run = DEFINITIONS["run_command"]
    assert check_arguments(run, {"command": "echo \ud800"}) == (
        ArgumentProblem("arguments.command", lone),
    )
    assert check_arguments(run, {"command": "x", "env": {"K\udfff": "v", "A": "\udc00"}}) == (
        ArgumentProblem("arguments.env.A", lone),
        ArgumentProblem("arguments.env.K\\udfff", lone),
    )
    problems = check_arguments(run, {"command": "x", "\ud800": 1})
    assert problems == (
        ArgumentProblem("arguments.\\ud800", "is not an allowed field"),
        ArgumentProblem("arguments.\\ud800", lone),
    )
    canonical_json([problem.path for problem in problems])  # paths are valid Unicode


def test_values_that_are_not_json_data_are_reported_where_they_are() -> None:
    code = DEFINITIONS["run_code"]
    problems = check_arguments(
        code,
        {
            "code": "x",
            "env": {"A": object(), "B": math.nan, "C": Hostile(), "D": UnreadableMapping()},
            "timeout": LyingList([1]),
            1: "one",
        },
    )
    assert [(p.path, p.reason) for p in problems] == [
        ("arguments", "must be JSON data (keys must be text, not int)"),
        ("arguments.env.A", "must be JSON data"),
        ("arguments.env.B", "must be JSON data (a finite number)"),
        ("arguments.env.C", "must be JSON data"),
        ("arguments.env.D", "must be JSON data"),
        ("arguments.timeout", "must be an integer from 1 to 86400, or null"),
    ]


def test_cycles_deep_nesting_and_huge_arguments_are_refused_without_recursion() -> None:
    run = DEFINITIONS["run_command"]
    looped: list[Any] = []
    looped.append(looped)
    deep: Any = "bottom"
    for _ in range(100_000):
        deep = {"d": deep}
    too_deep = f"must be nested at most {MAX_ARGUMENT_DEPTH} levels deep"
    for nested in (looped, deep):
        problems = check_arguments(run, {"command": "x", "env": nested})
        assert [p.reason for p in problems] == [
            "must be a JSON object whose every value is a string without NUL characters, or null",
            too_deep,
        ] or [p.reason for p in problems] == ["must be a string without NUL characters", too_deep]
    wide = {"command": "x", "extra": list(range(MAX_ARGUMENT_VALUES))}
    assert check_arguments(run, wide) == (
        ArgumentProblem("arguments", f"must hold at most {MAX_ARGUMENT_VALUES} values in all"),
    )


def test_c17_reasons_never_quote_a_value() -> None:
    secret = "hunter2-secret"
    run = DEFINITIONS["run_command"]
    arguments = {
        "command": [secret],
        "env": {"TOKEN": [secret], "OTHER": {secret: secret}},
        "timeout": secret,
        "cwd": {"x": secret},
    }
    problems = check_arguments(run, arguments)
    assert len(problems) == 5
    assert secret not in canonical_json(arguments_rejection(problems, 24_000)).decode()


def test_validators_are_built_once_per_definition() -> None:
    definition = DEFINITIONS["run_command"]
    rebuilt = ToolDefinition.from_dict(definition.to_dict())
    assert _checker_for(definition) is _checker_for(definition)
    assert _checker_for(rebuilt).validator is _checker_for(definition).validator


def test_unknown_schema_keywords_still_get_plain_reasons() -> None:
    custom = ToolDefinition.from_dict(
        {
            **DEFINITIONS["sandbox_status"].to_dict(),
            "parameters": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "mode": {"enum": ["a", "b"]},
                    "tag": {"type": "string", "maxLength": 3, "minLength": 2},
                    "n": {"type": "number", "multipleOf": 2},
                    "lo": {"type": "integer", "minimum": 5},
                    "hi": {"type": "integer", "maximum": 5},
                    "box": {"type": "object"},
                    "list": {"type": "array"},
                    "any": {"not": {}},
                },
            },
        }
    )
    problems = check_arguments(
        custom,
        {"mode": "c", "tag": "abcd", "n": 3, "lo": 1, "hi": 9, "box": 1, "list": 1, "any": 1},
    )
    assert {(p.path, p.reason) for p in problems} == {
        ("arguments.any", "does not meet the schema's not rule"),
        ("arguments.box", "must be a JSON object"),
        ("arguments.hi", "must be an integer of at most 5"),
        ("arguments.list", "must be an array"),
        ("arguments.lo", "must be an integer of at least 5"),
        ("arguments.mode", "must be one of a, b"),
        ("arguments.n", "does not meet the schema's multipleOf rule"),
        ("arguments.tag", "must be at most 3 characters long"),
    }
    assert check_arguments(custom, {"tag": "a", "n": "x"}) == (
        ArgumentProblem("arguments.n", "must be a number"),
        ArgumentProblem("arguments.tag", "must be at least 2 characters long"),
    )


def test_foreign_schema_shapes_get_plain_reasons() -> None:
    custom = ToolDefinition.from_dict(
        {
            **DEFINITIONS["sandbox_status"].to_dict(),
            "parameters": {
                "type": "object",
                "additionalProperties": False,
                "required": ["a", "b"],
                "properties": {
                    "a": {"type": ["string", "null"]},
                    "b": {"const": 3},
                    "c": {"exclusiveMinimum": 0},
                },
            },
        }
    )
    assert check_arguments(custom, {"a": 1, "c": -1}) == (
        ArgumentProblem("arguments.a", "must be a string, or null"),
        ArgumentProblem("arguments.b", "is required"),
        ArgumentProblem("arguments.c", "must be a value the schema allows"),
    )
    assert check_arguments(custom, {"a": None, "b": 4}) == (
        ArgumentProblem("arguments.b", "must be exactly 3"),
    )


@given(st.sampled_from(list(DEFINITIONS.values())), anything)
def test_check_arguments_never_raises(definition: ToolDefinition, arguments: Any) -> None:
    problems = check_arguments(definition, arguments)
    assert list(problems) == sorted(set(problems), key=lambda p: (p.path, p.reason))
    for problem in problems:
        assert problem.path.startswith("arguments")
        canonical_json([problem.path, problem.reason])


@pytest.mark.untraced
@given(
    st.sampled_from(list(DEFINITIONS.values())), st.dictionaries(st.text(), anything, max_size=6)
)
def test_check_arguments_never_raises_for_objects(
    definition: ToolDefinition, arguments: Any
) -> None:
    problems = check_arguments(definition, arguments)
    assert all(problem.path.startswith("arguments") for problem in problems)


# --- the rejection content (C5, C12) --------------------------------------------------------


def test_rejection_content_for_a_bad_run_command_call() -> None:
    problems = check_arguments(DEFINITIONS["run_command"], {"command": "", "timeout": 0, "x": 1})
    assert arguments_rejection(problems, 24_000) == {
        "status": "error",
        "ok": False,
        "error_type": ErrorCode.ARGUMENTS_INVALID.value,
        "executed": False,
        "problems": [
            {"field": "arguments.command", "reason": "must not be empty"},
            {"field": "arguments.timeout", "reason": "must be an integer from 1 to 86400"},
            {"field": "arguments.x", "reason": "is not an allowed field"},
        ],
        "instruction": "Nothing ran. Fix these arguments and try again.",
    }


@pytest.mark.untraced
@given(problems_lists, st.integers(MIN_MAX_OUTPUT_BYTES, 6000))
def test_c12_rejection_fits_budget(problems: list[ArgumentProblem], budget: int) -> None:
    content = arguments_rejection(problems, budget)
    assert canonical_size(content) <= budget
    assert content["ok"] is False
    assert content["executed"] is False
    assert content["error_type"] == "e2b_command_arguments_invalid"
    if "problems" not in content:
        assert set(content) == {"status", "ok", "error_type", "executed"}
        return
    kept = content["problems"]
    assert len(kept) + content.get("problems_omitted", 0) == len(problems)
    assert ("problems_omitted" in content) is (len(kept) < len(problems))
    for entry, problem in zip(kept, problems, strict=False):
        for text, original in ((entry["field"], problem.path), (entry["reason"], problem.reason)):
            _assert_cut_from(text, original)


def _assert_cut_from(text: str, original: str) -> None:
    printable = original.encode("utf-8", "backslashreplace").decode("utf-8")
    if text == printable:
        return
    # The one marker (sandrail.core._budget's); the last marker-shaped
    # stretch is the cut's (the kept head may hold marker-like text).
    (*_, marker) = parse_omissions(text)
    head, cut, tail = text[: marker.start], marker.omitted_bytes, text[marker.end :]
    assert printable.startswith(head)
    assert printable.endswith(tail)
    assert len(head.encode()) + cut + len(tail.encode()) == len(printable.encode())


@given(problems_lists.filter(bool), st.integers(400, 6000))
def test_c12_first_problem_always_kept_from_400_bytes(
    problems: list[ArgumentProblem], budget: int
) -> None:
    content = arguments_rejection(problems, budget)
    assert content["problems"]


@given(st.integers(1, 3000), st.integers(MIN_MAX_OUTPUT_BYTES, 2000))
def test_c12_many_problems_keep_a_prefix_and_count_the_rest(count: int, budget: int) -> None:
    problems = [
        ArgumentProblem(f"arguments.f{i:05}", "is not an allowed field") for i in range(count)
    ]
    content = arguments_rejection(problems, budget)
    assert canonical_size(content) <= budget
    kept = content["problems"]
    assert kept == [problem.to_dict() for problem in problems[: len(kept)]]
    assert kept, "an ordinary first problem always fits at the minimum budget"


def test_c12_huge_field_names_are_cut_with_a_marker() -> None:
    problems = [ArgumentProblem("arguments." + "k" * 1_000_000, "is not an allowed field")]
    content = arguments_rejection(problems, MIN_MAX_OUTPUT_BYTES)
    assert canonical_size(content) <= MIN_MAX_OUTPUT_BYTES
    (entry,) = content["problems"]
    assert parse_omissions(entry["field"])
    assert entry["reason"] == "is not an allowed field"
    _assert_cut_from(entry["field"], problems[0].path)


def test_c12_escaped_and_multibyte_text_is_cut_by_its_canonical_size() -> None:
    for filler in ('"', "\x01", "é", "😀", "\ud800"):
        problems = [ArgumentProblem("arguments." + filler * 5000, filler * 5000)] * 3
        for budget in (256, 300, 700, 2000):
            content = arguments_rejection(problems, budget)
            assert canonical_size(content) <= budget
            if budget >= 400:
                _assert_cut_from(content["problems"][0]["field"], problems[0].path)


def test_c12_falls_back_to_the_bare_content_when_no_problem_fits() -> None:
    # A field whose marker alone overflows the room left at the minimum budget.
    problems = [ArgumentProblem("\x00" * 10**7, "\x00" * 10**7)] * 10**5
    assert arguments_rejection(problems, MIN_MAX_OUTPUT_BYTES) == {
        "status": "error",
        "ok": False,
        "error_type": "e2b_command_arguments_invalid",
        "executed": False,
    }


@pytest.mark.parametrize("budget", [MIN_MAX_OUTPUT_BYTES - 1, 0, -5, 300.0, True])
def test_rejection_refuses_budgets_below_the_minimum(budget: Any) -> None:
    with pytest.raises(ValueError, match="max_output_bytes"):
        arguments_rejection([ArgumentProblem("arguments", "must be a JSON object")], budget)


def test_c13_cuts_keep_the_marker_or_give_up() -> None:
    text = "x" * 100
    limit = escaped_size(omission_marker(100))
    least = cut_text(text, limit)
    assert least is not None
    assert escaped_size(least) <= limit
    _assert_cut_from(least, text)
    assert cut_text(text, limit - 1) is None
    # Room for the marker (2 digits: under 100 bytes omitted) and five "é".
    room = escaped_size(omission_marker(99)) + 10
    cut = cut_text("é" * 50, room)
    assert cut is not None
    assert escaped_size(cut) <= room
    _assert_cut_from(cut, "é" * 50)
    # Cutting a million bytes omits at least 100,000: a marker of 6 digits or more.
    marker = escaped_size(omission_marker(10**5))
    # A short field leaves too little room for the reason's marker: give up.
    assert _cut_first(("ab", "r" * 10**6), escaped_size("ab") + marker - 1) is None
    # Half the room is too little for the field's marker: give up.
    assert _cut_first(("f" * 10**6, "r" * 10**6), 2 * (marker - 1)) is None


def test_rejection_with_no_problems_is_still_well_formed() -> None:
    assert arguments_rejection((), MIN_MAX_OUTPUT_BYTES)["problems"] == []
