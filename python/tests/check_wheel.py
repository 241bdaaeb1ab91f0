#!/usr/bin/env python3
"""ctest python.wheel: builds the package's wheel with pip and scikit-build-core, against the libfpgather
of the build tree BUILD (-Dfpgather_DIR, so only the module is compiled), installs it into a fresh
folder and imports it from there alone: the module, the Python files, the stubs and py.typed must
all be in the wheel. Skipped (77) without scikit-build-core or nanobind.

    check_wheel.py BUILD TESTDATA
"""
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.dirname(HERE)


def main(build, testdata):
    try:
        import nanobind  # noqa: F401
        import scikit_build_core  # noqa: F401
    except ImportError as e:
        print(f"check_wheel: {e}: skipped", file=sys.stderr)
        return 77
    out = os.path.join(build, "python-wheel")
    shutil.rmtree(os.path.join(out, "dist"), ignore_errors=True)
    start = time.time()
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-index",
                    "--disable-pip-version-check", "-w", os.path.join(out, "dist"), PACKAGE,
                    "-C", f"cmake.define.fpgather_DIR={build}", "-C", f"build-dir={os.path.join(out, 'build')}"],
                   check=True)
    print(f"check_wheel: wheel built in {time.time() - start:.0f} s")
    wheels = glob.glob(os.path.join(out, "dist", "fpgather-*.whl"))
    assert len(wheels) == 1, wheels
    names = zipfile.ZipFile(wheels[0]).namelist()
    for want in ("fpgather/__init__.py", "fpgather/_fpgather.pyi", "fpgather/py.typed"):
        assert want in names, (want, names)
    assert any(n.startswith("fpgather/_fpgather") and n.endswith(".so") for n in names), names
    # Only the package: nothing else of the project's install (binary, headers, libraries, man pages).
    assert all(n.startswith(("fpgather/", "fpgather-")) for n in names), names
    with tempfile.TemporaryDirectory() as target:
        subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index",
                        "--disable-pip-version-check", "-q", "--target", target, wheels[0]], check=True)
        code = ("import fpgather, sys; c = fpgather.open(sys.argv[1]); s = c.summary(); "
                "assert s['format'] == 'megatron_torch_dist', s; "
                "assert fpgather.__file__.startswith(sys.argv[2]), fpgather.__file__; "
                "print('check_wheel:', c, len(c.keys()), 'tensors')")
        env = dict(os.environ, PYTHONPATH=target)
        subprocess.run([sys.executable, "-c", code, os.path.join(testdata, "megatron", "dp1-one-bucket", "ckpt"),
                        target], check=True, env=env, cwd=target)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
