"""The benchmark scripts' tests (CI runs them beside tests/; README command 2 runs the library's): the suite's
fixtures and settings, the pytest-xdist workers' single Eigen thread and the shared compilation cache."""

from tests.conftest import _compilation_cache  # noqa: F401  (an autouse fixture: imported, it applies here too)
