#!/usr/bin/env bash
# SIGKILL at random moments of `train --save-every 1` (seeded, a bounded number of kills): after
# every kill `latest` names a valid checkpoint, no checkpoint committed before the kill is gone, no
# half-written one is visible, and the next run resumes from the newest committed checkpoint (adopting
# it if the kill came between its rename and the update of `latest`) and saves. Finally the staging
# directories the kills left are removed once they are old enough.
source "$(dirname "$0")/common.sh"
F=("$FPGATHER" --no-progress)
MODEL="$TESTDATA/models/mini-network.json"
cd "$WORK" || exit 1
R=root
KILLS=${KILLS:-24}
RANDOM=20261201  # the same kill moments on every run

committed() {  # the step directories holding an index, one per line
  local d
  for d in "$R"/step-*/; do [ -f "$d/index.h5" ] && basename "$d"; done 2>/dev/null
}
newest_step() {  # its step, 0 if none
  local s
  s=$(committed | tail -1)
  s=${s#step-}
  echo $((10#${s:-0}))
}

unnamed=0  # kills that left the newest committed checkpoint not named by `latest`
resumed=0  # kills after which a checkpoint was there to resume from
for ((i = 1; i <= KILLS; i++)); do
  before=$(committed)
  args=(train --model "$MODEL" --steps 100000 --save-every 1 --save "$R")
  [ -n "$before" ] && args+=(--load "$R")
  "${F[@]}" "${args[@]}" >"$WORK/killed.out" 2>"$WORK/killed.err" &
  pid=$!
  sleep "0.$(printf '%03d' $((20 + RANDOM % 480)))"
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null

  for d in $before; do [ -f "$R/$d/index.h5" ] || fail "kill $i: $d, committed before the kill, is gone"; done
  for d in "$R"/step-*/; do
    [ -d "$d" ] && [ ! -f "$d/index.h5" ] && fail "kill $i: $(basename "$d") is visible without its index"
  done
  if [ -f "$R/latest" ]; then
    expect_exit 0 "${F[@]}" validate "$R"
  fi
  newest=$(committed | tail -1)
  [ -n "$newest" ] && [ "$(head -1 "$R/latest" 2>/dev/null)" != "$newest" ] && unnamed=$((unnamed + 1))

  # The next run resumes from the newest committed checkpoint and saves one more.
  n=$(newest_step)
  [ "$n" -eq 0 ] && continue  # killed before its first commit
  resumed=$((resumed + 1))
  expect_exit 0 "${F[@]}" train --model "$MODEL" --steps $((n + 1)) --load "$R" --save "$R"
  expect_in "$WORK/out" "resumed from $R/$(printf 'step-%08d' "$n") at step $n"
  expect_in "$WORK/out" "saved $R/$(printf 'step-%08d' $((n + 1)))"
  expect_exit 0 "${F[@]}" validate "$R"
done
[ "$resumed" -ge $((KILLS / 2)) ] || fail "only $resumed of $KILLS kills came after a commit"

# The kills' staging directories (and temporary `latest` files), once a minute old and their
# writers dead, go with the next run.
stale=$(ls -A "$R" | grep -c '\.tmp-')
echo "$KILLS kills: $unnamed left a committed checkpoint that \`latest\` did not name," \
  "$stale staging directories or temporary files"
for d in "$R"/.*.tmp-*; do [ -e "$d" ] && touch -d '2 minutes ago' "$d"; done
n=$(newest_step)
expect_exit 0 "${F[@]}" train --model "$MODEL" --steps $((n + 2)) --save-every 1 --load "$R" --save "$R"
expect_in "$WORK/out" "saved $R/$(printf 'step-%08d' $((n + 2)))"
[ "$(ls -A "$R" | grep -c '\.tmp-')" -eq 0 ] || fail "staging directories left: $(ls -A "$R" | grep '\.tmp-' | tr '\n' ' ')"
expect_exit 0 "${F[@]}" validate --data "$R"
finish
