"""The engine: one loaded target model, its chat layout, and the decoding modes.

UI-free. The CLI, the Gradio app and the benchmarks all talk to this:

    engine = Engine.load(ModelConfig())               # bundled default model
    gen = engine.complete("The capital of France is", GenerationConfig(max_tokens=16))
    for piece in gen: print(piece, end="")
    gen = engine.chat([{"role": "user", "content": "Hi!"}], GenerationConfig())
    ids = engine.chat_tokens([{"role": "user", "content": "Hi!"}])   # the same, its length known first
    gen = engine.reply(ids, GenerationConfig())
"""

from __future__ import annotations

from localrag.backends.base import Backend
from localrag.backends.chunk_reuse import ChunkReuse
from localrag.backends.loader import load_backend
from localrag.config import GenerationConfig, ModelConfig
from localrag.generation import Decoder, Generation, PlainDecoder
from localrag.prompts import ChatPrompt, Message


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
        add_bos = self.backend.add_bos and not has_bos_text
        return self.backend.tokenize(text, add_special=add_bos, parse_special=True)

    def complete(
        self,
        text: str,
        config: GenerationConfig,
        decoder: Decoder | None = None,
    ) -> Generation:
        """Raw completion of `text` (no chat template); plain decoding unless a decoder is given."""
        return Generation(self.backend, self.encode_prompt(text), decoder or PlainDecoder(), config)

    def chat(
        self,
        messages: list[Message],
        config: GenerationConfig,
        decoder: Decoder | None = None,
    ) -> Generation:
        """Reply to a conversation using the model's chat template (or a transcript)."""
        return self.reply(self.chat_tokens(messages), config, decoder)

    def chat_tokens(self, messages: list[Message]) -> list[int]:
        """A conversation laid out with the chat template (or a transcript) and tokenized."""
        return self.encode_prompt(self.prompt.render(messages))

    def reply(
        self,
        prompt_tokens: list[int],
        config: GenerationConfig,
        decoder: Decoder | None = None,
        reuse: ChunkReuse | None = None,
    ) -> Generation:
        """Reply to a conversation already laid out and tokenized by ``chat_tokens`` (for a caller
        that needs the prompt's length first: rendering the template takes ~1.5 ms). ``reuse``: the
        approximate prefill of its chunks (None: exact)."""
        config = config.with_(stop=tuple(config.stop) + self.prompt.stop)
        return Generation(self.backend, prompt_tokens, decoder or PlainDecoder(), config, reuse=reuse)

    def close(self) -> None:
        self.backend.close()


