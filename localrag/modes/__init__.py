"""The answering modes, in one registry. A new mode is one file plus one line here.

    mode = get_mode("speedup")               # by id (old spellings of stored chats and old clients too)
    ok, why = mode.available(answerer)
    result = mode.answer(answerer, AnswerRequest("What does the report conclude?",
                                                 options=mode.options({"k": 8})))
"""

from __future__ import annotations

from localrag.modes.base import AnswerMode, AnswerRequest, ModeOptions, option, option_fields
from localrag.modes.grounded import GroundedMode, GroundedOptions
from localrag.modes.plain import PlainMode, PlainOptions
from localrag.modes.speedup import SpeedupMode, SpeedupOptions

MODES: dict[str, AnswerMode] = {m.id: m for m in (PlainMode(), SpeedupMode(), GroundedMode())}


def get_mode(name: str, modes: dict[str, AnswerMode] | None = None) -> AnswerMode:
    """The mode called ``name``: an id, or an old spelling (``rasd``, ``specrag``) that a stored chat
    or an old client sends; ValueError naming the choices otherwise."""
    registry = MODES if modes is None else modes
    for mode in registry.values():
        if name == mode.id or name in mode.aliases:
            return mode
    raise ValueError(f"unknown mode {name!r}; choose one of {', '.join(registry)}")


__all__ = ["MODES", "AnswerMode", "AnswerRequest", "GroundedMode", "GroundedOptions", "ModeOptions", "PlainMode",
           "PlainOptions", "SpeedupMode", "SpeedupOptions", "get_mode", "option", "option_fields"]
