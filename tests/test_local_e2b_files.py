"""local-e2b's file API behaves as E2B's envd: entries of links
and permissions as envd reports them, file metadata, signed file URLs with
expiry, and directory watches (recursive, with entry info).

Driven by the unmodified e2b SDK (signed URLs by plain HTTP, as a browser
would use them); one server and one sandbox for the module, each test in a
directory of its own.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator

import e2b
import httpx
import pytest
from e2b import FilesystemEventType as Kind

from sandrail.local_e2b import LocalE2B, serve
from sandrail.local_e2b._fsview import go_permissions

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="these tests assume real root (as CI)")


@pytest.fixture(scope="module")
def server() -> Iterator[LocalE2B]:
    with serve(keepalive_seconds=0.2) as running:
        yield running


# -- links and permissions as envd reports them -----------------------------


def test_a_link_reports_its_targets_type_and_resolved_path(
    sandbox: e2b.Sandbox, folder: str
) -> None:
    sandbox.files.write(f"{folder}/real.txt", "x")
    sandbox.commands.run(
        "mkdir sub && ln -s ../real.txt sub/rel && ln -s sub hop && ln -s hop/rel chained "
        "&& ln -s nowhere dangling && ln -s sub dirlink",
        cwd=folder,
    )
    chained = sandbox.files.get_info(f"{folder}/chained")
    assert (chained.type, chained.symlink_target) == (e2b.FileType.FILE, f"{folder}/real.txt")
    assert chained.permissions.startswith("L")  # the link's own mode, as Go prints it
    assert chained.mode == 0o644  # the target's bits
    dangling = sandbox.files.get_info(f"{folder}/dangling")
    assert dangling.symlink_target == f"{folder}/dangling"  # unresolvable: itself
    assert (dangling.type, dangling.mode) == (None, 0)
    listed = {entry.name: entry for entry in sandbox.files.list(folder)}
    assert listed["dirlink"].type == e2b.FileType.DIR
    assert listed["dirlink"].symlink_target == f"{folder}/sub"
    assert listed["real.txt"].symlink_target is None
    through = sandbox.files.list(f"{folder}/dirlink")  # a link to list through
    assert [(e.name, e.path) for e in through] == [("rel", f"{folder}/dirlink/rel")]


def test_a_link_loop_is_refused_not_followed_forever(sandbox: e2b.Sandbox, folder: str) -> None:
    sandbox.commands.run("ln -s b a && ln -s a b", cwd=folder)
    assert sandbox.files.get_info(f"{folder}/a").symlink_target == f"{folder}/a"
    with pytest.raises(e2b.SandboxException):
        sandbox.files.list(f"{folder}/a")


def test_permissions_read_as_go_prints_them(sandbox: e2b.Sandbox) -> None:
    assert sandbox.files.get_info("/tmp").permissions == "dtrwxrwxrwx"
    assert sandbox.files.get_info("/tmp").mode == 0o777
    assert sandbox.files.get_info("/dev/null").permissions == "Dcrw-rw-rw-"
    assert go_permissions(0o104755) == "urwxr-xr-x"
    assert go_permissions(0o100644) == "-rw-r--r--"


# -- file metadata ---------------------------------------------------------


def test_metadata_is_kept_listed_renamed_and_replaced(sandbox: e2b.Sandbox, folder: str) -> None:
    written = sandbox.files.write(f"{folder}/a.txt", "one", metadata={"Author": "ann"})
    assert written.metadata == {"author": "ann"}  # keys lowercased, as envd
    assert sandbox.files.get_info(f"{folder}/a.txt").metadata == {"author": "ann"}
    raw = sandbox.files.write(f"{folder}/b.txt", "two", metadata={"k": "v"}, use_octet_stream=True)
    assert raw.metadata == {"k": "v"}
    many = sandbox.files.write_files(
        [{"path": f"{folder}/c.txt", "data": "3"}, {"path": f"{folder}/d.txt", "data": "4"}],
        metadata={"batch": "1"},
    )
    assert [info.metadata for info in many] == [{"batch": "1"}, {"batch": "1"}]
    listed = {entry.name: entry.metadata for entry in sandbox.files.list(folder)}
    assert listed == {
        "a.txt": {"author": "ann"},
        "b.txt": {"k": "v"},
        "c.txt": {"batch": "1"},
        "d.txt": {"batch": "1"},
    }
    moved = sandbox.files.rename(f"{folder}/a.txt", f"{folder}/moved.txt")
    assert moved.metadata == {"author": "ann"}
    replaced = sandbox.files.write(f"{folder}/moved.txt", "new", metadata={"other": "x"})
    assert replaced.metadata == {"other": "x"}
    cleared = sandbox.files.write(f"{folder}/moved.txt", "plain")
    assert cleared.metadata is None
    assert sandbox.files.get_info(f"{folder}/moved.txt").metadata is None


def test_xattrs_set_inside_the_sandbox_show_as_metadata(sandbox: e2b.Sandbox, folder: str) -> None:
    sandbox.files.write(f"{folder}/x.txt", "x")
    script = (
        f"import os; p = '{folder}/x.txt'; os.setxattr(p, 'user.e2b.by', b'cmd'); "
        "os.setxattr(p, 'user.other', b'hidden'); os.setxattr(p, 'user.e2b.bin', b'\\xff')"
    )
    sandbox.commands.run(f'python3 -c "{script}"')
    # Only the e2b namespace, and only UTF-8: as envd.
    assert sandbox.files.get_info(f"{folder}/x.txt").metadata == {"by": "cmd"}


@pytest.mark.parametrize(
    "metadata",
    [{"bad key": "v"}, {"": "v"}, {"k": "line\nbreak"}, {"k": "é"}, {"k": "v" * 5000}],
)
def test_bad_metadata_is_refused_and_nothing_is_written(
    server: LocalE2B, sandbox: e2b.Sandbox, folder: str, metadata: dict[str, str]
) -> None:
    """The SDK checks most of these itself; the server checks them all,
    sent raw (a header value with a line break cannot be sent at all)."""
    with pytest.raises(e2b.InvalidArgumentException):
        sandbox.files.write(f"{folder}/refused.txt", "x", metadata=metadata)
    assert not sandbox.files.exists(f"{folder}/refused.txt")
    if "\n" in next(iter(metadata.values())) or " " in next(iter(metadata)):
        return
    token = sandbox.connection_config.sandbox_headers["X-Access-Token"]
    headers = {
        "E2b-Sandbox-Id": sandbox.sandbox_id,
        "X-Access-Token": token,
        "Content-Type": "application/octet-stream",
        **{f"X-Metadata-{key}": value for key, value in metadata.items()},
    }
    answer = httpx.post(
        f"{server.sandbox_url}/files",
        params={"path": f"{folder}/refused.txt"},
        headers={k: v.encode() if k.startswith("X-Metadata") else v for k, v in headers.items()},
        content=b"x",
    )
    if not next(iter(metadata)):  # an empty key is no metadata at all, as envd
        assert answer.status_code == 200
        return
    assert answer.status_code == 400
    assert answer.json()["message"].startswith("invalid metadata: ")
    assert not sandbox.files.exists(f"{folder}/refused.txt")


# -- signed file URLs --------------------------------------------------------


def test_signed_urls_work_without_the_token_until_they_expire(
    sandbox: e2b.Sandbox, folder: str
) -> None:
    sandbox.files.write(f"{folder}/s.txt", "secret")
    plain = httpx.get(sandbox.download_url(f"{folder}/s.txt", "user"))
    assert (plain.status_code, plain.text) == (200, "secret")
    timed = httpx.get(sandbox.download_url(f"{folder}/s.txt", "user", 60))
    assert (timed.status_code, timed.text) == (200, "secret")
    upload = sandbox.upload_url(f"{folder}/up.txt", "user", 60)
    posted = httpx.post(upload, files={"file": ("up.txt", b"uploaded")})
    assert posted.status_code == 200
    assert sandbox.files.read(f"{folder}/up.txt") == "uploaded"
    expired = httpx.get(sandbox.download_url(f"{folder}/s.txt", "user", -120))
    assert (expired.status_code, expired.json()) == (
        401,
        {"code": 401, "message": "signature is already expired"},
    )


def test_a_signature_is_for_one_path_one_operation_one_sandbox(
    server: LocalE2B, sandbox: e2b.Sandbox, folder: str
) -> None:
    sandbox.files.write(f"{folder}/s.txt", "secret")
    signed = sandbox.download_url(f"{folder}/s.txt", "user")
    other_path = signed.replace("s.txt", "t.txt")
    assert httpx.get(other_path).json()["message"] == "invalid signature"
    as_write = httpx.post(signed, files={"file": ("s.txt", b"overwritten")})
    assert as_write.status_code == 401
    assert sandbox.files.read(f"{folder}/s.txt") == "secret"
    unsigned = httpx.get(f"{server.sandbox_url}/files", params={"path": f"{folder}/s.txt"})
    assert unsigned.status_code == 502  # no signature, no sandbox header: no sandbox
    headers = {"E2b-Sandbox-Id": sandbox.sandbox_id}
    missing = httpx.get(signed.split("&signature")[0], headers=headers)
    assert missing.json()["message"] == "missing signature query parameter"
    wrong_token = httpx.get(signed, headers={**headers, "X-Access-Token": "nope"})
    assert wrong_token.json()["message"] == "access token present in header but does not match"
    other = e2b.Sandbox.create(**server.sdk_options)
    try:
        crossed = httpx.get(signed, headers={"E2b-Sandbox-Id": other.sandbox_id})
        assert crossed.status_code == 401  # signed by another sandbox's token
    finally:
        other.kill()
    assert httpx.get(signed).status_code == 200


# -- directory watches -------------------------------------------------------


def test_a_watch_sees_envds_events_in_envds_order(sandbox: e2b.Sandbox, folder: str) -> None:
    handle = sandbox.files.watch_dir(folder)
    sandbox.files.write(f"{folder}/w.txt", "first")
    assert [(e.type, e.name) for e in handle.get_new_events()] == [
        (Kind.CREATE, "w.txt"),
        (Kind.CHMOD, "w.txt"),
        (Kind.WRITE, "w.txt"),
    ]
    sandbox.files.write(f"{folder}/w.txt", "second")
    assert [e.type for e in handle.get_new_events()] == [Kind.CHMOD, Kind.WRITE]
    sandbox.files.rename(f"{folder}/w.txt", f"{folder}/v.txt")
    sandbox.files.remove(f"{folder}/v.txt")
    assert [(e.type, e.name) for e in handle.get_new_events()] == [
        (Kind.RENAME, "w.txt"),
        (Kind.CREATE, "v.txt"),
        (Kind.REMOVE, "v.txt"),
    ]
    assert handle.get_new_events() == []
    handle.stop()
    with pytest.raises(e2b.SandboxException):
        handle.get_new_events()  # removed: the watcher is not found any more


def test_a_recursive_watch_follows_new_directories_with_entry_info(
    sandbox: e2b.Sandbox, folder: str
) -> None:
    sandbox.files.make_dir(f"{folder}/old/deeper")
    handle = sandbox.files.watch_dir(folder, recursive=True, include_entry=True)
    sandbox.files.write(f"{folder}/old/deeper/a.txt", "a")
    sandbox.files.make_dir(f"{folder}/new")
    sandbox.files.write(f"{folder}/new/b.txt", "b")
    events = handle.get_new_events()
    seen = [(e.type, e.name) for e in events]
    assert seen[:3] == [
        (Kind.CREATE, "old/deeper/a.txt"),
        (Kind.CHMOD, "old/deeper/a.txt"),
        (Kind.WRITE, "old/deeper/a.txt"),
    ]
    assert (Kind.CREATE, "new") in seen
    assert (Kind.WRITE, "new/b.txt") in seen
    write = next(e for e in events if e.name == "new/b.txt" and e.type == Kind.WRITE)
    assert write.entry is not None
    assert (write.entry.path, write.entry.type, write.entry.size) == (
        f"{folder}/new/b.txt",
        e2b.FileType.FILE,
        1,
    )
    flat = sandbox.files.watch_dir(folder)  # not recursive: nothing from below
    sandbox.files.write(f"{folder}/new/c.txt", "c")
    assert flat.get_new_events() == []
    flat.stop()
    handle.stop()


def test_what_cannot_be_watched_is_refused(sandbox: e2b.Sandbox, folder: str) -> None:
    with pytest.raises(e2b.FileNotFoundException):
        sandbox.files.watch_dir(f"{folder}/absent")
    sandbox.files.write(f"{folder}/f.txt", "x")
    with pytest.raises(e2b.InvalidArgumentException):
        sandbox.files.watch_dir(f"{folder}/f.txt")


def test_a_watch_stream_carries_events_and_ends_with_its_sandbox(
    server: LocalE2B,
) -> None:
    async def run() -> tuple[list[tuple[str, str]], BaseException | None]:
        box = await e2b.AsyncSandbox.create(**server.sdk_options)
        seen: list[tuple[str, str]] = []
        written = asyncio.Event()
        ended: list[BaseException | None] = []

        def on_event(event: e2b.FilesystemEvent) -> None:
            seen.append((event.type.value, event.name))
            if event.type == Kind.WRITE:
                written.set()

        handle = await box.files.watch_dir(
            "/tmp", on_event=on_event, on_exit=ended.append, timeout=30
        )
        await box.files.write("/tmp/streamed.txt", "x")
        await asyncio.wait_for(written.wait(), 10)
        await box.kill()
        for _ in range(500):
            if ended:
                break
            await asyncio.sleep(0.01)
        await handle.stop()
        return seen, ended[0] if ended else None

    seen, ended = asyncio.run(run())
    assert seen[:3] == [
        ("create", "streamed.txt"),
        ("chmod", "streamed.txt"),
        ("write", "streamed.txt"),
    ]
    assert ended is not None  # the stream ended, with an error, when the sandbox did


def test_a_watch_stream_ends_at_its_deadline(server: LocalE2B) -> None:
    """The client does not end a watch at its timeout; the server does."""

    async def run() -> None:
        box = await e2b.AsyncSandbox.create(**server.sdk_options)
        ended = asyncio.Event()
        handle = await box.files.watch_dir(
            "/tmp", on_event=lambda e: None, on_exit=lambda e: ended.set(), timeout=1
        )
        await asyncio.wait_for(ended.wait(), 20)
        await handle.stop()
        await box.kill()

    asyncio.run(run())
