"""Hyperparameter encoding as SageMaker SDK v2 sends it, and the CreateTrainingJob limits.

Every value goes on the wire as ``json.dumps(value)`` (``10 -> "10"``, ``3e-5 -> "3e-05"``,
``"x" -> "\\"x\\""``, ``True -> "true"``, dicts and lists as JSON text), keys as ``str(key)``:
exactly ``EstimatorBase._json_encode_hyperparameters``. The training toolkit and our runtime
``json.loads`` each value back. Pure functions, no I/O.

Deliberate differences from the SDK: a value ``json.dumps`` cannot encode fails here, naming the
key, instead of a bare ``TypeError`` at ``fit()``; keys that become the same string (``1`` and
``"1"``) are refused instead of one silently winning; user keys the runtime reads as launcher
settings (``sagemaker_*``, ``mp_parameters``) are refused (:func:`check_user_keys`); and the
CreateTrainingJob limits (at most 100 entries, key <= 256 characters, value <= 2500 characters) are
checked before anything is staged instead of by the service.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from estimator.errors import ConfigurationError
from estimator.naming import HYPERPARAMETER_PATTERN
from runtime import contract


def encode_value(key: str, value: Any, field: str = "hyperparameters") -> str:
    """``json.dumps(value)``, or :class:`ConfigurationError` naming ``field[key]``."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(
            f"{field}[{key!r}]",
            value,
            f"not JSON-serialisable ({type(value).__name__}: {exc})",
            "pass a str, int, float, bool, None, or a list/dict of those (e.g. str(value))",
        ) from exc


def encode(hyperparameters: Mapping[Any, Any] | None, field: str = "hyperparameters") -> dict[str, str]:
    """Encode every value as SDK v2 does; insertion order is kept (it is the wire order)."""
    if hyperparameters is None:
        return {}
    if not isinstance(hyperparameters, Mapping):
        raise ConfigurationError(
            field, hyperparameters, "must be a dict of name -> value", "pass e.g. {'epochs': 10}"
        )
    encoded: dict[str, str] = {}
    originals: dict[str, Any] = {}
    for key, value in hyperparameters.items():
        name = str(key)
        if name in encoded:  # {1: "a", "1": "b"}: the wire has one "1", so one value would vanish
            raise ConfigurationError(
                f"{field} key",
                key,
                f"collides with key {originals[name]!r}: both are sent as {name!r}; one value would be lost",
                "keep one of them (hyperparameter names are sent as strings)",
            )
        originals[name] = key
        encoded[name] = encode_value(name, value, field)
    return encoded


def check_user_keys(hyperparameters: Mapping[Any, Any], field: str = "hyperparameters") -> None:
    """Refuse user keys that the runtime reads as launcher settings rather than script arguments:
    ``sagemaker_*`` (``sagemaker_mpi_enabled``, ``sagemaker_program``, ...) and ``mp_parameters``.
    Set by hand, they would start a launcher ``distribution`` never asked for (or one it refuses),
    or be silently replaced by the script-mode keys."""
    for key in hyperparameters:
        name = str(key)
        if name.startswith(contract.FRAMEWORK_PARAM_PREFIX) or name == contract.HP_MP_PARAMETERS:
            raise ConfigurationError(
                f"{field} key",
                key,
                "is reserved: the runtime reads it as a launcher setting, not as a script argument",
                "set launchers through distribution=... (e.g. {'mpi': {'enabled': True}}) and the code "
                "through entry_point/source_dir; rename your own hyperparameter",
            )


def decode(encoded: Mapping[str, str]) -> dict[str, Any]:
    """Inverse of :func:`encode`; a value that is not JSON text is kept as the raw string
    (requests written by other tools, e.g. the console, are not always JSON-encoded)."""
    decoded: dict[str, Any] = {}
    for key, value in encoded.items():
        try:
            decoded[key] = json.loads(value)
        except (TypeError, ValueError):
            decoded[key] = value
    return decoded


def check_limits(encoded: Mapping[str, str], field: str = "hyperparameters") -> None:
    """CreateTrainingJob's limits on ``HyperParameters``, applied to the encoded (wire) map."""
    if len(encoded) > contract.MAX_HYPERPARAMETERS:
        raise ConfigurationError(
            field,
            f"<{len(encoded)} entries>",
            f"CreateTrainingJob accepts at most {contract.MAX_HYPERPARAMETERS} hyperparameters "
            "(including the sagemaker_* keys smlaunch adds)",
            "group related values into one dict-valued hyperparameter or read them from a config file",
        )
    for key, value in encoded.items():
        if not key or len(key) > contract.MAX_HYPERPARAMETER_KEY_CHARS:
            raise ConfigurationError(
                f"{field} key",
                key,
                f"key must be 1 to {contract.MAX_HYPERPARAMETER_KEY_CHARS} characters (has {len(key)})",
                "use a shorter hyperparameter name",
            )
        if len(value) > contract.MAX_HYPERPARAMETER_VALUE_CHARS:
            raise ConfigurationError(
                f"{field}[{key!r}]",
                value[:60] + "...",
                f"JSON-encoded value is {len(value)} characters; CreateTrainingJob allows "
                f"{contract.MAX_HYPERPARAMETER_VALUE_CHARS}",
                "put large values in a file in source_dir or an input channel and pass its path",
            )
        for part, text in (("key", key), ("value", value)):
            if not HYPERPARAMETER_PATTERN.fullmatch(text):
                raise ConfigurationError(
                    f"{field} key" if part == "key" else f"{field}[{key!r}]",
                    key if part == "key" else value,
                    f"the {part} sent holds a line break, which CreateTrainingJob refuses in "
                    "hyperparameters (its pattern is one line)",
                    "pass the text without line breaks, or put it in a file and pass its path",
                )
