"""The engine: one loaded target model, its chat layout, and the decoding modes.

UI-free. The CLI, the Gradio app and the benchmarks all talk to this:

    engine = Engine.load(ModelConfig())               # bundled default model
    gen = engine.complete("The capital of France is", GenerationConfig(max_tokens=16))
    for piece in gen: print(piece, end="")
    gen = engine.chat([{"role": "user", "content": "Hi!"}], GenerationConfig())
"""

from __future__ import annotations

from localrag.backends.base import Backend
from localrag.config import GenerationConfig, ModelConfig
from localrag.generation import Decoder, Generation, plain_decoder
from localrag.models import ModelError, resolve
from localrag.prompts import ChatPrompt, Message


def load_backend(config: ModelConfig) -> Backend:
    """Load `config.model` with the backend its format needs."""
    if config.backend not in ("llamacpp", "hf"):
        raise ModelError(f"unknown backend {config.backend!r}; use 'llamacpp' or 'hf'")
    spec = resolve(config.model)
    if spec.format == "gguf" and config.backend == "llamacpp":
        from localrag.backends.llamacpp import LlamaCppBackend

        return LlamaCppBackend(config, spec)
    try:
        from localrag.backends.hf import HFBackend
    except ModuleNotFoundError as exc:
        raise ModelError(f"{spec.path}: transformers models need the transformers backend, which is not available") from exc
    return HFBackend(config, spec)


class Engine:
    """A target model plus how to prompt it. Decoding modes plug in as decoders."""

    def __init__(self, backend: Backend):
        self.backend = backend
        self.prompt = ChatPrompt.from_backend(backend)

    @classmethod
    def load(cls, config: ModelConfig) -> Engine:
        return cls(load_backend(config))

    @property
    def model_name(self) -> str:
        return self.backend.name

    def encode_prompt(self, text: str) -> list[int]:
        """Tokenize a rendered prompt; BOS is added unless the text already carries it."""
        has_bos_text = bool(self.prompt.bos_token) and text.startswith(self.prompt.bos_token)
        add_bos = getattr(self.backend, "add_bos", True) and not has_bos_text
        return self.backend.tokenize(text, add_special=add_bos, parse_special=True)

    def complete(
        self,
        text: str,
        config: GenerationConfig,
        decoder: Decoder = plain_decoder,
        decoder_stats: dict | None = None,
    ) -> Generation:
        """Raw completion of `text` (no chat template)."""
        return Generation(self.backend, self.encode_prompt(text), decoder, config, decoder_stats)

    def chat(
        self,
        messages: list[Message],
        config: GenerationConfig,
        decoder: Decoder = plain_decoder,
        decoder_stats: dict | None = None,
    ) -> Generation:
        """Reply to a conversation using the model's chat template (or a transcript)."""
        text = self.prompt.render(messages)
        config = config.with_(stop=tuple(config.stop) + self.prompt.stop)
        return Generation(self.backend, self.encode_prompt(text), decoder, config, decoder_stats)

    def close(self) -> None:
        self.backend.close()


