#!/usr/bin/env bash
# The progress display on a terminal (a pseudo-terminal of a given width, stdout and stderr on it as
# in a shell): the bar is drawn on its own line, no output line carries any of it, it fits the width,
# and the screen's last line is clean at the end. No bar when stderr is not a terminal or with
# --no-progress, before or after the subcommand.
source "$(dirname "$0")/common.sh"
: "${MAKE_STEP_FILES:?MAKE_STEP_FILES must name the test input generator}"
command -v python3 >/dev/null || { echo "no python3: skipped"; exit 77; }

# on_terminal COLUMNS ARGS...: runs fpgather ARGS on a pseudo-terminal COLUMNS wide; what the terminal
# received goes to $WORK/tty (bytes), the exit code is returned.
on_terminal() {
  python3 - "$@" <<'PY'
import fcntl, os, pty, struct, sys, termios
cols, argv = int(sys.argv[1]), [os.environ["FPGATHER"]] + sys.argv[2:]
pid, fd = pty.fork()
if pid == 0:  # the child: its stdin, stdout and stderr are the terminal
    fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 24, cols, 0, 0))
    os.environ["TERM"] = "xterm"
    os.execv(argv[0], argv)
out = b""
while True:
    try:
        chunk = os.read(fd, 65536)
    except OSError:  # the child has exited and closed the terminal
        break
    if not chunk:
        break
    out += chunk
_, status = os.waitpid(pid, 0)
open(os.path.join(os.environ["WORK"], "tty"), "wb").write(out)
sys.exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128)
PY
}

# check_screen COLUMNS LABEL: what $WORK/tty shows. Replays \r, \n and ESC[K as a terminal does; fails
# when a finished line holds bar text, when the last line is not empty, or when a drawn bar is wider
# than COLUMNS - 1. Prints the finished lines to $WORK/lines.
check_screen() {
  python3 - "$@" <<'PY' || fail "screen check ($1 columns)"
import os, re, sys
cols, label = int(sys.argv[1]), sys.argv[2]
raw = open(os.path.join(os.environ["WORK"], "tty"), "rb").read().decode("utf-8", "replace")
bar = re.compile(r"\[[#.]+\]|\d+/\d+ steps|ETA \S+")
lines, line, col = [], "", 0
i = 0
while i < len(raw):
    c = raw[i]
    if c == "\r":
        col = 0
    elif c == "\n":
        lines.append(line); line, col = "", 0
    elif raw.startswith("\x1b[K", i):
        line = line[:col]; i += 2
    else:
        line = line[:col] + c + line[col + 1:]; col += 1
    i += 1
ok = True
for l in lines:
    if bar.search(l):
        print(f"an output line holds bar text: {l!r}", file=sys.stderr); ok = False
if line:
    print(f"the last screen line is not clean: {line!r}", file=sys.stderr); ok = False
for seg in re.split(r"[\r\n]", raw.replace("\x1b[K", "")):
    if seg.startswith(label + " ") and len(seg) > cols - 1:
        print(f"a bar wider than {cols - 1} columns: {seg!r}", file=sys.stderr); ok = False
open(os.path.join(os.environ["WORK"], "lines"), "w").write("\n".join(lines) + "\n")
sys.exit(0 if ok else 1)
PY
}

export WORK
TRAIN=(train --model tiny --dp 2 --steps 400 --log-every 200)

on_terminal 60 "${TRAIN[@]}" || fail "train on a terminal: exit $?"
grep -qaE 'train \[[#.]+\] +[0-9]+/400 steps +[0-9]+%  ETA [0-9:]+' "$WORK/tty" || fail "no bar was drawn (60 columns)"
check_screen 60 train
for n in 200 400; do
  grep -qE "^step $n/400 loss [0-9.]+ grad_norm" "$WORK/lines" || fail "the log line of step $n is not a line of its own"
done
grep -qE '^trained tiny \(' "$WORK/lines" || fail "the summary is not a line of its own"
grep -qE '^step [0-9.]+ ms \(median\)' "$WORK/lines" || fail "the timing line is not a line of its own"

# Narrow: the bar gives way first, then the time left; nothing wraps.
on_terminal 30 "${TRAIN[@]}" || fail "train on a 30-column terminal: exit $?"
grep -qaE 'train +[0-9]+/400 steps' "$WORK/tty" || fail "nothing drawn at 30 columns"
check_screen 30 train

# JSON on stdout, bar on stderr, both on the terminal: the JSON's lines stay clean too.
on_terminal 80 --json train --model tiny --dp 2 --steps 400 || fail "--json train on a terminal: exit $?"
check_screen 80 train
grep -q '"final_loss"' "$WORK/lines" || fail "--json: no JSON"

