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
``TypeError`` here, as Python raises it; arguments smlaunch does not provide (``instance_groups``)
are refused with a :class:`ConfigurationError` naming them instead of a bare ``TypeError``.
"""

from __future__ import annotations

import functools
import inspect
import logging
import warnings
from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeVar

from estimator.errors import ConfigurationError

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
            init(self, *args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


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
