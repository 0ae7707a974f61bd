"""A sandrail backend for Deep Agents: ``SandboxBackendProtocol`` on a :class:`~sandrail.Toolset`.

    backend = sandrail.adapters.deepagents.SandrailSandbox(toolset)
    agent = create_deep_agent(model, backend=backend, checkpointer=checkpointer)

It takes the place of ``langchain-e2b``'s ``E2BSandbox``: Deep Agents' shell
tool (``execute``) and its file tools (``ls``, ``read_file``, ``write_file``,
``edit_file``, ``grep``, ``glob``, which Deep Agents' ``BaseSandbox`` builds
on ``execute``, ``upload_files`` and ``download_files``) all run through
sandrail's ``run_command``:

- At most once per tool call. ``execute`` receives no call id, so the key
  comes from what LangGraph gives the running tool: the thread id and the
  model's tool call id (read from LangChain's own callback of the tool's
  start, :func:`langchain_core.tracers.context.register_configure_hook`), and
  the place of this command among those the tool call ran (a file tool may
  run two). A tool call LangGraph re-runs (a resume, a crash re-run, two
  processes resuming one saved question) runs the same commands in the same
  order, so each reconciles with its first launch and never launches again
  (C2). Where no tool call id is known (a middleware hook calling the
  backend), the checkpoint namespace of the running task stands in for it,
  which a re-run of that task keeps. Outside a LangGraph run nothing runs:
  the output says why (``e2b_command_operation_key_required``).
  A model that reuses a tool call id within one thread makes the later call
  a repeat of the earlier one: it is reconciled with it, never run twice.
- A call that reconciled with an earlier launch (``deduplicated``) says so:
  its output, that launch's, ends with :data:`RAN_BEFORE`, since Deep
  Agents' ``ExecuteResponse`` has no field for it and the output alone would
  read like a fresh run.
- ``truncated`` is honest: ``True`` exactly when sandrail cut the output to
  fit the budget (the output then keeps its head and tail around a marker
  saying how much was left out, and the whole output is in the artifact
  store when the toolset has one).
- A file tool never answers from a cut output. Each of its commands
  (``ls``, ``read_file``, ``glob``, ``grep``, ...) needs its whole output
  parsed: when sandrail cut it to the budget, the backend reads the rest by
  cursor (``read_command_output`` of the same task, under keys of its own:
  reading never launches anything), up to :data:`FILE_OUTPUT_MAX_BYTES`.
  An output bigger than that, a read that fails, or a command whose outcome
  is not its own (``uncertain``, a refusal) makes the file tool answer an
  error saying so (``LsResult.error``, ``ReadResult.error``, ...), with
  sandrail's JSON result where there is one: never a partial listing.
- A result that is not a command's own outcome (``uncertain``, an
  ``error`` that ran nothing, a refusal) is told as it is: the output is the
  result's JSON (its ``status``, the locator and what to do next) and the
  exit code is ``None``, never a made-up ``1``.
- What Deep Agents' ``execute`` schema lets a model send is run, with two
  exceptions: a blank command does nothing and succeeds (exit code 0, as a
  shell does), and a command with a NUL character or a lone surrogate, which
  no shell can be given, is refused (the output says why; nothing ran). A
  command runs at most the toolset's ``foreground_timeout_seconds`` (300 by
  default), whatever longer ``timeout`` Deep Agents passes.
- Approval: when the harness's policy answers ``ApprovalRequired``, the
  backend asks through LangGraph's ``interrupt()`` (as the LangChain adapter
  does: ``Command(resume={"type": "approve"})`` or ``{"type": "reject"}``);
  or let Deep Agents ask with ``interrupt_on={"execute": True}`` and the
  policy ``ALLOW`` it. Either way an approved call runs once under its key.
  With ``interrupt_on`` Deep Agents decides, and a rejection does not stand
  against an approval given later on a copy of the checkpoint:
  :func:`human_in_the_loop` is the same middleware with the first decision
  standing (kept in the toolset's record).
"""

from __future__ import annotations

import base64
import contextvars
import shlex
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, TypeVar

