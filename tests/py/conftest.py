"""pytest fixtures shared by the Python tests.

Tiny HF models and their GGUFs (f32/f16/bf16/q8_0/q4_0) are built on first use and cached in
<repo>/build-test-models/ (see kzutil.py); the error table collected by the comparison tests is
printed at the end of the run and written to build-test-models/report.txt.
"""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kzutil  # noqa: E402

_REPORT = kzutil.Report()


@pytest.fixture(scope="session")
def report():
    return _REPORT


@pytest.fixture(scope="session")
def tiny_hf():
    """tiny_hf(arch) -> directory of the tiny HF checkpoint (built once)."""
    return kzutil.ensure_hf


@pytest.fixture(scope="session")
def tiny_gguf():
    """tiny_gguf(arch, type) -> path of the converted GGUF (built once per converter version)."""
    return kzutil.ensure_gguf


@pytest.fixture(scope="session")
def kazeia():
    """Path of the engine binary; fails (does not skip) when it is not built."""
    return kzutil.require_kazeia()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not _REPORT.rows:
        return
    path = kzutil.MODELS / "report.txt"
    _REPORT.write(path)
    terminalreporter.write_sep("-", f"logit error table (also in {path})")
    terminalreporter.write(_REPORT.table())
