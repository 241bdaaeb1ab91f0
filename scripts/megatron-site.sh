# Sourced: puts megatron-core and emerging-optimizers (the wheels in .whl/, fetched where a registry is
# reachable: `pip download --python-version 3.12 --only-binary=:all: --no-deps -d .whl
# megatron-core==0.19.2 emerging-optimizers==0.3.0`) and the .whl/extra/ wheels this Python lacks into a
# fresh site directory on PYTHONPATH, so that a machine without a registry runs Megatron-Core.
site=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" .whl/*.whl
declare -A mod=([safetensors]=safetensors [psutil]=psutil [numpy]=numpy [packaging]=packaging [absl_py]=absl)
for w in .whl/extra/*.whl; do
  [ -e "$w" ] || continue
  base=$(basename "$w"); pkg=${base%%-*}
  if ! python3 -c "import ${mod[$pkg]:-$pkg}" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "$w"
  fi
done
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
