"""The in-sandbox launcher: a bash script the E2B interpreter uploads once per
sandbox (DESIGN §5).

Strategy: the sandbox itself is the ledger. Every task lives in
``$ROOT/tasks/<task_id>/``; the launcher claims it with an atomic ``mkdir``
under a sandbox-wide ``flock``, so two starts of one task id (a retry, a late
duplicate, a restarted harness) launch once (C2). The claim keeps the request
digest (C3); the fence is compared, under the same lock, with the highest
fence seen in the sandbox (C10). A detached supervisor (its own session, so
it outlives the ``commands.run`` that started it and the harness) runs the
command in a fresh process group under an in-sandbox deadline, sends stdout
and stderr to files and writes the exit status atomically (write, then
``mv``). Environment values reach the command through a 0600 file that the
supervising shell reads and deletes before anything else (C17); they never
travel in ``envs`` or argv, and staged requests whose start never came are
deleted by any start ten minutes later. Stop and the deadline end the
command's process group, its session (a process that moved to a group of
its own stays in the session) and its leader.

The only values sandrail puts into shell text are the validated task id
(64 hex), a nonce and integers; the launcher validates them again. Command,
cwd, digest, fence, timeout and env travel as files in a staged request
directory ``$ROOT/inbox/<task_id>.<nonce>/`` written through the files API.

``ROOT`` is derived from the launcher's own path (``$ROOT/bin/<name>``), so
the script never names an absolute path itself.

Protocol (every answer is ASCII; ``code`` is ``-`` when unknown)::

    start <task> <nonce>              -> "started 1|0" + state | "refused <reason>"
                                         (conflict, stale_fence, claim_lost)
    wait <task> <millis> <max>        -> read of cursors 0 0 once ended or timed out
                                         (blocks on the supervisor's lock: no polling)
    read <task> <out> <err> <max>     -> state, "out <b64>", "err <b64>", "size <o> <e>"
    cancel <task>                     -> state after TERM (then KILL) of the group
    publish <task> <nonce> <ext>      -> "published" | "refused publish_conflict"
    init                              -> "ready" (moves itself into place, chmods)
    state line: "state <status> <code> <stdout_bytes> <stderr_bytes>"

Exit status 3 with ``sandrail-error <what>`` means the launcher refused its
arguments before touching any task.
"""

from __future__ import annotations

import hashlib
from typing import Final

__all__ = ["CANCELED_EXIT_CODE", "LAUNCHER", "LAUNCHER_NAME", "TIMED_OUT_EXIT_CODE"]

TIMED_OUT_EXIT_CODE: Final = 124
CANCELED_EXIT_CODE: Final = 143

