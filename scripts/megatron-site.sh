# Sourced: puts megatron-core and emerging-optimizers (the wheels in .whl/, fetched where a registry is
# reachable: `pip download --python-version 3.12 --only-binary=:all: --no-deps -d .whl
# megatron-core==0.19.2 emerging-optimizers==0.3.0`) and the .whl/extra/ wheels this Python lacks into a
# fresh site directory on PYTHONPATH, so that a machine without a registry runs Megatron-Core. Each extra
# wheel is installed only where its module does not import: Megatron's numpy, packaging, psutil and
# absl; compressed-tensors, which transformers loads compressed-tensors (MXFP8) models with, and what it
# needs besides transformers' own (fetched as above into .whl/extra: compressed-tensors==0.20.1
# loguru==0.8.0, and for a Python without pydantic pydantic==2.11.10 pydantic-core==2.33.2
# annotated-types==0.8.0 typing-inspection==0.4.1 typing-extensions==4.12.2).
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
