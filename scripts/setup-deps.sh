#!/usr/bin/env bash
# Installs what fpgather needs to build and test on Debian 12 / Ubuntu 24.04: the system packages
# (compiler, CMake, HDF5, CLI11, fmt, spdlog, Catch2, zstd, zlib, OpenSSL's libcrypto, xxHash, OpenBLAS, nlohmann-json, OpenMPI
# for the mpi communicator and its tests, zsh for the completion test) and a
# Python virtual environment in .venv for the interop tests (numpy, ml_dtypes, safetensors, h5py) and
# the Python package (python3-dev, nanobind, scikit-build-core, pytest).
# Idempotent and quiet: packages already present are not reinstalled. Run as root or with sudo.
# Set FPGATHER_NO_VENV=1 to skip the Python environment (the interop tests then report "skipped").
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake pkg-config libhdf5-dev hdf5-tools libcli11-dev libfmt-dev
          libspdlog-dev catch2 libzstd-dev zlib1g-dev libssl-dev libxxhash-dev libopenblas-dev nlohmann-json3-dev
          python3 python3-venv python3-dev man-db groff-base libopenmpi-dev openmpi-bin zsh)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup-deps: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ "${FPGATHER_NO_VENV:-0}" != 1 ]; then
  if [ ! -x .venv/bin/python3 ]; then
    python3 -m venv .venv
  fi
  # nanobind and scikit-build-core: the Python package's module (built with the build tree when
  # .venv has nanobind) and its wheel; pytest runs the package's tests.
  if ! .venv/bin/python3 -c "import numpy, ml_dtypes, safetensors, h5py, hdf5plugin, nanobind, scikit_build_core, pytest" 2>/dev/null; then
    echo "setup-deps: installing the Python interop and package-build packages into .venv"
    .venv/bin/python3 -m pip install -q --disable-pip-version-check \
      numpy ml_dtypes safetensors h5py hdf5plugin nanobind scikit-build-core pytest
  fi
fi
echo "setup-deps: ready"
