#!/bin/bash
# sandrail launcher (see sandrail/interpreters/_launcher_script.py). The whole
# script is one compound command ended by `exit`, so bash parses it entirely
# before running it and a concurrent reinstall can never be half-read.
{
set -u
umask 077
# Where things live: the ledger is where this script is (L/bin/<name>);
# the two other places are named once, here.
LEDGER=${0%/bin/*}
TASKS=$LEDGER/tasks
INBOX=$LEDGER/inbox
SHARED=/tmp/sandrail
USER_HOME=/home/user
CODE=$SHARED/code
EPOCH=-
CLAIMS=
SEALED=
VERDICT=
FAST=16384  # a stream this short is answered as text, with no process

fail() { printf 'sandrail-error %s\n' "$1"; exit 3; }
need_task() { [[ $1 =~ ^[0-9a-f]{64}$ ]] || fail bad-task-id; }
need_int() { [[ $1 =~ ^[0-9]{1,18}$ ]] || fail bad-integer; }

lock() { exec 9>>"$LEDGER/lock" && flock 9; }
unlock() { flock -u 9; exec 9>&-; }

first_line() { # <file> <variable>: the file's first line, or "" (one read, no check first)
  local line=
  IFS= read -r line 2>/dev/null < "$1"
  printf -v "$2" '%s' "$line"
}

epoch() { # EPOCH, CLAIMS and SEALED of the ledger as it is (builtins only;
  # no change). Fails, with EPOCH "-", unless the ledger proves its epoch:
  # exactly one claim log (and nothing else named claims.*), the seal naming
  # it, and at least as many entries in it as the seal counts. Any partial
  # deletion of the ledger breaks one of these, and so voids the epoch.
  local dir found=() sealed='' count='' entries
  for dir in "$LEDGER"/claims.*; do
    [ -e "$dir" ] || [ -L "$dir" ] || continue
    [[ -d $dir && ! -L $dir && ${dir##*/claims.} =~ ^[0-9a-f]{32}$ ]] || found+=(bad)
    found+=("$dir")
  done
  CLAIMS='' EPOCH=- SEALED=''
  (( ${#found[@]} == 1 )) || return 1
  read -r sealed count 2>/dev/null < "$LEDGER/seal" || return 1
  [[ $sealed == "${found[0]##*/claims.}" && $count =~ ^[0-9]{1,18}$ ]] || return 1
  entries=("${found[0]}"/*)
  [ -e "${entries[0]}" ] || entries=()
  (( ${#entries[@]} >= count )) || return 1
  CLAIMS=${found[0]} EPOCH=$sealed SEALED=$count
}

new_epoch() { # under the lock: EPOCH, CLAIMS and SEALED; a ledger that cannot
  # prove its epoch gets a new one (its claim logs kept, renamed void.*, so
  # their entries still say "claimed before")
  local dir
  epoch && return 0
  for dir in "$LEDGER"/claims.*; do
    [ -e "$dir" ] || [ -L "$dir" ] || continue
    mv -T -- "$dir" "$LEDGER/void.${dir##*/claims.}.$$.$RANDOM" 2>/dev/null || rm -rf -- "$dir"
  done
  EPOCH=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
  [[ $EPOCH =~ ^[0-9a-f]{32}$ ]] || fail no-randomness
  mkdir -m 700 -- "$LEDGER/claims.$EPOCH" || fail no-ledger
  # The seal is written in place: a reader that sees it half-written finds
  # no proof and asks again under the lock (a seal lost to a kill only
  # voids the epoch again: never a second launch).
  printf '%s 0\n' "$EPOCH" > "$LEDGER/seal" || fail no-ledger
  CLAIMS=$LEDGER/claims.$EPOCH SEALED=0
}

print_epoch() { # the "epoch" line every answer ends with (a lost claim log is
  # made again here, so the harness learns the ledger's new epoch at once)
  if ! epoch; then lock; new_epoch; unlock; fi
  printf 'epoch %s\n' "$EPOCH"
}

claimed_before() { # <task>: in any claim log of this ledger, voided ones too
  local dir
  for dir in "$LEDGER"/claims.* "$LEDGER"/void.*; do [ -e "$dir/$1" ] && return 0; done
  return 1
}

never_claimed() { # <task> <claim epoch> <expect file>: whether this ledger,
  # holding no claim of the task, can prove it never held one (the epoch
  # proof, see the module doc)
  claimed_before "$1" && return 1
  if [ -n "$2" ]; then
    # Where `user` is root, a command could have deleted a claim and its
    # log entry: no proof for a start that expects its claim.
    [ "$EPOCH" != - ] && [ "$2" = "$EPOCH" ] && { [ ! -e "$3" ] || separated; }
    return
  fi
  [ ! -e "$3" ]
}

enterable_home() { # whether `user` can surely enter its home, the default
  # cwd (one process: stat). For its owner a directory's owner bits decide,
  # whatever else its ACL says; anything else (another owner, no such
  # directory, an unreadable answer) is not sure.
  local uid stats
  read -r uid _ 2>/dev/null < "$LEDGER/user" || return 1
  [ -d "$USER_HOME" ] || return 1
  [ "$uid" = 0 ] && return 0
  stats=$(stat -L -c '%u %a' -- "$USER_HOME" 2>/dev/null) || return 1
  [[ $stats =~ ^([0-9]+)\ ([0-7]{1,4})$ ]] && [ "${BASH_REMATCH[1]}" = "$uid" ] &&
    (( 8#${BASH_REMATCH[2]} & 8#100 ))
}

separated() { # whether `user` is another uid than root (read from L/user)
  local uid gid rest
  read -r uid gid rest 2>/dev/null < "$LEDGER/user" || return 1
  [[ $uid =~ ^[1-9][0-9]*$ ]]
}

forget_stale() { # requests whose start never came or never finished taking
  # them: each taken first by a rename (as `start` and `discard` take one)
  local entry name
  while IFS= read -r -d '' entry; do
    name=${entry##*/}
    if [[ $name == .swept.* ]]; then rm -rf -- "$entry"
    elif mv -T -- "$entry" "$INBOX/.swept.$name" 2>/dev/null; then rm -rf -- "$INBOX/.swept.$name"
    fi
  done < <(find "$INBOX" -mindepth 1 -maxdepth 1 -mmin +10 -print0 2>/dev/null)
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

read_exit() { # <dir>: sets EXIT_STATUS EXIT_CODE, and FINAL_OUT FINAL_ERR (the
  # streams' sizes when the command ended; 0 in a record without them),
  # from a complete exit record
  local status='' code='' out='' err=''
  read -r status code out err 2>/dev/null < "$1/exit"
  [[ $status =~ ^(exited|timed_out|canceled)$ && $code =~ ^[0-9]{1,3}$ ]] || return 1
  [[ $out =~ ^(0|[1-9][0-9]{0,17})$ && $err =~ ^(0|[1-9][0-9]{0,17})$ ]] || out=0 err=0
  EXIT_STATUS=$status EXIT_CODE=$code FINAL_OUT=$out FINAL_ERR=$err
}

status_of() { # <task>: sets STATUS and CODE, and FINAL_OUT FINAL_ERR (0 unless
  # STATUS is from the exit record) (builtins only: no process). A command
  # that never began (its verdict says why) has no status or exit code of
  # its own: `unknown` (the wrapper's own exit is not the command's).
  local verdict
  status_seen "$1"
  first_line "$TASKS/$1/verdict" verdict
  if [[ $verdict =~ ^(cwd|e2big)$ ]]; then STATUS=unknown CODE=-; fi
  return 0
}

status_seen() { # <task>: status_of, as the exit record and the supervisor show it
  local dir=$TASKS/$1 pid
  STATUS=unknown CODE=- FINAL_OUT=0 FINAL_ERR=0
  [ -d "$dir" ] || return 0
  if read_exit "$dir"; then STATUS=$EXIT_STATUS CODE=$EXIT_CODE; return 0; fi
  first_line "$dir/supervisor" pid
  if [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null; then STATUS=running; return 0; fi
  if read_exit "$dir"; then STATUS=$EXIT_STATUS CODE=$EXIT_CODE; return 0; fi
  [ -e "$dir/supervisor" ] || STATUS=running
  return 0
}

sizes() { # <dir>: sets OUT_SIZE ERR_SIZE; fails, both 0, unless both files are there
  local both
  both=$(stat -c %s -- "$1/stdout" "$1/stderr" 2>/dev/null)
  if [[ $both =~ ^([0-9]+)$'\n'([0-9]+)$ ]]; then
    OUT_SIZE=${BASH_REMATCH[1]} ERR_SIZE=${BASH_REMATCH[2]}
  else
    OUT_SIZE=0 ERR_SIZE=0
    return 1
  fi
}

whole() { # <out size> <err size>: neither stream is shorter than when the
  # command ended (FINAL_OUT FINAL_ERR, from status_of)
  (( $1 >= FINAL_OUT && $2 >= FINAL_ERR ))
}

evidence() { # <dir>, after status_of: OUT_SIZE ERR_SIZE. A claim is put in
  # place with both files made (do_start), and only root can delete them;
  # one missing, or shorter than the exit record says it was, means what
  # the command printed is not known, and so neither is its state: STATUS
  # unknown, CODE -, sizes 0 (never "ok, no output").
  if ! sizes "$1" || ! whole "$OUT_SIZE" "$ERR_SIZE"; then
    STATUS=unknown CODE=- OUT_SIZE=0 ERR_SIZE=0
  fi
}

state() { # <task>
  status_of "$1"
  evidence "$TASKS/$1"
  printf 'state %s %s %s %s\n' "$STATUS" "$CODE" "$OUT_SIZE" "$ERR_SIZE"
}

chunk() { # <file> <cursor> <max> <size> <tag>: the <tag> lines of a read:
  # max+4 bytes from the cursor (the harness backs the text off to a UTF-8
  # boundary, so it needs the next bytes), as "<tag>:text <n>", newline and
  # the n bytes when they are plain ASCII (no NUL), else as "<tag> <base64>";
  # "<tag> " alone when the stream holds nothing past the cursor.
  local want=$(( $3 + 4 )) left=$(( $4 - $2 )) LC_ALL=C TEXT=
  if (( left <= 0 )); then printf '%s \n' "$5"; return 0; fi
  (( want > left )) && want=$left
  # `head` stops at `want` bytes, and `read` drops or stops at a NUL: all
  # `want` bytes arrived, none of them NUL, exactly when the length matches.
  if (( $2 == 0 )); then
    IFS= read -r -d '' -N "$want" TEXT < <(head -c "$want" -- "$1" 2>/dev/null)
  else
    IFS= read -r -d '' -N "$want" TEXT < <(tail -c "+$(( $2 + 1 ))" -- "$1" 2>/dev/null |
                                           head -c "$want")
  fi
  if (( ${#TEXT} == want )) && [[ $TEXT != *[![:ascii:]]* ]]; then
    printf '%s:text %s\n%s\n' "$5" "$want" "$TEXT"
    return 0
  fi
  printf '%s ' "$5"
  if (( $2 == 0 && $4 <= $3 + 4 )); then
    base64 -w0 -- "$1"
  elif (( $2 == 0 )); then
    head -c "$(( $3 + 4 ))" -- "$1" | base64 -w0
  else
    tail -c "+$(( $2 + 1 ))" -- "$1" | head -c "$(( $3 + 4 ))" | base64 -w0
  fi
  printf '\n'
}

slurp() { # <file>: the whole stream as TEXT (SIZE bytes) if it is short plain
  # ASCII (no NUL); else fails. Builtins only: no process, so an ended
  # command's answer costs no process at all in the common case.
  local LC_ALL=C line pos=-1
  TEXT=
  exec 5<"$1" 2>/dev/null || return 1
  IFS= read -r -d '' -N "$(( FAST + 1 ))" TEXT <&5
  while IFS= read -r line; do
    if [[ $line == pos:* ]]; then pos=${line#pos:}; pos=${pos//[$'\t' ]/}; break; fi
  done < "/proc/$BASHPID/fdinfo/5"
  exec 5<&-
  [[ $pos =~ ^[0-9]+$ ]] && (( pos <= FAST )) && [[ $pos == "${#TEXT}" ]] &&
    [[ $TEXT != *[![:ascii:]]* ]] || return 1
  SIZE=$pos
}

do_read() { # <task> <out> <err> <max> [<limit>]: with a limit (a wait's
  # prefetch), both streams whole when together at most <limit> bytes, else
  # neither (only their sizes): a big output is read by its two ends later.
  local dir=$TASKS/$1 out_text err_text
  status_of "$1"
  if (( $2 == 0 && $3 == 0 )) && slurp "$dir/stdout"; then
    out_text=$TEXT OUT_SIZE=$SIZE
    if slurp "$dir/stderr" && (( OUT_SIZE + SIZE <= ${5:-$(( 2 * FAST ))} )) &&
       whole "$OUT_SIZE" "$SIZE"; then
      err_text=$TEXT ERR_SIZE=$SIZE
      printf 'state %s %s %s %s\nout:text %s\n%s\nerr:text %s\n%s\nsize %s %s\n' \
        "$STATUS" "$CODE" "$OUT_SIZE" "$ERR_SIZE" "$OUT_SIZE" "$out_text" \
        "$ERR_SIZE" "$err_text" "$OUT_SIZE" "$ERR_SIZE"
      print_epoch
      return
    fi
  fi
  evidence "$dir"
  printf 'state %s %s %s %s\n' "$STATUS" "$CODE" "$OUT_SIZE" "$ERR_SIZE"
  if [ -n "${5:-}" ] && (( OUT_SIZE + ERR_SIZE > $5 )); then
    printf 'out \nerr \n'
  else
    chunk "$dir/stdout" "$2" "$4" "$OUT_SIZE" out
    chunk "$dir/stderr" "$3" "$4" "$ERR_SIZE" err
  fi
  printf 'size %s %s\n' "$OUT_SIZE" "$ERR_SIZE"
  print_epoch
}

verdict_of() { # <task>: VERDICT, what the supervisor wrote to `verdict`, once
  # it has (waiting, at most 5 s, on the lock the start took for it); ""
  # when it could not say in time (the command may have begun)
  local dir=$TASKS/$1
  first_line "$dir/verdict" VERDICT
  if [ -z "$VERDICT" ] && [ -e "$dir/verdict" ] && exec 6<"$dir/verdict"; then
    flock -s -w 5 6 2>/dev/null
    exec 6<&-
    first_line "$dir/verdict" VERDICT
  fi 2>/dev/null
}

do_start() { # <task> <nonce>
  local task=$1 req=$INBOX/.taken.$1.$2 dir=$TASKS/$1 fence highest theirs ours claim_epoch
  local stale=
  # Take the staged request first: once renamed it is this start's alone
  # (the harness discards a request only by the same rename: `discard`).
  mv -T -- "$INBOX/$1.$2" "$req" 2>/dev/null || fail no-request
  first_line "$req/digest" ours
  [[ $ours =~ ^[0-9a-f]{64}$ ]] || { rm -rf -- "$req"; fail bad-request; }
  # shellcheck disable=SC2174  # -m is for $TASKS only: its parent is the ledger
  mkdir -p -m 700 -- "$TASKS"
  lock
  new_epoch
  first_line "$req/fence" fence
  if [ -n "$fence" ]; then
    [[ $fence =~ ^[0-9]{1,18}$ ]] || { rm -rf -- "$req"; unlock; fail bad-fence; }
    first_line "$LEDGER/fence" highest
    if [[ $highest =~ ^[0-9]{1,18}$ ]] && (( fence < highest )); then
      stale=1
    else
      printf '%s\n' "$fence" > "$LEDGER/fence.tmp" && mv -f -- "$LEDGER/fence.tmp" "$LEDGER/fence"
    fi
  fi
  # A stale fence refuses every start but one: a retry of a claimed task
  # (same digest) launches nothing, so it is answered from the claim, and
  # never told that a command which ran never did.
  if [ -d "$dir" ]; then
    first_line "$dir/digest" theirs
    rm -rf -- "$req"
    unlock
    if [ -n "$stale" ] && [ "$theirs" != "$ours" ]; then
      printf 'refused stale_fence\nepoch %s\n' "$EPOCH"; return
    fi
    if [[ ! $theirs =~ ^[0-9a-f]{64}$ ]]; then
      # A claim without its digest was damaged (claims are put in place
      # whole): what it launched is unknown, not another request's.
      printf 'refused claim_lost\nepoch %s\n' "$EPOCH"; return
    fi
    if [ "$theirs" != "$ours" ]; then
      printf 'refused conflict\nepoch %s\n' "$EPOCH"; return
    fi
    verdict_of "$task"
    if [[ $VERDICT =~ ^(cwd|e2big)$ ]]; then
      printf 'refused not_started %s\nepoch %s\n' "$VERDICT" "$EPOCH"; return
    fi
    printf 'started 0\nepoch %s\n' "$EPOCH"
    state "$task"
    return
  fi
  if [ -n "$stale" ]; then
    rm -rf -- "$req"; unlock; printf 'refused stale_fence\nepoch %s\n' "$EPOCH"; return
  fi
  first_line "$req/epoch" claim_epoch
  if ! never_claimed "$task" "$claim_epoch" "$req/expect"; then
    # A claim this ledger cannot show, and cannot prove it never made:
    # launching now could launch twice.
    rm -rf -- "$req"; unlock; printf 'refused claim_lost\nepoch %s\n' "$EPOCH"; return
  fi
  # The claim is built whole in the request's own directory and put in
  # place by one rename: whatever ends this process (a deadline, a kill),
  # a claim is complete (digest and all) or absent. The log entry comes
  # first: a claim that may exist is always logged.
  rm -f -- "$req/expect" "$req/epoch" "$req/fence"
  # A command with the default cwd begins unless user cannot enter its
  # home (a command of its own may have run `chmod 000 ~`): when that is
  # not certain, this start waits to learn whether it began (`check`).
  if [ ! -e "$req/cwd" ] && [ ! -e "$req/check" ] && ! enterable_home; then
    : > "$req/check"
  fi
  # Both output files exist before the claim is visible (the rename below
  # moves them with it), so a claim without one was damaged (`evidence`).
  if ! { : > "$req/stdout" && : > "$req/stderr"; } 2>/dev/null; then
    rm -rf -- "$req"; unlock; fail no-claim
  fi
  # The supervisor holds an exclusive lock on `alive` for its whole life
  # (it inherits fd 7 and no process of the command does), so a waiter
  # wakes the moment it lets go: an event, not a poll.
  exec 7>"$req/alive"; flock -x 7
  # Likewise `verdict` (fd 6) until the supervisor writes there whether
  # the command began (see do_supervise), for a request that may not begin
  # (`check`: a cwd, or an argument and env over 16 KiB): this start
  # answers only then. Others answer at once (no wait, no process more).
  if [ -e "$req/check" ]; then exec 6>"$req/verdict"; flock -x 6; fi
  : > "$CLAIMS/$task"
  printf '%s %s\n' "$EPOCH" "$(( SEALED + 1 ))" > "$LEDGER/seal"
  mv -T -- "$req" "$dir" || { exec 7>&- 6>&-; rm -rf -- "$req"; unlock; fail no-claim; }
  setsid bash "$0" supervise "$task" </dev/null >/dev/null 2>&1 9>&- &
  echo "$!" > "$dir/supervisor"
  exec 7>&- 6>&-
  unlock
  forget_stale </dev/null >/dev/null 2>&1 9>&- &
  VERDICT=
  [ -e "$dir/check" ] && verdict_of "$task"
  if [[ $VERDICT =~ ^(cwd|e2big)$ ]]; then
    printf 'refused not_started %s\nepoch %s\n' "$VERDICT" "$EPOCH"; return
  fi
  # The state at the launch (nothing printed yet).
  printf 'started 1\nepoch %s\nstate running - 0 0\n' "$EPOCH"
}

do_discard() { # <task> <nonce>: delete a staged request no start has taken,
  # by the same atomic rename a start takes it with (never a request a
  # start is using)
  local gone=$INBOX/.discarded.$1.$2
  if mv -T -- "$INBOX/$1.$2" "$gone" 2>/dev/null; then rm -rf -- "$gone"; fi
  echo discarded
}

# Runs as `user`, never as root: export the command's env (NUL-separated
# NAME=value entries on fd 4, a file already deleted), enter the cwd (a
# relative one from home, as E2B does; no CDPATH), then run the command as
# E2B's commands.run does. $1 cwd, $2 "argv" (the command is $3) or "fd"
# (read it from fd 3). No root process ever runs with the command's env.
# On fd 5 (a pipe root made: no process of `user` can open it again) it
# reports one line, then closes it: "began" just before it execs the
# command, or why the command cannot begin: "cwd" (missing, not a
# directory, or not enterable by `user`), "e2big" (Linux would refuse the
# exec: the argument and environment are too big; probed with /bin/true and
# the very same argument and environment, only when they are over 16,384
# characters, far under Linux's least limit of 128 KiB). None of the
# wrapper's own messages reaches the command's stderr.
# shellcheck disable=SC2016  # single quotes on purpose: the wrapper's bash expands it
WRAPPER='__sandrail_size=${#3} __sandrail_home=$HOME
while IFS= read -r -d "" __sandrail_entry <&4; do
  export "$__sandrail_entry" 2>/dev/null
  __sandrail_size=$(( __sandrail_size + ${#__sandrail_entry} ))
done
unset __sandrail_entry; exec 4<&-
cd "$__sandrail_home" 2>/dev/null; unset __sandrail_home
if ! CDPATH= cd -- "$1" 2>/dev/null; then echo cwd >&5; exit 1; fi 2>/dev/null
[ "$2" = argv ] || set -- "$1" "$2" '"'"'IFS= read -r -d "" __sandrail_command <&3; exec 3<&-
eval "unset __sandrail_command; $__sandrail_command"'"'"'
if (( __sandrail_size > 16384 )); then
  /bin/true -l -c "$3" 3<&- 5>&- 2>/dev/null
  if [ $? = 126 ]; then echo e2big >&5; exit 1; fi 2>/dev/null
fi
unset __sandrail_size
echo began >&5 2>/dev/null; exec 5>&-
if [ "$2" = argv ]; then exec 3<&-; fi
exec /bin/bash -l -c "$3"'

do_supervise() { # <task>; runs detached, as its own session leader, as root
  local dir=$TASKS/$1 limit pid dog code status uid gid setpriv setsid_bin verdict
  first_line "$dir/timeout" limit
  [[ $limit =~ ^[0-9]{1,9}$ ]] || limit=1
  read -r uid gid setpriv setsid_bin < "$LEDGER/user"
  # The wrapper's report channel: a pipe (read on fd 4, written on fd 5).
  # shellcheck disable=SC2094  # on purpose: both ends of one pipe, reopened by its /proc name
  { exec 4<> <(:) && exec 5>"/proc/$BASHPID/fd/4" 4<"/proc/$BASHPID/fd/4"; } 2>/dev/null
  (
    # First, before anything can fail: the env file is opened for the
    # command and deleted, so no value rests in the sandbox once it runs.
    if [ -f "$dir/env" ]; then exec 4<"$dir/env"; rm -f -- "$dir/env"
    else exec 4</dev/null; fi
    cwd=$USER_HOME
    if [ -f "$dir/cwd" ]; then IFS= read -r -d '' cwd < "$dir/cwd"; fi
    mode=argv command=
    if [ -e "$dir/long" ]; then mode=fd
    else IFS= read -r -d '' command < "$dir/command"; fi
    if [ -e "$dir/canceled" ]; then exit 143; fi
    export HOME=$USER_HOME USER=user LOGNAME=user
    drop=("$setpriv" --reuid="$uid" --regid="$gid" --init-groups --)
    # Where `user` is root (no separation) there is nothing to drop, and a
    # user namespace may refuse setgroups.
    [ "$uid" = 0 ] && drop=()
    exec "$setsid_bin" "${drop[@]}" \
      /bin/bash -c "$WRAPPER" sandrail "$cwd" "$mode" "$command" 3<"$dir/command"
  ) </dev/null >"$dir/stdout" 2>"$dir/stderr" 7>&- 6>&- 4<&- &
  pid=$!
  exec 5>&-
  echo "$pid" > "$dir/pgid"
  (
    exec 8<> <(:)
    read -r -t "$limit" -u 8 _ || true
    [ -e "$dir/canceled" ] || : > "$dir/deadline"
    end_all TERM "$pid"
    read -r -t 2 -u 8 _ || true
    end_all KILL "$pid"
  ) 7>&- 6>&- 4<&- &
  dog=$!
  # The wrapper's report (see WRAPPER), into `verdict` (fd 6, opened by the
  # start, whose exclusive lock the start waits on): "began", "cwd" or
  # "e2big" as reported; "ended" when the pipe closed without a report (the
  # wrapper ended before the command's exec: canceled, timed out or
  # killed), or could not be made.
  verdict=
  IFS= read -r verdict <&4 2>/dev/null
  exec 4<&-
  [[ $verdict =~ ^(began|cwd|e2big)$ ]] || verdict=ended
  # Kept for every claim (retries and reads answer from it): through the
  # start's fd 6 when it waits for it (`check`), else into the file.
  if [ -e "$dir/check" ]; then printf '%s\n' "$verdict" >&6 2>/dev/null
  else printf '%s\n' "$verdict" > "$dir/verdict" 2>/dev/null; fi
  exec 6>&-
  # A pipe nothing writes to, opened now (off the path from the command's
  # end to its waiter): a builtin pause before the last sweep below.
  exec 8<> <(:)
  if [ -e "$dir/canceled" ]; then end_all TERM "$pid"; fi
  wait "$pid"; code=$?
  kill -- "$dog" 2>/dev/null
  kill -KILL -- "-$pid" 2>/dev/null
  if [ -e "$dir/canceled" ]; then status=canceled; code=143
  elif [ -e "$dir/deadline" ]; then status=timed_out; code=124
  else status=exited
  fi
  # One write: a reader sees the whole record or none (then: running).
  printf '%s %s\n' "$status" "$code" > "$dir/exit"
  exec 7>&-
  # What is left of its session (its group is dead already: only processes
  # that made a group of their own), a moment later: pkill scans every
  # process, and run at once it takes the CPU from the waiter answering
  # now (milliseconds on two cores). Never the leader's pid itself, reaped
  # above and free for any new process to take.
  read -r -t 0.05 -u 8 _ || true
  pkill -KILL -s "$pid" 2>/dev/null
  # Then, off that path too, the streams' sizes join the record, put in
  # place by a rename (a reader sees one record or the other). Its session
  # gone, nothing of the command writes less from now on (one that left
  # the session may still write more), so a read that finds a stream
  # shorter knows it was cut since (`evidence`).
  if sizes "$dir"; then
    printf '%s %s %s %s\n' "$status" "$code" "$OUT_SIZE" "$ERR_SIZE" > "$dir/exit.sized" &&
      mv -f -T -- "$dir/exit.sized" "$dir/exit"
  fi
}

do_wait() { # <task> <millis> <limit>: a read of cursors 0 0 (see do_read)
  local dir=$TASKS/$1
  if [ -d "$dir" ] && ! read_exit "$dir" && exec 8<"$dir/alive"; then
    # Wakes when the supervisor lets go of `alive` (after writing `exit`),
    # or at the time.
    flock -s -w "$(( $2 / 1000 )).$(printf '%03d' $(( $2 % 1000 )))" 8 2>/dev/null
    exec 8<&-
  fi 2>/dev/null
  do_read "$1" 0 0 "$3" "$3"
}

do_cancel() { # <task>
  local dir=$TASKS/$1 pg rounds
  if [ -d "$dir" ] && ! read_exit "$dir"; then
    [ -e "$dir/deadline" ] || : > "$dir/canceled"
    first_line "$dir/pgid" pg
    if [[ $pg =~ ^[0-9]+$ ]]; then
      exec 8<> <(:)
      end_all TERM "$pg"
      rounds=40
      while ! read_exit "$dir" && (( rounds-- > 0 )); do read -r -t 0.05 -u 8 _ || true; done
      end_all KILL "$pg"
      rounds=40
      while ! read_exit "$dir" && (( rounds-- > 0 )); do read -r -t 0.05 -u 8 _ || true; done
    fi
  fi
  state "$1"
  print_epoch
}

root_dir() { # <path>: a directory root (this script's own uid) owns, not a
  # link (in sticky /tmp a user could have made the name first: move theirs
  # aside)
  local owner
  if [ -L "$1" ] || { [ -e "$1" ] && owner=$(stat -c %u -- "$1") && [ "$owner" != "$EUID" ]; }; then
    mv -f -T -- "$1" "$1.moved.$$.$RANDOM" || return 1
  fi
  mkdir -m 711 -- "$1" 2>/dev/null
  [ -d "$1" ] && [ ! -L "$1" ] && owner=$(stat -c %u -- "$1") && [ "$owner" = "$EUID" ] &&
    chmod 711 -- "$1"
}

do_publish() { # <task> <nonce> <ext>
  local staged=$INBOX/.taken.$1.$2 target=$CODE/$1.$3 gid rest
  mv -T -- "$INBOX/$1.$2" "$staged" 2>/dev/null || fail no-request
  [ -f "$staged/source" ] || { rm -rf -- "$staged"; fail no-request; }
  read -r _ gid rest < "$LEDGER/user"
  lock
  if ! { root_dir "$SHARED" && root_dir "$CODE"; }; then
    rm -rf -- "$staged"; unlock; fail no-code-dir
  fi
  if [ -d "$TASKS/$1" ]; then
    # Claimed: its start answers from the claim, whose digest covers the
    # source; the file (which root, or a user that is root, may have
    # changed since) decides nothing.
    echo published
  elif [ -e "$target" ]; then
    if cmp -s -- "$staged/source" "$target"; then echo published
    else echo "refused publish_conflict"; fi
  else
    # The launcher's (root's), readable by user's group only: the command
    # reads it, and no command of user can change it.
    chown -h -- "$EUID:$gid" "$staged/source" && chmod 440 -- "$staged/source" &&
      mv -T -- "$staged/source" "$target" && echo published
  fi
  unlock
  rm -rf -- "$staged"
}

do_init() { # <final name>: move this freshly written copy into place
  local uid gid setpriv setsid_bin
  [[ $1 =~ ^launcher-[0-9a-f]{16}\.sh$ ]] || fail bad-name
  [ "$EUID" = 0 ] || fail not-root
  # shellcheck disable=SC2174  # parents made by -p get 0700 from `umask 077` (and chmod below)
  mkdir -p -m 700 -- "$LEDGER/bin" "$TASKS" "$INBOX"
  # Private whatever the files API made (0755): root's home as Debian has
  # it, and the ledger in it.
  chmod go-rwx -- "${LEDGER%/*}"
  chmod 700 -- "$LEDGER" "$LEDGER/bin" "$TASKS" "$INBOX"
  if ! uid=$(id -u user 2>/dev/null) || ! gid=$(id -g user 2>/dev/null); then fail no-user; fi
  setpriv=$(command -v setpriv) || fail no-setpriv
  setsid_bin=$(command -v setsid) || fail no-setsid
  printf '%s %s %s %s\n' "$uid" "$gid" "$setpriv" "$setsid_bin" > "$LEDGER/user.tmp" &&
    mv -f -- "$LEDGER/user.tmp" "$LEDGER/user"
  if [ "$0" != "$LEDGER/bin/$1" ]; then mv -f -- "$0" "$LEDGER/bin/$1"; fi
  lock
  new_epoch
  unlock
  if separated; then echo "ready $EPOCH 1"; else echo "ready $EPOCH 0"; fi
}

case ${1:-} in
  start) need_task "${2:-}"; need_int "${3:-}"; do_start "$2" "$3" ;;
  supervise) need_task "${2:-}"; do_supervise "$2" ;;
  wait) need_task "${2:-}"; need_int "${3:-}"; need_int "${4:-}"; do_wait "$2" "$3" "$4" ;;
  read) need_task "${2:-}"; need_int "${3:-}"; need_int "${4:-}"; need_int "${5:-}"
        do_read "$2" "$3" "$4" "$5" ;;
  cancel) need_task "${2:-}"; do_cancel "$2" ;;
  discard) need_task "${2:-}"; need_int "${3:-}"; do_discard "$2" "$3" ;;
  publish) need_task "${2:-}"; need_int "${3:-}"; [[ ${4:-} =~ ^[a-z]{1,8}$ ]] || fail bad-ext
           do_publish "$2" "$3" "$4" ;;
  init) do_init "${2:-}" ;;
  *) fail bad-subcommand ;;
esac
exit 0
}