LAUNCHER: Final = r"""#!/bin/bash
# sandrail launcher (see sandrail/interpreters/_e2b_launcher.py). The whole
# script is one compound command ended by `exit`, so bash parses it entirely
# before running it and a concurrent reinstall can never be half-read.
{
set -u
umask 077
ROOT=${0%/bin/*}
TASKS=$ROOT/tasks
INBOX=$ROOT/inbox

fail() { printf 'sandrail-error %s\n' "$1"; exit 3; }
need_task() { [[ $1 =~ ^[0-9a-f]{64}$ ]] || fail bad-task-id; }
need_int() { [[ $1 =~ ^[0-9]{1,18}$ ]] || fail bad-integer; }

lock() { exec 9>>"$ROOT/lock"; flock 9; }
unlock() { flock -u 9; exec 9>&-; }

size_of() { if [ -f "$1" ]; then stat -c %s -- "$1"; else echo 0; fi; }

forget_stale() { # staged requests whose start never came (they may hold env
  # values: C17); young ones may belong to a start still on its way
  find "$INBOX" -mindepth 1 -maxdepth 1 -mmin +10 -exec rm -rf -- {} + 2>/dev/null
  return 0
}

end_all() { # <signal> <leader pid>: its process group, its session (processes
  # that moved to a group of their own stay in it), and the leader itself
  # (before it has made its own group, a group kill finds nothing)
  kill "-$1" -- "-$2" 2>/dev/null
  pkill "-$1" -s "$2" 2>/dev/null
  kill "-$1" -- "$2" 2>/dev/null
  return 0
}

status_of() { # prints "<status> <code>"
  local dir=$TASKS/$1 status code pid
  if [ ! -d "$dir" ]; then echo "unknown -"; return; fi
  if [ -f "$dir/exit" ]; then read -r status code < "$dir/exit"; echo "$status $code"; return; fi
  if [ ! -f "$dir/supervisor" ]; then echo "running -"; return; fi
  pid=$(<"$dir/supervisor")
  if [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null; then echo "running -"; return; fi
  if [ -f "$dir/exit" ]; then read -r status code < "$dir/exit"; echo "$status $code"; return; fi
  echo "unknown -"
}

state() {
  local dir=$TASKS/$1
  printf 'state %s %s %s\n' "$(status_of "$1")" \
    "$(size_of "$dir/stdout")" "$(size_of "$dir/stderr")"
}

chunk() { # <file> <cursor> <max>: base64 of max+4 bytes from the cursor (the
  # harness backs the text off to a UTF-8 boundary, so it needs the next bytes)
  if [ -f "$1" ]; then
    tail -c "+$(( $2 + 1 ))" -- "$1" | head -c "$(( $3 + 4 ))" | base64 -w0
  fi
}

do_read() { # <task> <out> <err> <max>
  local dir=$TASKS/$1
  state "$1"
  printf 'out %s\n' "$(chunk "$dir/stdout" "$2" "$4")"
  printf 'err %s\n' "$(chunk "$dir/stderr" "$3" "$4")"
  printf 'size %s %s\n' "$(size_of "$dir/stdout")" "$(size_of "$dir/stderr")"
}

do_start() { # <task> <nonce>
  local task=$1 req=$INBOX/$1.$2 dir=$TASKS/$1 fence highest theirs ours
  [ -d "$req" ] || fail no-request
  mkdir -p -- "$TASKS"
  lock
  if [ -s "$req/fence" ]; then
    fence=$(<"$req/fence")
    [[ $fence =~ ^[0-9]{1,18}$ ]] || { rm -rf -- "$req"; fail bad-fence; }
    highest=$(cat -- "$ROOT/fence" 2>/dev/null || true)
    if [[ $highest =~ ^[0-9]{1,18}$ ]] && (( fence < highest )); then
      rm -rf -- "$req"; forget_stale; echo "refused stale_fence"; return
    fi
    printf '%s\n' "$fence" > "$ROOT/fence.tmp" && mv -f -- "$ROOT/fence.tmp" "$ROOT/fence"
  fi
  if [ ! -d "$dir" ] && [ -e "$req/expect" ]; then
    # The harness saw this task launched; no claim means the ledger was
    # lost, and launching now would launch twice.
    rm -rf -- "$req"; unlock; echo "refused claim_lost"; return
  fi
  if mkdir -- "$dir" 2>/dev/null; then
    for f in digest command timeout cwd env; do
      if [ -e "$req/$f" ]; then mv -- "$req/$f" "$dir/$f"; fi
    done
    rm -rf -- "$req"
    forget_stale
    if [ -f "$dir/env" ]; then chmod 600 -- "$dir/env"; fi
    : > "$dir/stdout"; : > "$dir/stderr"
    # The supervisor holds an exclusive lock on `alive` for its whole life
    # (it inherits fd 7 and no process of the command does), so a waiter
    # wakes the moment it exits: an event, not a poll.
    exec 7>"$dir/alive"; flock -x 7
    setsid bash "$0" supervise "$task" </dev/null >/dev/null 2>&1 9>&- &
    echo "$!" > "$dir/supervisor"
    exec 7>&-
    unlock
    echo "started 1"
  else
    theirs=$(cat -- "$dir/digest" 2>/dev/null || true)
    ours=$(cat -- "$req/digest")
    rm -rf -- "$req"
    forget_stale
    unlock
    if [ -z "$theirs" ] || [ "$theirs" != "$ours" ]; then echo "refused conflict"; return; fi
    echo "started 0"
  fi
  state "$task"
}

do_supervise() { # <task>; runs detached, as its own session leader
  local dir=$TASKS/$1 limit pid dog code status setsid_bin
  limit=$(<"$dir/timeout")
  [[ $limit =~ ^[0-9]{1,9}$ ]] || limit=1
  setsid_bin=$(command -v setsid)
  (
    # The env file is read and deleted before anything can fail, and the
    # tools this shell runs after exporting are named by absolute path: the
    # command's env (a PATH, say) cannot stop the file from being deleted.
    entries=()
    if [ -f "$dir/env" ]; then
      while IFS= read -r -d '' entry; do entries+=("$entry"); done < "$dir/env"
      rm -f -- "$dir/env"
    fi
    if [ -f "$dir/cwd" ]; then
      IFS= read -r -d '' cwd < "$dir/cwd" || true
      cd -- "$cwd" || exit 1
    fi
    if [ -e "$dir/canceled" ]; then exit 143; fi
    for entry in "${entries[@]}"; do export "$entry" 2>/dev/null; done
    exec "$setsid_bin" "$BASH" -- "$dir/command"
  ) </dev/null >"$dir/stdout" 2>"$dir/stderr" 7>&- &
  pid=$!
  echo "$pid" > "$dir/pgid"
  (
    exec 8<> <(:)
    read -r -t "$limit" -u 8 _ || true
    [ -e "$dir/canceled" ] || : > "$dir/deadline"
    end_all TERM "$pid"
    read -r -t 2 -u 8 _ || true
    end_all KILL "$pid"
  ) 7>&- &
  dog=$!
  if [ -e "$dir/canceled" ]; then end_all TERM "$pid"; fi
  wait "$pid"; code=$?
  kill -- "$dog" 2>/dev/null
  end_all KILL "$pid"
  if [ -e "$dir/canceled" ]; then status=canceled; code=143
  elif [ -e "$dir/deadline" ]; then status=timed_out; code=124
  else status=exited
  fi
  printf '%s %s\n' "$status" "$code" > "$dir/exit.tmp" && mv -f -- "$dir/exit.tmp" "$dir/exit"
}

do_wait() { # <task> <millis> <max>
  local dir=$TASKS/$1 rounds=$(( $2 / 50 ))
  if [ -f "$dir/alive" ]; then
    # Wakes when the supervisor exits (it writes `exit` first) or at the time.
    flock -s -w "$(( $2 / 1000 )).$(printf '%03d' $(( $2 % 1000 )))" "$dir/alive" true \
      2>/dev/null
  elif [ -d "$dir" ]; then
    # A task started by an older launcher: no lock to wait on.
    exec 8<> <(:)
    while [ ! -f "$dir/exit" ] && (( rounds-- > 0 )); do
      case $(status_of "$1") in running*) ;; *) break ;; esac
      read -r -t 0.05 -u 8 _ || true
    done
  fi
  do_read "$1" 0 0 "$3"
}

do_cancel() { # <task>
  local dir=$TASKS/$1 pg rounds
  if [ -d "$dir" ] && [ ! -f "$dir/exit" ]; then
    [ -e "$dir/deadline" ] || : > "$dir/canceled"
    pg=$(cat -- "$dir/pgid" 2>/dev/null || true)
    if [[ $pg =~ ^[0-9]+$ ]]; then
      exec 8<> <(:)
      end_all TERM "$pg"
      rounds=40
      while [ ! -f "$dir/exit" ] && (( rounds-- > 0 )); do read -r -t 0.05 -u 8 _ || true; done
      end_all KILL "$pg"
      rounds=40
      while [ ! -f "$dir/exit" ] && (( rounds-- > 0 )); do read -r -t 0.05 -u 8 _ || true; done
    fi
  fi
  state "$1"
}

do_publish() { # <task> <nonce> <ext>
  local staged=$INBOX/$1.$2 target=$ROOT/code/$1.$3
  [ -f "$staged/source" ] || fail no-request
  mkdir -p -- "$ROOT/code"
  lock
  if [ -e "$target" ]; then
    if cmp -s -- "$staged/source" "$target"; then echo published
    else echo "refused publish_conflict"; fi
  else
    chmod 600 -- "$staged/source" && mv -- "$staged/source" "$target" && echo published
  fi
  unlock
  rm -rf -- "$staged"
}

do_init() { # <final name>: move this freshly written copy into place
  [[ $1 =~ ^launcher-[0-9a-f]{16}\.sh$ ]] || fail bad-name
  mkdir -p -- "$ROOT/bin" "$TASKS" "$INBOX" "$ROOT/code"
  chmod 700 -- "$ROOT" "$ROOT/bin" "$TASKS" "$INBOX" "$ROOT/code"
  if [ "$0" != "$ROOT/bin/$1" ]; then mv -f -- "$0" "$ROOT/bin/$1"; fi
  echo ready
}

case ${1:-} in
  start) need_task "${2:-}"; need_int "${3:-}"; do_start "$2" "$3" ;;
  supervise) need_task "${2:-}"; do_supervise "$2" ;;
  wait) need_task "${2:-}"; need_int "${3:-}"; need_int "${4:-}"; do_wait "$2" "$3" "$4" ;;
  read) need_task "${2:-}"; need_int "${3:-}"; need_int "${4:-}"; need_int "${5:-}"
        do_read "$2" "$3" "$4" "$5" ;;
  cancel) need_task "${2:-}"; do_cancel "$2" ;;
  publish) need_task "${2:-}"; need_int "${3:-}"; [[ ${4:-} =~ ^[a-z]{1,8}$ ]] || fail bad-ext
           do_publish "$2" "$3" "$4" ;;
  init) do_init "${2:-}" ;;
  *) fail bad-subcommand ;;
esac
exit 0
}
"""

LAUNCHER_NAME: Final = "launcher-" + hashlib.sha256(LAUNCHER.encode()).hexdigest()[:16] + ".sh"
"""The launcher's file name in ``/tmp/sandrail/bin``: named by content, so two
versions never overwrite each other."""
