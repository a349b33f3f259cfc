"""The registry idiom: declared once, looked up by name, an unknown name answered with the known ones."""

import pytest

from zoflash.errors import ZoflashError
from zoflash.registry import Registry, UnknownName


def test_register_and_get():
    reg: Registry[int] = Registry("widget", "see `zoflash widgets`")

    @reg.register("a")
    def a():
        return 1

    reg.add("b", 2)
    assert reg.get("a") is a and reg.get("b") == 2
    assert reg.names() == ("a", "b") and list(reg) == ["a", "b"] and len(reg) == 2 and "a" in reg


def test_unknown_name_lists_the_known_ones():
    reg: Registry[int] = Registry("widget", "see `zoflash widgets`")
    reg.add("a", 1)
    with pytest.raises(UnknownName, match=r"unknown widget 'x' \(known: a\); see `zoflash widgets`") as err:
        reg.get("x")
    assert isinstance(err.value, ZoflashError)


def test_a_name_is_declared_once():
    reg: Registry[int] = Registry("widget")
    reg.add("a", 1)
    with pytest.raises(ValueError, match="registered twice"):
        reg.add("a", 2)
