"""What every test of the package shares."""

import os

import pytest

# runtime/host_info.h's kAssumedOthersVariable: the cores other processes keep busy, taken instead of
# /proc/stat's reading by the package and by the command line it starts.
OTHER_CORES_BUSY = "HEADROOM_OTHER_CORES_BUSY"


@pytest.fixture(scope="module", autouse=True)
def quiet_machine(tmp_path_factory):
    """Every test on a quiet machine, whatever else runs beside it (ctest's other tests): a profile
    keeps its timing and a plan compares with it, rather than each reading a load of its own ("other
    processes kept 1.7 cores busy" in the package's plan, "1.6" in the command line's). What a busy
    machine does is the command line's tests' subject (tests/cli). A timing kept here goes to a cache
    of the tests' own where ctest gave none, not to the user's."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv(OTHER_CORES_BUSY, "0")
        if not os.environ.get("XDG_CACHE_HOME"):
            env.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
        yield
