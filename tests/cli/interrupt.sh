#!/usr/bin/env bash
# Ctrl-C (SIGINT) and SIGTERM during reshard, convert and train --save: the command stops at its
# next safe point, removes its staging, says what it kept and exits 128 + the signal (130, 143);
# its output is not created, or unchanged. The staging a killed writer (kill -9) left beside its
# output is removed by the next run writing that output once a minute old; a live writer's never.
source "$(dirname "$0")/common.sh"
F=("$FPGATHER" --no-progress)
cd "$WORK" || exit 1

# A source whose reshard and recompression at zstd:19 take seconds: long enough to be interrupted.
expect_exit 0 "${F[@]}" train --model small --steps 1 --save src
CKPT=src/step-00000001

# start_then SIGNAL PATTERN CMD...: runs CMD in the background, waits until a file matching PATTERN
# (its staging) appears, sends SIGNAL and keeps the exit code in $rc, stdout/stderr in out/err.
start_then() {
  local sig=$1 pattern=$2; shift 2
  "$@" >"$WORK/out" 2>"$WORK/err" &
  local pid=$! i
  for ((i = 0; i < 400; i++)); do
    compgen -G "$pattern" >/dev/null && break
    sleep 0.05
  done
  compgen -G "$pattern" >/dev/null || fail "no staging $pattern appeared: $*"
  sleep 0.2
  kill "-$sig" "$pid"
  wait "$pid"
  rc=$?
}
# no_staging DIR: nothing hidden left in DIR.
no_staging() {
  local left
  left=$(find "$1" -maxdepth 1 -name '.*' ! -name . ! -name ..)
  [ -z "$left" ] || fail "staging left in $1: $left"
}

# reshard: SIGINT -> 130, nothing written.
start_then INT '.r1.tmp-*' "${F[@]}" reshard "$CKPT" r1 --dp 1 --compress zstd:19
[ "$rc" -eq 130 ] || fail "reshard after SIGINT exited $rc, want 130"
expect_in "$WORK/err" "fpgather: interrupted (SIGINT): nothing written; r1 not created"
[ -e r1 ] && fail "reshard after SIGINT left r1"
no_staging .
[ -s "$WORK/out" ] && fail "reshard after SIGINT printed a result"

# convert (a checkpoint recompressed): SIGTERM -> 143; an existing OUT (--force) stays as it was.
mkdir c1 && echo keep >c1/marker
start_then TERM '.c1.fpgather-staging-*' "${F[@]}" convert "$CKPT" c1 --compress zstd:19 --force
[ "$rc" -eq 143 ] || fail "convert after SIGTERM exited $rc, want 143"
expect_in "$WORK/err" "fpgather: interrupted (SIGTERM): nothing written; c1 unchanged"
[ "$(ls -A c1)" = marker ] || fail "convert after SIGTERM changed c1: $(ls -A c1)"
no_staging .

# train --save: stopped between steps; the last committed checkpoint is kept and named, the metrics
# hold every finished step, and the run resumes from it.
start_then INT 'run/latest' "${F[@]}" train --steps 1000000 --save run --save-every 100 --metrics m.jsonl
[ "$rc" -eq 130 ] || fail "train after SIGINT exited $rc, want 130"
# The signal lands between steps, or (on a loaded machine) during a save, which is then abandoned.
if grep -qF "was abandoned" "$WORK/err"; then
  expect_in "$WORK/err" "fpgather: interrupted (SIGINT): the save of run/step-0000"
  expect_in "$WORK/err" "was abandoned; kept run/step-0000"
else
  expect_in "$WORK/err" "fpgather: interrupted (SIGINT): stopped after step "
  expect_in "$WORK/err" "of 1000000; kept run/step-0000"
fi
expect_in "$WORK/err" ", the last checkpoint saved (resume with --load run); m.jsonl holds every step finished"
no_staging run
expect_exit 0 "${F[@]}" validate run
last=$(head -1 run/latest)
n=$((10#${last#step-}))
lines=$(wc -l <m.jsonl)
[ "$lines" -ge "$n" ] || fail "m.jsonl holds $lines steps, fewer than the $n of $last"
# Resumed with the same --metrics: the lines from the resumed step on are replaced, none is lost.
expect_exit 0 "${F[@]}" train --steps $((n + 3)) --load run --metrics m.jsonl
expect_in "$WORK/out" "resumed from run/$last at step $n"
[ "$(wc -l <m.jsonl)" -eq $((n + 3)) ] || fail "m.jsonl after the resume holds $(wc -l <m.jsonl) lines, want $((n + 3))"
expect_exit 0 python3 -c "
import json, sys
steps = [json.loads(l)['step'] for l in open('m.jsonl')]
sys.exit(steps != list(range($n + 3)))"

# train without a save: nothing is kept, and it says so.
start_then TERM 'm2.jsonl' "${F[@]}" train --steps 1000000 --metrics m2.jsonl
[ "$rc" -eq 143 ] || fail "train after SIGTERM exited $rc, want 143"
expect_in "$WORK/err" "nothing saved (no checkpoint root)"

# A killed reshard (kill -9) leaves its staging; the next reshard to the same target removes it once
# it is a minute old and goes on. A live writer's staging (its lock held) is never removed.
"${F[@]}" reshard "$CKPT" r2 --dp 1 --compress zstd:19 >/dev/null 2>&1 &
pid=$!
for ((i = 0; i < 400; i++)); do compgen -G '.r2.tmp-*' >/dev/null && break; sleep 0.05; done
sleep 0.2
kill -9 "$pid"
wait "$pid" 2>/dev/null
dead=$(compgen -G '.r2.tmp-*')
[ -n "$dead" ] || fail "kill -9 left no staging to recover"
touch -d '2 minutes ago' "$dead"
mkdir .r2.tmp-0123456789abcdef && touch -d '2 minutes ago' .r2.tmp-0123456789abcdef
exec 9<.r2.tmp-0123456789abcdef
flock -x 9  # a live writer holds it
expect_exit 0 "${F[@]}" reshard "$CKPT" r2 --dp 1
expect_in "$WORK/err" "fpgather: warning: removed $dead, staging of r2 left by a run that did not finish"
[ -e "$dead" ] && fail "the dead reshard's staging $dead is still there"
[ -d .r2.tmp-0123456789abcdef ] || fail "removed the staging of a live writer"
exec 9<&-
rm -rf .r2.tmp-0123456789abcdef
expect_exit 0 "${F[@]}" validate r2

# The same for convert's staging and a safetensors file's temporary file.
mkdir .c2.fpgather-staging-Ab12Cd && touch .c2.fpgather-staging-Ab12Cd/part && touch -d '2 minutes ago' .c2.fpgather-staging-Ab12Cd
: >.c3.safetensors.tmp-123456 && touch -d '2 minutes ago' .c3.safetensors.tmp-123456
: >.c3.safetensors.tmp-777 # a minute old at most: may be a live writer's
expect_exit 0 "${F[@]}" convert "$CKPT" c2
[ -e .c2.fpgather-staging-Ab12Cd ] && fail "convert left the stale staging of c2"
expect_exit 0 "${F[@]}" convert "$CKPT" c3.safetensors
[ -e .c3.safetensors.tmp-123456 ] && fail "convert left the stale temporary file of c3.safetensors"
[ -e .c3.safetensors.tmp-777 ] || fail "convert removed a temporary file younger than a minute"
rm -f .c3.safetensors.tmp-777
no_staging .

finish
