#!/usr/bin/env bash
# The man pages: groff renders each without a warning (groff -ww), and they describe what exists:
# every subcommand has its page and a place in fpgather(1), every option a subcommand's --help lists is
# in its page, and every option a page defines is one that the subcommand (or fpgather) takes.
source "$(dirname "$0")/common.sh"
: "${SRC:?SRC must name the source tree}"
command -v groff >/dev/null || { echo "no groff: skipped"; exit 77; }
MAN="$SRC/man"

for page in "$MAN"/*.1 "$MAN"/*.5; do
  groff -ww -man -Tutf8 "$page" >/dev/null 2>"$WORK/warnings"
  [ -s "$WORK/warnings" ] && { fail "groff warns on $(basename "$page")"; sed 's/^/    /' "$WORK/warnings" >&2; }
done

subcommands() { "$FPGATHER" "$@" --help | sed -n '/^Subcommands:/,$p' | sed -n 's/^  \([a-z][a-z0-9-]*\) .*/\1/p'; }
long_options() { "$FPGATHER" "$@" --help | sed -n '/^Options:/,/^$/p' | grep -oE '^ +-[-a-z0-9,]+' | tr ',' '\n' | tr -d ' ' | grep '^--'; }
in_roff() { sed 's/\\-/-/g' "$1"; }  # roff's \- as the dash it prints (text read whole: pipefail and grep -q)

for sub in $(subcommands); do
  # fpgather(1) lists it, as `.B SUB` in DESCRIPTION
  grep -qx "\.B $sub" "$MAN/fpgather.1" || fail "fpgather.1 does not list $sub"
  page="$MAN/fpgather-$sub.1"
  if [ "$sub" = completion ] || [ "$sub" = help ]; then continue; fi  # described in fpgather.1 itself
  [ -f "$page" ] || { fail "no man page for $sub"; continue; }
  grep -q "fpgather-$sub (1)\|BR fpgather-$sub (1)" "$MAN/fpgather.1" || fail "fpgather.1 does not refer to fpgather-$sub(1)"
  text=$(in_roff "$page")
  commands=("$sub")
  for nested in $(subcommands "$sub"); do commands+=("$sub $nested"); done
  taken=$(long_options; for c in "${commands[@]}"; do read -r -a argv <<<"$c"; long_options "${argv[@]}"; done)
  for c in "${commands[@]}"; do
    read -r -a argv <<<"$c"
    for opt in $(long_options "${argv[@]}"); do
      [ "$opt" = --help ] && continue
      grep -qE -- "$opt([^a-z0-9-]|$)" <<<"$text" || fail "fpgather-$sub.1 does not describe $c $opt"
    done
  done
  # each option the page defines (the tag of a .TP item) is one the command takes
  for opt in $(awk '/^\.TP/ { getline; print }' "$page" | sed 's/\\-/-/g' | grep -oE -- '--[a-z0-9-]+' | sort -u); do
    grep -qx -- "$opt" <<<"$taken" || fail "fpgather-$sub.1 defines $opt, which fpgather $sub does not take"
  done
done
# the global options of fpgather(1) are those of fpgather --help
text=$(in_roff "$MAN/fpgather.1")
for opt in $(long_options); do
  [ "$opt" = --help ] && continue
  grep -qE -- "$opt([^a-z0-9-]|$)" <<<"$text" || fail "fpgather.1 does not describe $opt"
done
finish
