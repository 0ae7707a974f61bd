"""The in-sandbox launcher: a bash script a launcher backend (the E2B
interpreter, or any backend built on :mod:`sandrail.interpreters.launcher`)
uploads once per sandbox and runs as ``root``. The script is the file
``_launcher.sh`` beside this module (package data, checked by
``shellcheck`` in CI); this module loads it, names it by its content, and
documents what it does.

Strategy: the sandbox itself is the ledger, kept where the commands it runs
cannot reach. The launcher runs as ``root``; the model's command runs as the
sandbox's unprivileged ``user`` (as E2B's ``commands.run`` does by default),
so a command can neither read nor delete the ledger. What a sandbox needs
for it: ``bash``, ``flock``, ``setpriv`` and ``setsid``, a ``root`` that runs
the launcher and a ``user`` account (home ``/home/user``) that runs the
commands.

Where things live (``L`` is the ledger, ``/root/.sandrail``, mode 0700 in
root's own home, which ``init`` makes 0700 too: a ``user`` command cannot
even look inside; not under ``/tmp``, so no ``/tmp`` cleanup, symlink race
or squatted name can touch it). Requests are staged only after ``init`` has
made the ledger private::

    L/bin/launcher-<hash>.sh   this script (named by content)
    L/inbox/<task>.<nonce>/    a staged request, written by the files API as
                               root: digest, command, timeout, cwd, env,
                               fence, expect, epoch. Taken (renamed)
                               atomically by ``start`` or ``discard``, the
                               only two ways it ever leaves the inbox
    L/tasks/<task>/            the claim: digest, command, timeout, cwd,
                               stdout, stderr, exit ("<status> <code>",
                               then "<status> <code> <stdout bytes>
                               <stderr bytes>"), ... (all root, 0600)
    L/claims.<epoch>/<task>    the claim log of this ledger epoch: one empty
                               file per task ever claimed in it
    L/seal                     "<epoch> <count>": the epoch and how many
                               claims were logged in it (under the lock)
    L/void.<epoch>.<n>/        claim logs of voided epochs, kept: their
                               entries still say "claimed before"
    L/fence, L/lock, L/user    highest fence seen; the ledger lock; the
                               ``user`` uid, gid and the tools to drop to it
    /tmp/sandrail/code/        published snippets (the path the core names):
                               the directory root's, 0711; each snippet
                               root's with ``user``'s group, 0440, so the
                               command can run it and no command of
                               ``user`` can change it

**Staging** (C2, C3): a request is a directory of files, and the files API
deletes a directory file by file, through a descriptor that outlives a
rename. So the harness never deletes a staged request itself: when its
start fails, it asks the launcher to ``discard`` it, which takes it by the
same atomic rename ``start`` uses. Exactly one of them gets it, whole (a
start that had taken half-deleted request files could claim a task with no
digest, and every retry would read as a conflict).

**The claim** (C2): ``start`` takes its staged request with an atomic
rename, then, under the ledger lock: a task directory already there means a
retry (same keyed digest: ``started 0``; another: ``refused conflict``);
otherwise it builds the whole claim in the taken request's directory, logs
the task in the claim log, and renames the directory into place in one
step, then launches. Whatever ends the launcher (a deadline, a kill), a
claim is complete or absent, and a claim that may exist is logged.

**The epoch proof** (C2): the ledger's epoch is the random name of its
claim-log directory, and holds only while the ledger proves it is whole:
exactly one claim log, the seal naming it, and at least as many entries in
it as the seal counts (each claim logs its entry, then raises the count, in
place, under the lock). Any partial deletion (the claim log emptied, the
seal or any file deleted) breaks one of these and voids the epoch: under
the lock, the launcher renames the claim log ``void.*`` and makes a new
epoch, which never comes back. So a retry whose claim was deleted carries
an epoch the ledger no longer has and is ``claim_lost``, never a second
launch; a claim whose digest was deleted is ``claim_lost`` too, never a
``conflict``. The honest limit: root in the sandbox (a template whose
``user`` has sudo) can still forge a whole, consistent ledger (a claim log
of the right name, a seal that counts it); sandrail defends against
deletion, not against forgery by root. Every answer reports it (``init``, and an ``epoch`` line in
``start``, ``wait``, ``read`` and ``cancel`` answers; a lost claim log is
made again when an answer is given), and the harness's ``Ensure`` reports
the epoch it last heard. The core records that epoch, before the task's
first start may leave, in the durable ownership record, and every start
carries it (``epoch``, with ``expect`` when a start may already have left).
A start that finds no claim of its task launches only if the claim log has
no entry for the task and: with an epoch, that epoch is the current one
(any claim made since it was current would still be there); without one,
no start is expected to have left. Otherwise it answers ``refused
claim_lost``: a retry whose claim was lost, and a late copy of a first
start that arrives after the ledger was lost, launch nothing. A task
directory gone while its claim-log entry stays is ``claim_lost`` for any
start. Where ``user`` is root (no user separation: local-e2b's userns
mode), commands could reach the ledger, so no proof is accepted for a start
that expects its claim: a missing expected claim is always ``claim_lost``.

**Digests** (C3, C17): the request digest arrives keyed (an HMAC under a key
the sandbox never sees), so even a command that could read it could not
test guesses of the env values it covers.

**Env values** (C17) travel only in the staged request's ``env`` file (root
only); the supervising shell, still root, opens and deletes it before
anything can fail and hands the open file to the command's first shell,
which exports the values only after the drop to ``user``: no root process
runs with them (a ``LD_PRELOAD`` given by a caller that skipped the core's
name rule reaches only ``user``'s programs).

**Running the command**: a detached supervisor (its own session, as root)
runs it in a fresh session and process group, dropped to ``user`` with
``setpriv`` (uid, gid, supplementary groups; ``HOME=/home/user``, ``USER``,
``LOGNAME``), in its cwd (default ``/home/user``; changed to as ``user``),
as ``bash -l -c COMMAND`` like E2B's ``commands.run`` (a command too long
for one argument is read from a descriptor and ``eval``-ed instead), under
an in-sandbox deadline. stdout and stderr go to root-owned files the
command writes only through the descriptors it was given. The supervisor
holds an exclusive lock on ``alive`` for its life; ``wait`` blocks on it
(an event, not a poll). On the command's exit it kills the command's
process group, writes ``exit`` in one write, releases ``alive``, then kills
what is left of the session. Stop and the deadline end the group, the
session and the leader.

**Answers** are well-formed whatever a command does: nothing the launcher
reads to answer is reachable by ``user``, every field is read once
(no check-then-use) and validated, and an unreadable field has a fixed
fallback (a size of 0, a status of ``unknown``/``running``).

**Output that is gone** (C6, C7): a claim is put in place with its
``stdout`` and ``stderr`` already made (the rename moves them with it), so
a fresh task is never seen without them; after that only root can delete
them. Once the command and what was left of its session are gone, the
supervisor adds both sizes to the exit record (a moment after writing it:
off the path from the command's end to its waiter), so a stream found
shorter was cut since. A claim missing either file, or with one shorter
than its exit record says, has the state ``unknown`` (code ``-``, sizes 0,
no bytes) in every answer: what the command printed is not known, so the
core never answers ``ok`` with empty or partial output. A record without
sizes (not yet, or an earlier launcher's) is read as before. What this
cannot see: root deleting a file in the moment between an answer's size
lookup and its read of the bytes (that one answer comes back with fewer
bytes than its sizes, so a read says there is more; the next answer is
``unknown``), and a cut made before the sizes are recorded (while the
command runs, or in the ~50 ms after it ends).

The only values sandrail puts into shell text are the validated task id
(64 hex), a nonce and integers; the launcher validates them again.

**A command that cannot begin** (C7: ``ok`` means the command began): the
wrapper that drops to ``user`` reports on a pipe root made, just before it
execs the command, ``began``; or, instead of running it, why it cannot:
``cwd`` (missing, not a directory, or not enterable by ``user``) or
``e2big`` (Linux would refuse the exec as too big: probed with ``/bin/true``
and the very same argument and environment, only when they are over 16,384
characters). The supervisor keeps that report as the claim's ``verdict``.
For a request that may not begin (``check``: the harness stages it with a
cwd, or when the argument and env are over 16 KiB; the launcher adds it for
the default cwd unless ``user`` can surely enter its home: a directory
``user`` owns with its owner's search bit, one ``stat``, as a command of
``user`` may have run ``chmod 000 ~``) the start holds the
verdict's lock for the supervisor and answers only once the verdict is
there (at most 5 s, else as before): ``refused not_started <why>``, on the
first start and on every retry of the same request (the claim is consumed:
nothing launches later). Other starts answer at once; should such a
command still not begin (its home changed in between), every answer about
it has the state ``unknown`` (never the wrapper's exit code), and every
retry is ``refused not_started``. None of the wrapper's messages reaches
the command's output. A concurrent command of ``user`` cannot forge a
report (it cannot open a root pipe again); one that ptraces the wrapper
could.

**Snippets** (C16): ``publish`` puts the source in
place once; the same source again is ``published``, other source
``refused publish_conflict``. Once the task is claimed, ``publish`` is
``published`` whatever the file holds (root, or a ``user`` that is root,
may have changed it): the start then answers from the claim, whose digest
covers the source, so a retry of a launched snippet is never a false
conflict.

Protocol (every answer is ASCII; ``code`` is ``-`` when unknown)::

    init <name>                       -> "ready <epoch> <separated 0|1>"
    start <task> <nonce>              -> "started 1|0" | "refused <reason>"
                                         (conflict, stale_fence, claim_lost,
                                         "not_started cwd|e2big"),
                                         then "epoch <epoch>", then (started)
                                         a state line
    wait <task> <millis> <limit>      -> a read of cursors 0 0 once ended or
                                         timed out: both streams whole if
                                         together at most <limit> bytes, else
                                         none (only sizes)
    read <task> <out> <err> <max>     -> state, out, err, "size <o> <e>",
                                         "epoch <epoch>"; a stream's bytes
                                         are "out <b64>", or, when plain
                                         ASCII, "out:text <n>", newline, its
                                         n bytes, newline
    cancel <task>                     -> state after TERM (then KILL) of the
                                         group, then "epoch <epoch>"
    publish <task> <nonce> <ext>      -> "published" | "refused publish_conflict"
                                         (a claimed task: "published")
    discard <task> <nonce>            -> "discarded" (the staged request is
                                         gone, or was taken by its start)
    state line: "state <status> <code> <stdout_bytes> <stderr_bytes>"
    <epoch>: 32 hex, or "-" (no proof could be made)

Exit status 3 with ``sandrail-error <what>`` means the launcher refused its
arguments (or could not take its request) before touching any claim.
"""

from __future__ import annotations

import hashlib
from importlib import resources
from typing import Final

__all__ = [
    "CANCELED_EXIT_CODE",
    "LAUNCHER",
    "LAUNCHER_NAME",
    "LEDGER",
    "TIMED_OUT_EXIT_CODE",
]

TIMED_OUT_EXIT_CODE: Final = 124
CANCELED_EXIT_CODE: Final = 143
LEDGER: Final = "/root/.sandrail"
"""Where the launcher keeps its ledger in every sandbox (root only)."""

LAUNCHER: Final = (
    resources.files("sandrail.interpreters").joinpath("_launcher.sh").read_bytes().decode()
)
"""The launcher script (``_launcher.sh``, shipped beside this module as
package data; ``shellcheck`` checks it in CI)."""

LAUNCHER_NAME: Final = "launcher-" + hashlib.sha256(LAUNCHER.encode()).hexdigest()[:16] + ".sh"
"""The launcher's file name in ``/root/.sandrail/bin``: named by content, so
two versions never overwrite each other."""
