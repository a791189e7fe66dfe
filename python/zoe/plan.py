"""The plan of a run (include/zoe/plan.h) as a dict: what each GPU and host will hold and how
long a step will take, before anything is allocated."""
from __future__ import annotations

import json
from typing import Any

from . import _zoe
from ._options import as_flags


def plan(*, ranks: int = 1, **options: Any) -> dict[str, Any]:
    """The plan of the run that ``zoe-train`` would make of ``options`` (keyword arguments named
    like its flags, ``hardware="dgx2"`` among them) on ``ranks`` ranks: ``zoe-plan --json``'s
    object. Raises :class:`zoe.InvalidArgument` with the library's message for a bad option."""
    return json.loads(_zoe.plan_json(as_flags(options), int(ranks)))


def train_config(*, ranks: int = 1, **options: Any) -> dict[str, Any]:
    """The validated configuration of ``options`` on ``ranks`` ranks, keyed by option name (what
    ``zoe-train --config`` reads)."""
    return json.loads(_zoe.config_json(as_flags(options), int(ranks)))
