"""Channels a host delivers itself: what the agent decides for them, written into the host's tree.

Where hosts run on another machine than their agent (the Kubernetes executor's pods), a FastFile
mount or a Pipe FIFO made by the agent would be in the wrong place: the script must read it on its
own host. There the agent still lists each such channel and decides every host's share
(:meth:`smlaunch.sdk.backends.emulated.data.JobData.stage`, as for every channel), but instead of
delivering it, writes the decision into the host's tree at :data:`PLAN_FILE`; the host, once it
has its tree, delivers them with the same code the agent would have run
(:meth:`~smlaunch.sdk.backends.emulated.data.JobData.deliver_handed_off`). Plain data only: no
listing, no I/O but reading and writing the one file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from smlaunch.contract.transfer.engine import ObjectInfo
from smlaunch.sdk.request.spec import Channel

PLAN_FILE = ".smlaunch/channels.json"
"""Below a host's ``/opt/ml``: the channels it delivers itself (absent: none)."""


class HandedObject(BaseModel):
    """One object of a host's share, as :class:`~smlaunch.contract.transfer.engine.ObjectInfo`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    uri: str
    rel: str
    size: int
    etag: str | None = None

    def info(self) -> ObjectInfo:
        return ObjectInfo(self.uri, self.rel, self.size, self.etag)


class HandedOffChannel(BaseModel):
    """A channel one host delivers itself: the channel as requested, the mode it is delivered in,
    and the host's share of its objects (sharding, manifests already applied by the agent)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    channel: Channel
    mode: Literal["FastFile", "Pipe"]
    objects: tuple[HandedObject, ...]

    def infos(self) -> list[ObjectInfo]:
        return [item.info() for item in self.objects]


class HandOffPlan(BaseModel):
    """Every channel one host delivers itself, in the job's channel order."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    channels: tuple[HandedOffChannel, ...] = ()


def handed_off(channel: Channel, mode: str, objects: list[ObjectInfo]) -> HandedOffChannel:
    """The entry of one host's plan for ``channel`` delivered in ``mode`` from ``objects``."""
    share = tuple(HandedObject(uri=o.uri, rel=o.rel, size=o.size, etag=o.etag) for o in objects)
    return HandedOffChannel(channel=channel, mode=mode, objects=share)  # type: ignore[arg-type]


def write_plan(base: Path, plan: HandOffPlan) -> Path:
    """Write ``plan`` into the host tree at ``base`` (atomically: a reader never sees half)."""
    path = base / PLAN_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(plan.model_dump_json(exclude_none=True), encoding="utf-8")
    os.replace(partial, path)
    return path


def read_plan(base: Path) -> HandOffPlan:
    """The plan in the host tree at ``base``; an empty one when the agent wrote none."""
    path = base / PLAN_FILE
    if not path.is_file():
        return HandOffPlan()
    return HandOffPlan.model_validate(json.loads(path.read_text(encoding="utf-8")))
