"""`pipi.cells.Arm`: the one writer and reader of arm names ``cell[ (source)][@variant]``."""

from __future__ import annotations

import pytest

from pipi.cells import Arm


@pytest.mark.parametrize("text, arm", [
    ("a", Arm("a")),
    ("pi@zero_both", Arm("pi", "", "zero_both")),
    ("a (released)", Arm("a", "released")),
    ("a (released)@perturb_jpeg25", Arm("a", "released", "perturb_jpeg25")),
    ("pi (yang 2026)@zero_shot", Arm("pi", "yang 2026", "zero_shot")),
    ("a@transplant_D", Arm("a", "", "transplant_D")),
    ("", Arm("")),
])
def test_parse_and_str_round_trip(text, arm):
    assert Arm.parse(text) == arm
    assert str(arm) == text
    # the model an evaluation child scored: the text before the first "@"
    assert str(arm.base) == text.partition("@")[0]


def test_a_variant_with_an_at_sign_and_a_label_with_parentheses_are_kept_whole():
    assert Arm.parse("a@perturb@x").variant == "perturb@x"
    assert Arm.parse("a (lab (x))") == Arm("a", "lab (x)")
    assert Arm.parse("a(released)") == Arm("a(released)")  # no space: not a source label


def test_arms_are_frozen_and_hashable():
    arm = Arm("a", "released")
    with pytest.raises(AttributeError):
        arm.cell = "pi"  # type: ignore[misc]
    assert {arm, Arm.parse("a (released)")} == {arm}