from sandrail import ErrorCode, ToolResult, Toolset
from sandrail.adapters._glue import approval_request
from sandrail.adapters._hitl import middleware
from sandrail.adapters._langgraph import decision_schema, place_of, read_decision, turn_of
from sandrail.adapters.kit import Adapter, ModelCall, require, run_id_of
from sandrail.core import READ_MAX_BYTES

__all__ = ["FILE_OUTPUT_MAX_BYTES", "RAN_BEFORE", "SandrailSandbox", "human_in_the_loop"]

FILE_OUTPUT_MAX_BYTES: Final = 8 * 2**20
"""Most output (both streams) a file tool's command may print: read back
whole, past the budget by cursor; beyond it the file tool answers an error."""

_SMALLEST_PAGE: Final = 256
"""The fewest bytes of each stream one read of the rest asks for: a page
this small that still does not fit the budget makes the file tool an error."""

_FILE_TOOL: Final[contextvars.ContextVar[bool]] = contextvars.ContextVar(
    "sandrail_deepagents_file_tool", default=False
)
"""Whether ``execute`` is running a command of a file tool (whose output is
parsed, so must be whole) rather than the model's own command."""

_Answer = TypeVar("_Answer")


class _NotWhole(Exception):
    """A file tool's command gave no whole output; the message says why."""


_KEPT: Final = 4096
"""Tool runs whose call id and command count are remembered (oldest dropped)."""


def SandrailSandbox(toolset: Toolset, *, workdir: str | None = None, timeout: int = 30 * 60) -> Any:
    """A Deep Agents sandbox backend running every command through ``toolset``
    (see the module doc). ``workdir``: the directory commands run in (the
    sandbox's default when ``None``); ``timeout``: seconds a command may
    run when ``execute`` is given none.

    Raises ``ImportError`` naming the ``deepagents`` extra when Deep Agents
    is missing, ``ValueError`` for a ``timeout`` that is not a positive
    whole number."""
    require("deepagents", "deepagents")  # checked on every call: the class is cached
    if isinstance(timeout, bool) or not isinstance(timeout, int) or timeout <= 0:
        raise ValueError(f"timeout must be a positive whole number of seconds, got {timeout!r}")
    if workdir is not None and (not isinstance(workdir, str) or not workdir.strip()):
        raise ValueError("workdir must be a non-blank string or None")
    return _backend_class()(toolset, workdir, timeout)


class _ToolCalls:
    """The tool call id of each running LangChain tool, by its run id, as
    LangChain's callbacks report it, and how many commands each tool run
    has sent so far."""

    def __init__(self) -> None:
        self._ids: OrderedDict[Any, str] = OrderedDict()
        self._counts: OrderedDict[Any, int] = OrderedDict()
        self._lock = threading.Lock()

    def started(self, run_id: Any, tool_call_id: object) -> None:
        if not isinstance(tool_call_id, str) or not tool_call_id.strip():
            return
        with self._lock:
            self._ids[run_id] = tool_call_id
            while len(self._ids) > _KEPT:
                self._ids.popitem(last=False)

    def call_id(self, run_id: Any) -> str | None:
        with self._lock:
            return self._ids.get(run_id)

    def next_number(self, scope: Any) -> int:
        with self._lock:
            number = self._counts.get(scope, 0) + 1
            self._counts[scope] = number
            self._counts.move_to_end(scope)
            while len(self._counts) > _KEPT:
                self._counts.popitem(last=False)
            return number


_CALLS: Final = _ToolCalls()
_HOOKED = threading.Lock()
_hook: list[Any] = []


def _listen() -> None:
    """Register, once per process, a LangChain callback that notes each
    tool run's call id (``on_tool_start`` receives it)."""
    with _HOOKED:
        if _hook:
            return
        import contextvars

        callbacks = require("langchain_core.callbacks", "deepagents")
        context = require("langchain_core.tracers.context", "deepagents")

        class NoteToolCalls(callbacks.BaseCallbackHandler):  # type: ignore[misc, name-defined]
            """Notes the tool call id of each tool run (nothing else)."""

            run_inline = True  # before the tool runs, also under an async manager

            def on_tool_start(self, serialized: Any, input_str: Any, **kwargs: Any) -> None:
                _CALLS.started(kwargs.get("run_id"), kwargs.get("tool_call_id"))

        var: contextvars.ContextVar[Any] = contextvars.ContextVar(
            "sandrail_deepagents_tool_calls",
            default=NoteToolCalls(),  # noqa: B039 - one handler, shared by design
        )
        context.register_configure_hook(var, True)
        _hook.append(var)


