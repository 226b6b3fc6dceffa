"""What a job's image runs under the Docker executor: smlaunch's runtime (``train``), or, for a
request with a ``ContainerEntrypoint`` (a ModelTrainer job's ``sm_train.sh``) in an image without
smlaunch, that entry point, as SageMaker runs it.

smlaunch's images are known by their label; any other image is probed once per image id (per
process) with a throwaway container, for ``train`` and for ``smlaunch-train``.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from smlaunch.contract import v3 as v3_contract
from smlaunch.sdk.backends.emulated.executors.docker.containers import docker_errors
from smlaunch.sdk.errors import ConfigurationError

LABEL_OURS = "smlaunch.image"
"""Set by container/Dockerfile.* on smlaunch's images: they are known to provide ``train``."""
TRAIN_CHECKED: dict[str, bool] = {}
RUNTIME_CHECKED: dict[str, bool] = {}


def probe(client: Any, image: str, command: str) -> bool:
    """Whether ``sh -c command`` succeeds in ``image`` (a throwaway container, no network)."""
    errors = docker_errors()
    try:
        client.containers.run(
            image,
            entrypoint=["/bin/sh", "-c"],
            command=[command],
            remove=True,
            network_mode="none",
            stdout=True,
            stderr=True,
        )
        return True
    except errors.ContainerError:
        return False
    except errors.APIError as exc:
        raise ConfigurationError(
            "image_uri",
            image,
            f"could not check what it runs ({exc})",
            "use an image with /bin/sh and a `train` command, e.g. one built by container/build.sh",
        ) from None


def has_runtime(client: Any, image: str, found: Any) -> bool:
    """Whether ``image`` holds smlaunch's runtime: smlaunch's images (labelled by build.sh), else
    probed once per image id for ``smlaunch-train``."""
    if LABEL_OURS in (getattr(found, "labels", None) or {}):
        return True
    image_id = str(getattr(found, "id", image))
    if image_id not in RUNTIME_CHECKED:
        RUNTIME_CHECKED[image_id] = probe(client, image, "command -v smlaunch-train")
    return RUNTIME_CHECKED[image_id]


def require_train(client: Any, image: str, found: Any) -> None:
    """Fail unless ``image`` runs ``train``. smlaunch's images (labelled by build.sh) are trusted;
    others are probed once per image id with ``sh -c 'command -v train'``."""
    labels = getattr(found, "labels", None) or {}
    if LABEL_OURS in labels:
        return
    image_id = str(getattr(found, "id", image))
    if image_id not in TRAIN_CHECKED:
        TRAIN_CHECKED[image_id] = probe(client, image, "command -v train")
    if not TRAIN_CHECKED[image_id]:
        raise ConfigurationError(
            "image_uri",
            image,
            "has no `train` command on its PATH (SageMaker runs `docker run IMAGE train`)",
            "install smlaunch in the image (container/Dockerfile.cpu does) or the SageMaker training toolkit",
        )


def own_drivers_copy(data_dir: Path) -> None:
    """Make a host's ``sm_drivers`` channel view below ``data_dir`` (real directories whose files
    link to the read-only originals) hold copies instead: ``sm_train.sh`` starts with ``chmod +x``
    on itself, which a read-only mount refuses."""
    view = data_dir / v3_contract.DRIVERS_CHANNEL
    if not view.is_dir():
        return
    for path in sorted(view.rglob("*")):
        if path.is_symlink():
            original = path.resolve()
            path.unlink()
            shutil.copy2(original, path)
