#!/usr/bin/env bash
# Megatron-Core's integrity.json (dist_checkpointing.save(..., verify_integrity=True)): those of the
# fixtures Megatron wrote verify; for the cases, the manifest is made here as Megatron makes it (SHA-256 of every regular file, by plain name, sha256sum standing
# in for hashlib) over a fixture Megatron wrote; inspect reports it, index-only validate checks each
# listed file exists, validate --data hashes them: a changed byte, a missing file, a file added
# afterwards and manifests that are not one (another algorithm, a path, a bad digest) each named.
source "$(dirname "$0")/common.sh"
F=("$FPGATHER" --no-progress)
SRC_CKPT="$TESTDATA/megatron/parallel/tp2pp2-dp1-dp_reshardable/ckpt"

# manifest DIR [ALGORITHM]: writes DIR/integrity.json over DIR's regular files.
manifest() {
  local dir=$1 algo=${2:-sha256} first=1 f
  {
    printf '{\n  "algorithm": "%s",\n  "files": {' "$algo"
    for f in $(cd "$dir" && LC_ALL=C ls -A); do
      [ -f "$dir/$f" ] && [ ! -L "$dir/$f" ] && [ "$f" != integrity.json ] || continue
      ((first)) || printf ','
      first=0
      printf '\n    "%s": "%s"' "$f" "$(sha256sum "$dir/$f" | cut -d' ' -f1)"
    done
    printf '\n  }\n}\n'
  } >"$WORK/manifest.tmp"
  mv "$WORK/manifest.tmp" "$dir/integrity.json"
}
fresh() { rm -rf "$WORK/c"; cp -r "$SRC_CKPT" "$WORK/c"; manifest "$WORK/c" "$@"; }

# Manifests Megatron-Core wrote itself (save(..., verify_integrity=True)).
for c in pp2-dp1-tied-dp_reshardable ep2-moe-dense-first-fully_reshardable; do
  expect_exit 0 "${F[@]}" validate --data "$TESTDATA/megatron/parallel/$c/ckpt"
  expect_in "$WORK/out" "integrity.json: 4 files SHA-256 checked; 0 problems"
done

fresh
expect_exit 0 "${F[@]}" inspect "$WORK/c"
expect_in "$WORK/out" "integrity manifest: integrity.json, SHA-256 of 6 files (validate --data checks them)"
expect_exit 0 "${F[@]}" --json inspect "$WORK/c"
expect_in "$WORK/out" '"integrity": {'
expect_exit 0 "${F[@]}" validate "$WORK/c"
expect_in "$WORK/out" "integrity.json: 6 files listed; 0 problems"
expect_in "$WORK/out" "note: integrity.json lists 6 files with SHA-256 digests: validate --data checks them"
expect_exit 0 "${F[@]}" validate --data "$WORK/c"
expect_in "$WORK/out" "integrity.json: 6 files SHA-256 checked; 0 problems"
expect_exit 0 "${F[@]}" --json validate --data "$WORK/c"
expect_in "$WORK/out" '"bytes_hashed": '
expect_in "$WORK/out" '"hashed": true'

# One changed byte of a file no other check reads (metadata.json gains a trailing space).
printf ' ' >>"$WORK/c/metadata.json"
expect_exit 0 "${F[@]}" validate "$WORK/c"
expect_exit 1 "${F[@]}" validate --data "$WORK/c"
expect_in "$WORK/out" "checksum - [0, 0) metadata.json: SHA-256 "
expect_in "$WORK/out" ", integrity.json records "
expect_in "$WORK/out" "INVALID"

# A listed file removed, a file added after the manifest.
fresh
rm "$WORK/c/__3_0.distcp"
: >"$WORK/c/notes.txt"
expect_exit 1 "${F[@]}" validate "$WORK/c"
expect_in "$WORK/out" "missing_file - [0, 0) __3_0.distcp: listed in integrity.json but not a regular file of the checkpoint"
expect_in "$WORK/out" "note: not listed in integrity.json (written after it, or added): notes.txt"

# Manifests that are not one: a problem naming integrity.json, never a crash or a file outside.
fresh md5
expect_exit 1 "${F[@]}" validate "$WORK/c"
expect_in "$WORK/out" "checksum - [0, 0) integrity.json: not a usable integrity manifest:"
expect_in "$WORK/out" "algorithm 'md5', not \"sha256\""
expect_exit 0 "${F[@]}" inspect "$WORK/c"
expect_in "$WORK/out" "integrity manifest not read:"
fresh
sed -i 's|"metadata.json"|"../metadata.json"|' "$WORK/c/integrity.json"
expect_exit 1 "${F[@]}" validate --data "$WORK/c"
expect_in "$WORK/out" "is not a plain file name of the checkpoint directory"
fresh
sed -i 's|\("metadata.json": "\)[0-9a-f]*|\1abc|' "$WORK/c/integrity.json"
expect_exit 1 "${F[@]}" validate "$WORK/c"
expect_in "$WORK/out" "digest \"abc\" is not 64 hex digits"
fresh
printf '{"algorithm": "sha256", "files": {"metadata.json": "%064d", "metadata.json": "%064d"}}' 0 0 >"$WORK/c/integrity.json"
expect_exit 1 "${F[@]}" validate "$WORK/c"
expect_in "$WORK/out" "integrity.json"
printf '[1, 2' >"$WORK/c/integrity.json"
expect_exit 1 "${F[@]}" validate "$WORK/c"
expect_in "$WORK/out" "not a usable integrity manifest"
finish