def _key_parts() -> tuple[str, Any] | str:
    """The run part of the key of the command about to run and the scope its
    number counts in, or why there is none."""
    config_module = require("langgraph.config", "deepagents")
    try:
        config = config_module.get_config()
    except RuntimeError:
        return "the backend was called outside a LangGraph run"
    configurable = config.get("configurable") or {}
    manager = config.get("callbacks")
    tool_run = getattr(manager, "parent_run_id", None)
    call_id = _CALLS.call_id(tool_run) if tool_run is not None else None
    if call_id is not None:
        run = _run_of_call(configurable, call_id)
    else:
        namespace = configurable.get("checkpoint_ns")
        run = (
            run_id_of("langgraph", _thread(configurable), "task", namespace)
            if tool_run is not None
            else None
        )
    if run is None:
        return "the backend was called outside a LangGraph task"
    return run, tool_run


def _config() -> object:
    """The running LangGraph task's config, or ``None`` outside one."""
    config_module = require("langgraph.config", "deepagents")
    try:
        return config_module.get_config()
    except RuntimeError:
        return None


def _thread(configurable: Mapping[str, Any]) -> str:
    thread = configurable.get("thread_id")
    return "-" if thread is None or not str(thread).strip() else str(thread)


def _run_of_call(configurable: Mapping[str, Any], call_id: str) -> str | None:
    """The run part of the keys of the commands tool call ``call_id`` sends."""
    return run_id_of("langgraph", _thread(configurable), "call", call_id)


def human_in_the_loop(backend: Any, interrupt_on: Mapping[str, Any], **options: Any) -> Any:
    """LangChain's ``HumanInTheLoopMiddleware`` (what Deep Agents'
    ``interrupt_on=`` builds; ``interrupt_on`` and ``options`` as LangChain
    takes them) for an agent whose sandbox is ``backend`` (a
    :func:`SandrailSandbox`), whose first decision about an ``execute`` call
    stands: approved on a copy of the checkpoint after it was rejected on
    another, the command runs nothing and the model reads the rejection;
    rejected after an approval launched it, the model reads ``uncertain``
    with the task's locator. Pass it as ``create_deep_agent(...,
    middleware=[human_in_the_loop(backend, {"execute": True})])`` in place
    of ``interrupt_on=``. Decisions are kept in the toolset's ownership
    record, so across processes the toolset needs its durable ``record=``.
    Deep Agents' file tools (``write_file``, ``edit_file``, ...) listed here
    are gated as by LangChain's own middleware, without that rule (each may
    send several commands, none of them the call a person saw).

    Raises ``TypeError`` when ``backend`` is not a :func:`SandrailSandbox`,
    ``ImportError`` naming the extra when Deep Agents is missing, and
    whatever LangChain's middleware raises for its own settings."""
    require("deepagents", "deepagents")
    if not isinstance(backend, _backend_class()):
        raise TypeError(
            f"human_in_the_loop takes the agent's SandrailSandbox, got {type(backend).__name__}"
        )

    def governed(call: Mapping[str, Any], state: object, config: object) -> Any:
        arguments = call.get("args")
        call_id = call.get("id")
        if call.get("name") != "execute" or not isinstance(arguments, Mapping):
            return None
        command, timeout = arguments.get("command"), arguments.get("timeout")
        if not isinstance(call_id, str) or not isinstance(command, str) or not command.strip():
            return None
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int)):
            return None
        configurable = config.get("configurable") if isinstance(config, Mapping) else None
        run = _run_of_call(configurable if isinstance(configurable, Mapping) else {}, call_id)
        adapter = backend.adapter
        # An execute call sends one command: the first of its tool call.
        made = adapter.call_of(
            "run_command",
            backend.arguments(command, timeout),
            call_id="deepagents-1",
            run_id=run,
            turn=turn_of(config, state, call_id),
        )
        return (adapter, made) if not isinstance(made, ToolResult) else None

    return middleware(governed, interrupt_on, options)


