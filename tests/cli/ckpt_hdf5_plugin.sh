#!/usr/bin/env bash
# The HDF5 zstd filter plugin (build/hdf5-plugins, filter 32015): with HDF5_PLUGIN_PATH naming it,
# h5dump and h5py (without hdf5plugin) read the compressed datasets of a checkpoint, and every value
# equals fpgather's own export of the same checkpoint; without it neither reads a value. Checked for
# the default encoding (zstd:1) and zstd:3+shuffle. Skipped (77) when neither h5dump nor h5py (with
# numpy and safetensors; PYTHON or $SRC/.venv) is there.
source "$(dirname "$0")/common.sh"
: "${H5ZSTD_PLUGIN_DIR:?H5ZSTD_PLUGIN_DIR must name the directory of the built plugin}"
: "${SRC:?SRC must name the source tree}"
F=("$FPGATHER" --no-progress)
PY=${PYTHON:-}
[ -z "$PY" ] && [ -x "$SRC/.venv/bin/python3" ] && PY="$SRC/.venv/bin/python3"
[ -z "$PY" ] && PY=python3
have_py=0
"$PY" -c 'import h5py, numpy, safetensors' 2>/dev/null && have_py=1
have_h5dump=0
command -v h5dump >/dev/null && have_h5dump=1
if [ $have_py = 0 ] && [ $have_h5dump = 0 ]; then
  echo "neither h5dump nor h5py, numpy and safetensors ($PY): skipped"
  exit 77
fi
[ $have_py = 1 ] || echo "no h5py, numpy and safetensors ($PY): only h5dump is checked"
[ $have_h5dump = 1 ] || echo "no h5dump: only h5py is checked"
ls "$H5ZSTD_PLUGIN_DIR"/lib*.so >/dev/null 2>&1 || fail "no plugin library in $H5ZSTD_PLUGIN_DIR"

# h5py_check PLUGIN_PATH CKPT EXPORT: h5py reads every F32 dataset of CKPT's data files and compares it with
# EXPORT (NAME.master, NAME.STATE as `convert --dtype fp32 --states` names them); "" runs without the plugin.
h5py_check() {
  local plugin=$1
  shift
  env -u HDF5_PLUGIN_PATH ${plugin:+HDF5_PLUGIN_PATH="$plugin"} "$PY" - "$@" <<'PY'
import glob, os, sys
import h5py, numpy as np
from safetensors.numpy import load_file
ckpt, export = sys.argv[1], sys.argv[2]
want = load_file(export)
read = failed = compared = 0
for path in sorted(glob.glob(os.path.join(ckpt, "rank-*.h5"))):
    with h5py.File(path, "r") as f:
        for name, ds in f.items():
            if not isinstance(ds, h5py.Dataset) or ds.attrs["dtype"] != b"F32":
                continue
            if "32015" not in ds._filters:
                sys.exit(f"{path}/{name}: no zstd filter recorded")
            key = ds.attrs["key"].decode()  # optimizer/PARAM/master or optimizer/PARAM/STATE
            _, param, state = key.split("/")
            lo = int(ds.attrs["offset"])
            try:
                got = ds[()]
            except OSError as e:
                failed += 1
                continue
            read += 1
            ref = want[f"{param}.{state}"].reshape(-1)[lo:lo + got.size]
            if not np.array_equal(got.view(np.uint32), ref.view(np.uint32)):
                sys.exit(f"{path}/{name} ({key} at {lo}): values differ from fpgather's export")
            compared += got.size
print(f"read {read} datasets ({compared} values equal to the export), {failed} unreadable")
PY
}

for enc in default zstd:3+shuffle; do
  ck="$WORK/ck-${enc//[:+]/-}"
  if [ "$enc" = default ]; then
    expect_exit 0 "${F[@]}" train --steps 3 --optimizer muon --save "$ck"  # --compress zstd:1 by default
  else
    expect_exit 0 "${F[@]}" train --steps 3 --optimizer muon --save "$ck" --compress "$enc"
  fi
  step="$ck/step-00000003"
  expect_exit 0 "${F[@]}" inspect "$step"
  grep -qE '^compression +[0-9.]+x' "$WORK/out" || fail "$enc: inspect reports no compression"
  expect_exit 0 "${F[@]}" convert "$step" "$WORK/export.safetensors" --dtype fp32 --states --force

  if [ $have_h5dump = 1 ]; then
    # the first F32 dataset of rank 0 and its key, then its first 16 values at full precision
    ds=$(h5dump -A "$step/rank-00000.h5" | awk '/^   DATASET "/ { gsub(/"/, "", $2); n = $2 } /H5T_IEEE_F32LE/ && n != "" { print n; exit }')
    [ -n "$ds" ] || fail "$enc: no F32 dataset in rank-00000.h5"
    key=$(h5dump -a "/$ds/key" "$step/rank-00000.h5" | sed -n 's/.*(0): "\(.*\)".*/\1/p')
    values() { h5dump -A 0 -m %.9g -d "/$ds" -c 16 "$step/rank-00000.h5" | sed -n '/DATA {/,/^ *}/p' | sed 's/([0-9]*)://' | grep -oE -- '-?[0-9][0-9.e+-]*'; }
    HDF5_PLUGIN_PATH="$H5ZSTD_PLUGIN_DIR" values >"$WORK/h5dump.txt"
    [ "$(wc -l <"$WORK/h5dump.txt")" -eq 16 ] || fail "$enc: h5dump with the plugin printed $(wc -l <"$WORK/h5dump.txt") values of /$ds, want 16"
    if [ $have_py = 1 ]; then
      "$PY" - "$WORK/export.safetensors" "$key" "$WORK/h5dump.txt" <<'PY' || fail "$enc: h5dump's values of $key differ from fpgather's export"
import sys
import numpy as np
from safetensors.numpy import load_file
_, param, state = sys.argv[2].split("/")
want = load_file(sys.argv[1])[f"{param}.{state}"].reshape(-1)[:16]
got = np.array([float(v) for v in open(sys.argv[3]).read().split()], dtype=np.float32)
sys.exit(0 if np.array_equal(got.view(np.uint32), want.view(np.uint32)) else 1)
PY
    fi
    # without the plugin h5dump prints no value (and exits 0: the filter is optional)
    (unset HDF5_PLUGIN_PATH; values) >"$WORK/h5dump-none.txt" 2>/dev/null
    [ -s "$WORK/h5dump-none.txt" ] && fail "$enc: h5dump without the plugin printed values of /$ds"
  fi

  if [ $have_py = 1 ]; then
    expect_exit 0 h5py_check "$H5ZSTD_PLUGIN_DIR" "$step" "$WORK/export.safetensors"
    grep -qE '^read [1-9][0-9]* datasets \([1-9][0-9]* values equal to the export\), 0 unreadable$' "$WORK/out" ||
      fail "$enc: h5py with the plugin: $(cat "$WORK/out" "$WORK/err")"
    # chunks stored raw (compression gained < 5%) read without it too; the compressed ones do not
    expect_exit 0 h5py_check "" "$step" "$WORK/export.safetensors"
    grep -qE '^read [0-9]+ datasets \([0-9]+ values equal to the export\), [1-9][0-9]* unreadable$' "$WORK/out" ||
      fail "$enc: h5py without the plugin: $(cat "$WORK/out" "$WORK/err")"
  fi
done
finish
