"""A state format's writer: the declared fields in declared order, and a writer that
disagrees with its declaration is refused (a bug of the owner, named by its fields)."""

from __future__ import annotations

import pytest

from youmu.errors import StateError
from youmu.state.formats import RANK, SUM, StateField, StateFormat, an_int

FMT = StateFormat("Counter", "example.Counter/2", (
    StateField("epoch", an_int()),
    StateField("seen", an_int(), scope=RANK, merge=SUM, required=False),
    StateField("last", an_int()),
))


def test_the_fields_are_written_after_the_tag_and_settings_in_declared_order() -> None:
    st = FMT.write({"last": 4, "seen": 3, "epoch": 1}, settings={"seed": 0})
    assert list(st.items()) == [("format", "example.Counter/2"), ("seed", 0), ("epoch", 1), ("seen", 3), ("last", 4)]
    assert list(FMT.write({"last": 4, "epoch": 1})) == ["format", "epoch", "last"]  # an optional field left out


@pytest.mark.parametrize("values,unknown,missing", [
    ({"epoch": 1, "last": 2, "extra": 0}, ["extra"], []),
    ({"epoch": 1, "seen": 2}, [], ["last"]),
    ({"seen": 2, "other": 1}, ["other"], ["epoch", "last"]),
])
def test_a_writer_that_disagrees_with_its_declaration_is_refused(values: dict, unknown: list, missing: list) -> None:
    with pytest.raises(StateError) as e:
        FMT.write(values)
    assert str(e.value) == f"example.Counter/2: fields {unknown} are not declared, {missing} are missing"
