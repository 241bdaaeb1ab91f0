#!/usr/bin/env python3
"""ctest's entry to the pytest suite (python.pytest): skipped (77) where the package, pytest, numpy or
ml_dtypes cannot be imported, never reported as passed."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

try:
    import ml_dtypes  # noqa: F401
    import numpy  # noqa: F401
    import pytest
except ImportError as e:
    print(f"run_pytest: {e}: skipped", file=sys.stderr)
    sys.exit(77)
try:
    import fpgather
except ImportError as e:
    print(f"run_pytest: the fpgather package is not importable ({e}): skipped", file=sys.stderr)
    sys.exit(77)
print(f"run_pytest: fpgather {fpgather.__version__} from {os.path.dirname(fpgather.__file__)}")
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", HERE, *sys.argv[1:]]))
