"""`memoryd import`'s parse/validate layer against thousands of Hypothesis-drawn hostile records.

The strategies and the properties are tests/unit/test_import_records.py's (see its docstring);
this runs them with 1,500 examples each (400 for whole valid files) instead of fifty: at 4,000
the module took about 5 minutes of the CI run's slow tests.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit import test_import_records as fast

pytestmark = pytest.mark.slow

MANY = settings(max_examples=1500, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@MANY
@given(fast.spoilt())
def test_thousands_of_spoilt_records_are_each_refused_naming_the_field(
        case: tuple[str, dict[str, Any]]) -> None:
    fast.test_a_record_with_one_spoilt_field_is_refused_naming_that_field.hypothesis.inner_test(case)


@MANY
@given(st.lists(fast.raw_lines, max_size=8))
def test_thousands_of_hostile_files_are_read_without_raising(lines: list[bytes]) -> None:
    fast.test_any_lines_are_each_read_refused_or_counted_and_reading_never_raises.hypothesis.inner_test(lines)


@settings(max_examples=400, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(fast.valid_records(), min_size=1, max_size=5))
def test_a_thousand_valid_files_pass_and_the_daemons_validation_takes_them(
        found: list[dict[str, Any]]) -> None:
    fast.test_valid_records_pass_and_their_writes_pass_the_daemons_validation.hypothesis.inner_test(found)
