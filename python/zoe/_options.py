"""Keyword arguments as zoe-train's flags: ``micro_batch=4`` is ``--micro-batch=4``.

The library parses them (``zoe_train_config_parse_args``), so names, ranges and messages are
zoe-train's own, written once in engine/config/config.c.
"""
from __future__ import annotations

import os
from typing import Any, Mapping


def as_flags(options: Mapping[str, Any]) -> list[str]:
    """``{"micro_batch": 4, "recompute": True, "split": (98, 2)}`` as
    ``["--micro-batch=4", "--recompute=true", "--split=98,2"]``."""
    flags = []
    for name, value in options.items():
        if value is None:
            continue  # the default
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, float):
            text = repr(value)  # the shortest decimal that reads back as this double
        elif isinstance(value, os.PathLike):
            text = os.fspath(value)
        elif isinstance(value, (tuple, list)):
            text = ",".join(str(v) for v in value)
        else:
            text = str(value)
        flags.append(f"--{name.replace('_', '-')}={text}")
    return flags