def _backend_class() -> type[Any]:
    if _classes:
        return _classes[0]
    sandbox = require("deepagents.backends.sandbox", "deepagents")
    protocol = require("deepagents.backends.protocol", "deepagents")
    types = require("langgraph.types", "deepagents")
    errors = require("langgraph.errors", "deepagents")
    _listen()

    def refusal(response: str, what: str) -> Callable[[str], Any]:
        """The error answer of a file tool whose command gave no whole output."""
        return lambda why: getattr(protocol, response)(error=f"{what}: {why}")

    def refused_ls(path: str) -> Callable[[str], Any]:
        return refusal("LsResult", f"Path '{path}'")

    def refused_read(file_path: str) -> Callable[[str], Any]:
        return refusal("ReadResult", f"File '{file_path}'")

    def refused_write(file_path: str) -> Callable[[str], Any]:
        return refusal("WriteResult", f"Error writing file '{file_path}'")

    def refused_edit(file_path: str) -> Callable[[str], Any]:
        return refusal("EditResult", f"Error editing file '{file_path}'")

    def refused_delete(file_path: str) -> Callable[[str], Any]:
        return refusal("DeleteResult", f"Error deleting '{file_path}'")

    def refused_grep(path: str | None) -> Callable[[str], Any]:
        return refusal("GrepResult", f"Path '{path or '.'}'")

    def refused_glob(path: str | None) -> Callable[[str], Any]:
        return refusal("GlobResult", f"Path '{path or '/'}'")

    class Sandbox(sandbox.BaseSandbox):  # type: ignore[misc, name-defined]
        """Deep Agents' sandbox protocol on a sandrail toolset (see the module doc)."""

        def __init__(self, toolset: Toolset, workdir: str | None, timeout: int) -> None:
            self._toolset = toolset
            self._adapter = Adapter(toolset, framework="Deep Agents", profile="full")
            self._workdir = workdir
            self._timeout = timeout

        @property
        def id(self) -> str:
            return self._toolset.session_id

        def execute(self, command: str, *, timeout: int | None = None) -> Any:
            if isinstance(command, str) and not command.strip():
                # What a shell does with an empty command line: nothing, and
                # succeeds (sandrail refuses a blank command, which Deep Agents'
                # schema lets a model send).
                return protocol.ExecuteResponse(output="", exit_code=0, truncated=False)
            if _FILE_TOOL.get():
                return self._whole(self.arguments(command, timeout))
            return _response(protocol, self._run(self.arguments(command, timeout)))

        @property
        def adapter(self) -> Adapter:
            """The adapter every command runs through."""
            return self._adapter

        def arguments(self, command: str, timeout: int | None) -> dict[str, Any]:
            """The ``run_command`` arguments ``execute(command, timeout=...)`` sends."""
            seconds = self._timeout if timeout is None or timeout <= 0 else int(timeout)
            arguments: dict[str, Any] = {"command": command, "timeout": seconds}
            if self._workdir is not None:
                arguments["cwd"] = self._workdir
            return arguments

        def _run(self, arguments: dict[str, Any]) -> ToolResult:
            return self._run_call(arguments)[0]

        def _run_call(self, arguments: dict[str, Any]) -> tuple[ToolResult, ModelCall | None]:
            """The result of ``run_command`` with ``arguments`` under the key
            of its place in the running tool call, and that call (``None``
            when there was none to make)."""
            adapter = self._adapter
            parts = _key_parts()
            if isinstance(parts, str):
                refused = adapter.refusal(
                    ErrorCode.OPERATION_KEY_REQUIRED,
                    f"No safe operation key for this command ({parts}); nothing ran.",
                )
                return refused, None
            run, scope = parts
            call_id = f"deepagents-{_CALLS.next_number(scope)}"
            turn = turn_of(_config())
            call = adapter.call_of("run_command", arguments, call_id=call_id, run_id=run, turn=turn)
            if isinstance(call, ToolResult):
                return call, None
            return self._asked_run(call), call

        def _asked_run(self, call: ModelCall) -> ToolResult:
            adapter = self._adapter
            place = place_of(_config(), None, call.call_id)
            shown = adapter.asked(call, shown_as=place)
            result = adapter.run_sync(call)
            if not result.needs_approval:
                return result
            question = approval_request(self._toolset, result, call)
            try:
                answer = types.interrupt(question, response_schema=decision_schema())
            except errors.GraphInterrupt:
                adapter.asking(call, shown_as=place)  # put to a person now
                raise
            # An answer handed to a question this call did not have before
            # this run is another call's (the checkpoint was edited since).
            approved, reason = read_decision(answer)
            if not shown:
                return adapter.unasked()
            if not approved:
                return adapter.reject(call, reason)
            return adapter.run_sync(call, approved=True)

        # Strategy: BaseSandbox builds each file tool on ``execute`` and parses
        # what it prints as if whole. Each file tool here runs with
        # ``_FILE_TOOL`` set, so its commands go through ``_whole``, which
        # either returns the command's whole output or raises ``_NotWhole``;
        # the file tool then answers an error of its own response type.

        def _whole(self, arguments: dict[str, Any]) -> Any:
            """The ``ExecuteResponse`` of a file tool's command with its whole
            output, read by cursor where the budget cut it. Raises
            ``_NotWhole`` for a result that is not the command's own outcome,
            an output over :data:`FILE_OUTPUT_MAX_BYTES` and a read of the
            rest that does not answer it."""
            result, call = self._run_call(arguments)
            if call is None or result.status != "ok" or result.exit_code is None:
                raise _NotWhole(
                    f"sandrail answered {result.status}, not the command's output: "
                    f"{result.to_json()}"
                )
            stdout, stderr = result.stdout or "", result.stderr or ""
            if result.truncated:
                stdout, stderr = self._read_rest(call, result)
            return protocol.ExecuteResponse(
                output=stdout + stderr, exit_code=result.exit_code, truncated=False
            )

        def _read_rest(self, call: ModelCall, result: ToolResult) -> tuple[str, str]:
            """Both streams of ``result``'s command whole, read from the
            start by ``read_command_output``, each read under a key of its
            own made from ``call``'s (a re-run reads again, never launches)."""
            task = result.task_id
            out_bytes = result.content.get("stdout_bytes")
            err_bytes = result.content.get("stderr_bytes")
            if task is None or not isinstance(out_bytes, int) or not isinstance(err_bytes, int):
                raise _NotWhole(f"its output was cut and cannot be read back: {result.to_json()}")
            sizes = (out_bytes, err_bytes)
            total = out_bytes + err_bytes
            if total > FILE_OUTPUT_MAX_BYTES:
                raise _NotWhole(
                    f"its output ({total} bytes) is too big to read back whole (at most "
                    f"{FILE_OUTPUT_MAX_BYTES}); nothing partial is returned: narrow the "
                    f"path or pattern (task_id {task})"
                )
            cursors = (0, 0)
            pages: tuple[list[str], list[str]] = ([], [])
            size = min(READ_MAX_BYTES, max(_SMALLEST_PAGE, self._toolset.max_output_bytes // 2))
            while cursors[0] < sizes[0] or cursors[1] < sizes[1]:
                arguments = {
                    "task_id": task,
                    "stdout_cursor": cursors[0],
                    "stderr_cursor": cursors[1],
                    "max_bytes": size,
                }
                page = self._read_page(call, arguments)
                if page.truncated and size > _SMALLEST_PAGE:
                    size = max(_SMALLEST_PAGE, size // 2)  # the page did not fit: ask for less
                    continue
                moved = (page.content.get("stdout_cursor"), page.content.get("stderr_cursor"))
                if (
                    page.status != "ok"
                    or page.truncated
                    or not isinstance(moved[0], int)
                    or not isinstance(moved[1], int)
                    or moved == cursors
                ):
                    raise _NotWhole(
                        f"reading the rest of its output (task_id {task}) did not answer it: "
                        f"{page.to_json()}"
                    )
                pages[0].append(page.stdout or "")
                pages[1].append(page.stderr or "")
                cursors = (moved[0], moved[1])
            return "".join(pages[0]), "".join(pages[1])

        def _read_page(self, call: ModelCall, arguments: dict[str, Any]) -> ToolResult:
            """One ``read_command_output`` of the rest, keyed by ``call``'s
            key and the read's cursors and size (the same read on a re-run)."""
            cursors = f"{arguments['stdout_cursor']}-{arguments['stderr_cursor']}"
            call_id = f"{call.call_id}-read-{cursors}-{arguments['max_bytes']}"
            read = self._adapter.call_of(
                "read_command_output", arguments, call_id=call_id, run_id=call.run_id
            )
            return read if isinstance(read, ToolResult) else self._adapter.run_sync(read)

        def _file_tool(
            self, run: Callable[[], _Answer], refused: Callable[[str], _Answer]
        ) -> _Answer:
            """``run()``, a BaseSandbox file tool, with its commands' output
            whole, or ``refused(why)`` when one gave none."""
            token = _FILE_TOOL.set(True)
            try:
                return run()
            except _NotWhole as problem:
                return refused(str(problem))
            finally:
                _FILE_TOOL.reset(token)

        async def _afile_tool(
            self, run: Callable[[], Awaitable[_Answer]], refused: Callable[[str], _Answer]
        ) -> _Answer:
            """:meth:`_file_tool` for an asynchronous file tool (BaseSandbox
            runs ``execute`` in a thread, which copies the flag)."""
            token = _FILE_TOOL.set(True)
            try:
                return await run()
            except _NotWhole as problem:
                return refused(str(problem))
            finally:
                _FILE_TOOL.reset(token)

        def ls(self, path: str) -> Any:
            return self._file_tool(lambda: super(Sandbox, self).ls(path), refused_ls(path))

        async def als(self, path: str) -> Any:
            return await self._afile_tool(lambda: super(Sandbox, self).als(path), refused_ls(path))

        def read(self, file_path: str, offset: int = 0, limit: int = 2000) -> Any:
            return self._file_tool(
                lambda: super(Sandbox, self).read(file_path, offset, limit),
                refused_read(file_path),
            )

        async def aread(self, file_path: str, offset: int = 0, limit: int = 2000) -> Any:
            return await self._afile_tool(
                lambda: super(Sandbox, self).aread(file_path, offset, limit),
                refused_read(file_path),
            )

        def write(self, file_path: str, content: str) -> Any:
            return self._file_tool(
                lambda: super(Sandbox, self).write(file_path, content), refused_write(file_path)
            )

        async def awrite(self, file_path: str, content: str) -> Any:
            return await self._afile_tool(
                lambda: super(Sandbox, self).awrite(file_path, content), refused_write(file_path)
            )

        def edit(
            self, file_path: str, old_string: str, new_string: str, replace_all: bool = False
        ) -> Any:
            return self._file_tool(
                lambda: super(Sandbox, self).edit(file_path, old_string, new_string, replace_all),
                refused_edit(file_path),
            )

        async def aedit(
            self, file_path: str, old_string: str, new_string: str, replace_all: bool = False
        ) -> Any:
            return await self._afile_tool(
                lambda: super(Sandbox, self).aedit(file_path, old_string, new_string, replace_all),
                refused_edit(file_path),
            )

        def delete(self, file_path: str) -> Any:
            return self._file_tool(
                lambda: super(Sandbox, self).delete(file_path), refused_delete(file_path)
            )

        async def adelete(self, file_path: str) -> Any:
            return await self._afile_tool(
                lambda: super(Sandbox, self).adelete(file_path), refused_delete(file_path)
            )

        def grep(
            self,
            pattern: str,
            path: str | None = None,
            glob: str | None = None,
            *,
            max_count: int | None = None,
        ) -> Any:
            return self._file_tool(
                lambda: super(Sandbox, self).grep(pattern, path, glob, max_count=max_count),
                refused_grep(path),
            )

        async def agrep(
            self,
            pattern: str,
            path: str | None = None,
            glob: str | None = None,
            *,
            max_count: int | None = None,
        ) -> Any:
            return await self._afile_tool(
                lambda: super(Sandbox, self).agrep(pattern, path, glob, max_count=max_count),
                refused_grep(path),
            )

        def glob(self, pattern: str, path: str | None = None) -> Any:
            return self._file_tool(
                lambda: super(Sandbox, self).glob(pattern, path), refused_glob(path)
            )

        async def aglob(self, pattern: str, path: str | None = None) -> Any:
            return await self._afile_tool(
                lambda: super(Sandbox, self).aglob(pattern, path), refused_glob(path)
            )

        def upload_files(self, files: list[tuple[str, bytes]]) -> list[Any]:
            answers = []
            for path, content in files:
                if not isinstance(path, str) or not path.startswith("/"):
                    answers.append(protocol.FileUploadResponse(path=path, error="invalid_path"))
                    continue
                encoded = base64.b64encode(content).decode("ascii")
                quoted = shlex.quote(path)
                command = (
                    f"if [ -d {quoted} ]; then echo is_directory; exit 3; fi; "
                    f"printf %s {encoded} | base64 -d > {quoted}"
                )
                error = None
                try:
                    whole = self._whole({"command": command, "timeout": 120})
                except _NotWhole as problem:
                    error = str(problem)
                else:
                    if whole.exit_code != 0:
                        shown = whole.output.strip()
                        error = "is_directory" if shown == "is_directory" else "permission_denied"
                answers.append(protocol.FileUploadResponse(path=path, error=error))
            return answers

        def download_files(self, paths: list[str]) -> list[Any]:
            answers = []
            for path in paths:
                if not isinstance(path, str) or not path.startswith("/"):
                    answers.append(
                        protocol.FileDownloadResponse(path=path, content=None, error="invalid_path")
                    )
                    continue
                quoted = shlex.quote(path)
                command = (
                    f"if [ -d {quoted} ]; then echo is_directory; exit 3; fi; "
                    f"if [ ! -e {quoted} ]; then echo file_not_found; exit 4; fi; "
                    f"base64 -w0 -- {quoted}"
                )
                try:
                    whole = self._whole({"command": command, "timeout": 120})
                except _NotWhole as problem:
                    answers.append(
                        protocol.FileDownloadResponse(path=path, content=None, error=str(problem))
                    )
                    continue
                answers.append(_downloaded(protocol, path, whole))
            return answers

    _classes.append(Sandbox)
    return Sandbox


_classes: list[type[Any]] = []


def _downloaded(protocol: Any, path: str, whole: Any) -> Any:
    """The ``FileDownloadResponse`` for the whole output of a download."""
    shown = whole.output.strip()
    if whole.exit_code == 0:
        try:
            content = base64.b64decode(shown, validate=True)
        except ValueError:
            content = None
        if content is not None:
            return protocol.FileDownloadResponse(path=path, content=content, error=None)
    error = shown if shown in ("is_directory", "file_not_found") else "permission_denied"
    return protocol.FileDownloadResponse(path=path, content=None, error=error)


RAN_BEFORE: Final = (
    "\n[sandrail: this tool call had run already; this is that run's output again, "
    "and nothing ran anew]"
)
"""The line an ``execute`` output ends with when its call reconciled with an
earlier launch (``deduplicated``): Deep Agents' ``ExecuteResponse`` has no
field to say so, and the output alone reads like a fresh run."""


def _response(protocol: Any, result: ToolResult) -> Any:
    """Deep Agents' ``ExecuteResponse`` for ``result`` (see the module doc)."""
    if result.status == "ok" and result.exit_code is not None:
        output = (result.stdout or "") + (result.stderr or "")
        if result.deduplicated:
            output += RAN_BEFORE
        return protocol.ExecuteResponse(
            output=output, exit_code=result.exit_code, truncated=result.truncated
        )
    return protocol.ExecuteResponse(output=result.to_json(), exit_code=None, truncated=False)