# From the first moment: the setup, a load and each save are named while no step advances, and
# give way to the bar again; the screen ends clean.
on_terminal 80 train --model tiny --steps 40 --save "$WORK/ph" --save-every 20 || fail "train --save: exit $?"
grep -qa 'train: building 2 ranks, step 1 \.\.\.' "$WORK/tty" || fail "the setup is not shown as a phase"
grep -qa "train: saving $WORK/ph/step-00000020 \.\.\." "$WORK/tty" || fail "a save is not shown as a phase"
grep -qa "train: saving $WORK/ph/step-00000040 \.\.\." "$WORK/tty" || fail "the last save is not shown as a phase"
check_screen 80 train
on_terminal 80 train --model tiny --steps 60 --load "$WORK/ph" || fail "train --load: exit $?"
grep -qa "train: reading $WORK/ph \.\.\." "$WORK/tty" || fail "reading the checkpoint is not shown as a phase"
grep -qa "train: loading $WORK/ph/step-00000040 \.\.\." "$WORK/tty" || fail "the load is not shown as a phase"
check_screen 80 train

# diff: a bar of the bytes compared (two checkpoints of the small model: half a second of reading)
"$FPGATHER" --no-progress train --model small --steps 1 --save "$WORK/d1" >/dev/null 2>&1 || fail "train small"
"$FPGATHER" --no-progress train --model small --steps 2 --save "$WORK/d2" >/dev/null 2>&1 || fail "train small"
on_terminal 80 diff "$WORK/d1" "$WORK/d2"
[ $? -eq 1 ] || fail "diff of different checkpoints on a terminal: not exit 1"
grep -qaE 'diff \[[#.]+\] +[0-9.]+/[0-9.]+ MB +[0-9]+%' "$WORK/tty" || fail "diff drew no bar"
check_screen 80 diff
grep -q '^DIFFERENT: ' "$WORK/lines" || fail "diff: the verdict is not a line of its own"

# validate and reshard name their index checks and plan, and reshard its commit, as phases
on_terminal 100 validate --data "$WORK/d1" || fail "validate --data on a terminal: exit $?"
grep -qa "validate: checking the index of $WORK/d1/step-00000001 \.\.\." "$WORK/tty" || fail "validate: no phase"
check_screen 100 validate
# inspect and validate name the reading of a DCP / Megatron index (seconds at a million chunks)
cp -r "$TESTDATA/megatron/parallel/tp2-dp1-dp_reshardable/ckpt" "$WORK/tp2"
for cmd in inspect validate; do
  on_terminal 100 $cmd "$WORK/tp2" || fail "$cmd of a Megatron checkpoint on a terminal: exit $?"
  grep -qa "$cmd: reading the index of $WORK/tp2 \.\.\." "$WORK/tty" || fail "$cmd of a Megatron checkpoint: no phase"
  check_screen 100 $cmd
done
on_terminal 100 reshard "$WORK/d1" "$WORK/d1-dp1" --dp 1 || fail "reshard on a terminal: exit $?"
grep -qa "reshard: validating and planning $WORK/d1/step-00000001 \.\.\." "$WORK/tty" || fail "reshard: no planning phase"
grep -qa "reshard: committing $WORK/d1-dp1 \.\.\." "$WORK/tty" || fail "reshard: no commit phase"
check_screen 100 reshard

# convert: an export names its validation, a re-encoding each of its phases
on_terminal 100 convert "$WORK/d1" "$WORK/d1.safetensors" || fail "convert (export) on a terminal: exit $?"
grep -qa "export: validating $WORK/d1 \.\.\." "$WORK/tty" || fail "export: no validation phase"
check_screen 100 export
on_terminal 100 convert "$WORK/d1" "$WORK/d1-fp8" --fp8 tensorwise || fail "convert --fp8 of a checkpoint: exit $?"
grep -qa "convert: re-encoding the state of 2 ranks into $WORK/d1-fp8 \.\.\." "$WORK/tty" || fail "re-encoding: no phase"
check_screen 100 convert

# step: reading, stepping and writing named
mkdir -p "$WORK/stepfiles"
"$MAKE_STEP_FILES" golden adamw_default_n1 "$WORK/stepfiles" || fail "generate step files"
read -r -a flags <"$WORK/stepfiles/flags"
on_terminal 200 step "${flags[@]}" --params "$WORK/stepfiles/in.safetensors" --grads "$WORK/stepfiles/g1.safetensors" \
  --out "$WORK/stepfiles/out.safetensors" || fail "step on a terminal: exit $?"
grep -qa "step: reading $WORK/stepfiles/in.safetensors and $WORK/stepfiles/g1.safetensors \.\.\." "$WORK/tty" ||
  fail "step: no reading phase"
grep -qa "step: writing $WORK/stepfiles/out.safetensors \.\.\." "$WORK/tty" || fail "step: no writing phase"
check_screen 200 step

# No bar: --no-progress before or after the subcommand, or stderr not a terminal.
for args in "--no-progress ${TRAIN[*]}" "${TRAIN[*]} --no-progress"; do
  read -r -a argv <<<"$args"
  on_terminal 60 "${argv[@]}" || fail "$args: exit $?"
  grep -qa 'ETA' "$WORK/tty" && fail "a bar with $args"
  check_screen 60 train
done
"$FPGATHER" "${TRAIN[@]}" >"$WORK/out" 2>"$WORK/err" || fail "train with stderr in a file"
grep -qa $'\r\|ETA' "$WORK/err" && fail "a bar drawn into a file"
grep -q "^step 400/400 loss" "$WORK/err" || fail "the log lines lack in the file"
finish
