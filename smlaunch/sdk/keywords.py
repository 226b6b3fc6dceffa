"""Keyword arguments an estimator constructor takes beyond its own signature, as SDK v2 takes them.

SDK v2 still accepts the SDK v1 names of its constructor arguments (``train_instance_type=``,
``train_max_run=``, ``image_name=``, TensorFlow's ``distributions=``...): each is mapped to its v2
name with a ``DeprecationWarning`` (and a logged warning) reading ``<old> has been renamed in
sagemaker>=2.`` (``sagemaker.deprecations.renamed_kwargs``). Given together with the v2 name, the v1
name's value wins, as in the SDK. The tables below are the SDK's ``renamed_kwargs`` call sites
(``EstimatorBase``, ``Framework``, ``TensorFlow``); ``tests/unit/test_sdk_v1_keywords.py`` checks
them against the installed SDK.

Deliberate differences: the generic ``Estimator`` takes ``image_name`` too (see
:data:`RENAMED`); TensorFlow's ``script_mode`` (SDK v1), which SDK v2 swallows silently, is
dropped with a warning saying it has no effect; any other keyword the SDK would swallow is a
``TypeError`` here, as Python raises it, with the nearest argument name as its fix
(:func:`unexpected_keyword_message`); arguments smlaunch does not provide (``instance_groups``)
are refused with a :class:`ConfigurationError` naming them instead of a bare ``TypeError``.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import logging
import warnings
from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeVar

from smlaunch.sdk.errors import ConfigurationError

logger = logging.getLogger(__name__)

V2_URL = "https://sagemaker.readthedocs.io/en/stable/v2.html"
"""The migration page the SDK's deprecation messages point at."""

RENAMED: Mapping[str, str] = {
    "train_instance_count": "instance_count",
    "train_instance_type": "instance_type",
    "train_max_run": "max_run",
    "train_use_spot_instances": "use_spot_instances",
    "train_max_wait": "max_wait",
    "train_volume_size": "volume_size",
    "train_volume_kms_key": "volume_kms_key",
    "image_name": "image_uri",
}
"""``EstimatorBase.__init__``'s ``renamed_kwargs`` and ``Framework.__init__``'s ``image_name``: the
generic ``Estimator``'s table and the frameworks' (renamed before their own checks run).
SDK v2 renames ``image_name`` in ``Framework`` only: its generic ``Estimator`` requires
``image_uri``, so a v1 cell passing ``image_name`` (v1's name of that very argument) fails there
with a ``TypeError``; smlaunch's generic ``Estimator`` takes it as well (a deliberate difference)."""
TENSORFLOW_RENAMED: Mapping[str, str] = {**RENAMED, "distributions": "distribution"}
"""``TensorFlow.__init__`` adds ``distributions`` (``PyTorch`` does not)."""

TENSORFLOW_REMOVED = frozenset({"script_mode"})
"""SDK v1 keywords with no effect in v2 (SDK v2 always runs TensorFlow scripts in script mode):
dropped with the SDK's ``removed_warning`` text."""

REFUSED: Mapping[str, tuple[str, str]] = {
    "instance_groups": (
        "heterogeneous clusters (instance groups) are not supported by smlaunch",
        "pass one instance_type and instance_count (all hosts alike), or run this job with the "
        "SageMaker Python SDK",
    ),
}
"""SDK v2 constructor arguments smlaunch does not provide (name -> (why, fix)); ``None`` (the SDK's
default) is accepted and dropped."""

_Init = TypeVar("_Init", bound=Callable[..., None])


def renamed_message(old_name: str) -> str:
    """The SDK's ``renamed_warning`` text for ``old_name``."""
    return f"{old_name} has been renamed in sagemaker>=2.\nSee: {V2_URL} for details."


def removed_message(name: str) -> str:
    """The SDK's ``removed_warning`` text for ``name`` (a keyword that no longer does anything)."""
    return f"{name} is a no-op in sagemaker>=2.\nSee: {V2_URL} for details."


def _deprecated(message: str) -> None:
    # As the SDK: a DeprecationWarning for code that filters warnings, a logged line for people.
    # stacklevel 4 points at the user's constructor call (here <- rewrite <- wrapper <- caller).
    warnings.warn(message, DeprecationWarning, stacklevel=4)
    logger.warning(message)


def sdk_keywords(renamed: Mapping[str, str], removed: Collection[str] = ()) -> Callable[[_Init], _Init]:
    """Decorate a constructor so that it takes the SDK's v1 names (``renamed``: old -> new), drops
    the no-op keywords (``removed``) with the SDK's warnings, and refuses :data:`REFUSED` ones by
    name. Arguments passed by position count as given under their v2 name."""

    def decorate(init: _Init) -> _Init:
        signature = inspect.signature(init)

        @functools.wraps(init)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> None:
            if any(name in kwargs for name in (*renamed, *removed, *REFUSED)):
                bound = signature.bind_partial(self, *args)
                kwargs = {**{k: v for k, v in bound.arguments.items() if k != "self"}, **kwargs}
                args = ()
                _rewrite(kwargs, renamed, removed)
            # Checked against every constructor of the class, before any argument is looked at, so
            # that a misspelt keyword is named rather than the argument it left unset.
            cls: type = type(self)
            unknown = [name for name in kwargs if name not in constructor_keywords(cls)]
            if unknown:
                raise TypeError(unexpected_keyword_message(cls, unknown[0]))
            init(self, *args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


@functools.cache
def constructor_keywords(cls: type) -> frozenset[str]:
    """The keyword arguments the constructors of ``cls`` and its bases take, together."""
    known: set[str] = set()
    for klass in cls.__mro__[:-1]:  # all but object
        init = klass.__dict__.get("__init__")
        if init is not None:
            parameters = inspect.signature(init).parameters.values()
            known.update(p.name for p in parameters if p.kind is not p.VAR_KEYWORD and p.name != "self")
    return frozenset(known)


def unexpected_keyword_message(cls: type, name: str) -> str:
    """Python's ``TypeError`` text for a keyword no constructor of ``cls`` takes, with the fix: the
    nearest argument name when the keyword looks misspelt (``instance_typ``), else where the SDK
    arguments smlaunch does not take are listed."""
    close = difflib.get_close_matches(name, sorted(constructor_keywords(cls)), n=1, cutoff=0.75)
    fix = (
        f"did you mean {close[0]!r}?"
        if close
        else "remove it (docs/porting.md lists what smlaunch does not take)"
    )
    return f"{cls.__name__}() got an unexpected keyword argument {name!r}. Fix: {fix}"


def _rewrite(kwargs: dict[str, Any], renamed: Mapping[str, str], removed: Collection[str]) -> None:
    for name, (why, fix) in REFUSED.items():
        if kwargs.get(name) is not None:
            raise ConfigurationError(name, kwargs[name], why, fix)
        kwargs.pop(name, None)
    for old_name, new_name in renamed.items():
        if old_name in kwargs:  # sagemaker.deprecations.renamed_kwargs: the old name's value wins
            kwargs[new_name] = kwargs.pop(old_name)
            _deprecated(renamed_message(old_name))
    for name in removed:
        if name in kwargs:
            kwargs.pop(name)
            _deprecated(removed_message(name))
