"""The bad-input and fault matrix (tests/integration/fault_matrix.toml), one test per case.

Each case runs the real ``hyde-lc`` against a real Chroma store built once for the
module from the bundled sample; see tests/integration/fault_matrix.py for what is
checked. Pending cases (behaviour still being built) are skipped with their area.
"""

from __future__ import annotations

import pytest

from tests.integration.fault_matrix import SETUPS, Session, load_cases, run_case, skip_reason

pytestmark = pytest.mark.integration
CASES = load_cases()


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    return Session.build(tmp_path_factory.mktemp("fault-matrix"))


@pytest.mark.parametrize(
    "case",
    # pytest-timeout's limit per case: the run's own limit plus time for setup and digests.
    [pytest.param(c, id=c.id, marks=pytest.mark.timeout(c.timeout + 600)) for c in CASES],
)
def test_case(session, case, tmp_path):
    reason = skip_reason(case)
    if reason:
        pytest.skip(reason)
    outcome = run_case(case, session, tmp_path)
    assert not outcome.problems, outcome.report()


def test_the_matrix_covers_the_documented_failures():
    """At least 80 cases, every setup used, and each case says where it comes from."""
    assert len(CASES) >= 80
    assert {name for c in CASES for name in c.setup} == set(SETUPS)
    assert all(c.source for c in CASES)
