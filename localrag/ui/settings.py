"""The side panel's knobs as one value (``Settings``), handed to every chat call, and what they
become: the mode's options (``option_values``) and the generation limits.

    settings = Settings(mode="speedup", k=8)
    services.request(settings.mode, question, values=settings.option_values(), gen=settings.generation())
"""

from __future__ import annotations

from dataclasses import dataclass

from localrag.app.services import DEFAULT_COLLECTION
from localrag.config import GenerationConfig

DRAFT_AUTO = "auto"  # the registry's draft model for the loaded target
NO_DRAFT = "none"  # retrieval only
MODE_DEFAULT = "mode default"  # the unsupported-answer setting that leaves it to the mode (Grounded refuses)


@dataclass(frozen=True)
class Settings:
    """These defaults are the page's defaults (its controls start from them)."""

    mode: str = "plain"
    collection: str = DEFAULT_COLLECTION
    draft_model: str = DRAFT_AUTO
    temperature: float = 0.0
    max_tokens: int = 256
    k: int = 5
    on_unsupported: str = MODE_DEFAULT  # warn | refuse | the mode's default (warn; Grounded: refuse)
    prefill: str = "exact"  # exact | reuse (approximate: chunks' keys and values from the chunk cache)

    def option_values(self) -> dict[str, object]:
        """The values a mode's options are made from (each mode takes the names it has)."""
        values: dict[str, object] = {"k": int(self.k), "draft": self.draft_model or DRAFT_AUTO,
                                     "prefill": self.prefill or "exact"}
        if self.on_unsupported != MODE_DEFAULT:
            values["on_unsupported"] = self.on_unsupported
        return values

    def generation(self) -> GenerationConfig:
        return GenerationConfig(max_tokens=int(self.max_tokens), temperature=float(self.temperature))
