#!/usr/bin/env python3
"""ctest's entry to the package's tests: skips (exit 77) where Debian's torch or pytest is not there."""
import sys

try:
    import pytest
    import torch  # noqa: F401
except ImportError as missing:
    print(f"skipped: {missing} (scripts/install-deps.sh --with-pytorch installs python3-torch; python3-pytest is in the base set)")
    sys.exit(77)

sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", *sys.argv[1:]]))
