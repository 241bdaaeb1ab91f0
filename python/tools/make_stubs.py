#!/usr/bin/env python3
"""Writes fpgather/_fpgather.pyi, the typed stub of the extension module, with nanobind's stubgen
from the built module (on PYTHONPATH); --check compares instead and exits 1 when the committed stub
differs (ctest python.stubs), so the stubs never lag the binding.

    PYTHONPATH=build/python python3 python/tools/make_stubs.py [--check]
"""
import os
import re
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
STUB = os.path.join(HERE, "..", "fpgather", "_fpgather.pyi")

# stubgen names the exception classes by import from the package, which imports them from this
# module: declared here instead, so that the stub stands alone.
ERRORS = '''class Error(Exception):
    """Every failure of fpgather; exit_code and kind: the fpgather command's for the same failure."""
    exit_code: int | None
    kind: str | None

class ValidationError(Error):
    """A checkpoint that fails validation was refused by an operation that uses it (exit 1)."""
    exit_code: int
    kind: str

class UsageError(Error, ValueError):
    """Bad arguments, or an input the operation cannot take (exit 2)."""
    exit_code: int
    kind: str

class FormatError(Error):
    """Unreadable, malformed or truncated input, or a failed write (exit 3)."""
    exit_code: int
    kind: str

class InternalError(Error):
    """A broken invariant inside fpgather (exit 4)."""
    exit_code: int
    kind: str
'''


def generate():
    from nanobind.stubgen import StubGen
    import importlib

    module = importlib.import_module("fpgather._fpgather")
    sg = StubGen(module)
    sg.put(module)
    text = sg.get()
    text, n = re.subn(r"from fpgather import \([^)]*\)\n", ERRORS, text, count=1)
    if n != 1:
        raise SystemExit("make_stubs: stubgen's import of the exception classes not found")
    return text


def main():
    try:
        import nanobind.stubgen  # noqa: F401
    except ImportError:
        print("make_stubs: nanobind is not installed", file=sys.stderr)
        return 77
    text = generate()
    if "--check" in sys.argv[1:]:
        with open(STUB) as f:
            if f.read() != text:
                with tempfile.NamedTemporaryFile("w", suffix=".pyi", delete=False) as t:
                    t.write(text)
                print(f"make_stubs: {STUB} is not the binding's stub (fresh one: {t.name}); "
                      "run python/tools/make_stubs.py", file=sys.stderr)
                return 1
        return 0
    with open(STUB, "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
