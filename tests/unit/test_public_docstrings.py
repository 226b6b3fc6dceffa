"""Every public class, method and property of ``smlaunch`` has a docstring: it is what Jupyter's
Shift-Tab shows a user."""

from __future__ import annotations

import inspect

import smlaunch


def _undocumented() -> list[str]:
    missing = []
    for name in smlaunch.__all__:
        obj = getattr(smlaunch, name)
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue
        if not inspect.getdoc(obj):
            missing.append(name)
        if not inspect.isclass(obj):
            continue
        for member, value in vars(obj).items():
            if member.startswith("_") or member == "model_config":
                continue
            if isinstance(value, property):
                function = value.fget
            elif isinstance(value, (classmethod, staticmethod)):
                function = value.__func__
            elif inspect.isfunction(value):
                function = value
            else:
                continue
            if not (function and function.__doc__):
                missing.append(f"{name}.{member}")
    return missing


def test_every_public_class_method_and_property_has_a_docstring() -> None:
    assert smlaunch.__all__
    assert _undocumented() == []
