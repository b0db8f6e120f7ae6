"""The answering modes, in one registry. A new mode is one file plus one line here.

    mode = get_mode("rasd")                  # by id or alias ("specrag" is Grounded's old name)
    ok, why = mode.available(engine)
    result = mode.answer(answerer, AnswerRequest("What does the report conclude?"))
"""

from __future__ import annotations

from localrag.modes.base import AnswerMode, AnswerRequest
from localrag.modes.grounded import GroundedMode
from localrag.modes.plain import PlainMode
from localrag.modes.speedup import SpeedupMode

MODES: dict[str, AnswerMode] = {m.id: m for m in (PlainMode(), SpeedupMode(), GroundedMode())}
_ALIASES = {alias: m.id for m in MODES.values() for alias in m.aliases}


def mode_names() -> list[str]:
    """Every accepted spelling: the ids, then the aliases (for command-line choices)."""
    return [*MODES, *_ALIASES]


def get_mode(name: str) -> AnswerMode:
    """The mode called `name` (an id or an alias); ValueError naming the choices otherwise."""
    mode = MODES.get(_ALIASES.get(name, name))
    if mode is None:
        raise ValueError(f"unknown mode {name!r}; choose one of {', '.join(MODES)}")
    return mode


__all__ = ["MODES", "AnswerMode", "AnswerRequest", "GroundedMode", "PlainMode", "SpeedupMode", "get_mode", "mode_names"]
