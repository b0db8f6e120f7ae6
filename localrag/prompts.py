"""Chat prompts: render messages with the model's own chat template (from the
GGUF metadata), or a plain transcript for base models that have none.

    prompt = ChatPrompt.from_backend(backend)
    text = prompt.render([{"role": "user", "content": "Hi"}])
    stops = prompt.stop
"""

from __future__ import annotations

from dataclasses import dataclass

from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from localrag.backends.base import Backend

Message = dict[str, str]

# Base models (no template) continue a transcript; stop before they write the user's next turn.
FALLBACK_STOPS = ("\nUser:", "\nuser:", "\n\nUser")


@dataclass(frozen=True)
class ChatPrompt:
    """How one model wants a conversation laid out."""

    template: str | None
    bos_token: str = ""
    eos_token: str = ""

    @classmethod
    def from_backend(cls, backend: Backend) -> ChatPrompt:
        template = backend.chat_template()
        bos = eos = ""
        if template:
            bos = _token_text(backend, "tokenizer.ggml.bos_token_id")
            eos = _token_text(backend, "tokenizer.ggml.eos_token_id")
        return cls(template=template, bos_token=bos, eos_token=eos)

    @property
    def has_template(self) -> bool:
        return bool(self.template)

    @property
    def stop(self) -> tuple[str, ...]:
        """Stop strings for this layout (EOG tokens stop templated models already)."""
        return () if self.has_template else FALLBACK_STOPS

    def render(self, messages: list[Message]) -> str:
        """The full prompt text, ending where the assistant's reply begins."""
        if self.template:
            formatter = Jinja2ChatFormatter(self.template, eos_token=self.eos_token, bos_token=self.bos_token)
            return formatter(messages=messages).prompt
        return render_transcript(messages)


def render_transcript(messages: list[Message]) -> str:
    """Plain-completion layout for base models: a labelled transcript."""
    lines = []
    for m in messages:
        role = m["role"]
        if role == "system":
            lines.append(m["content"].strip() + "\n")
        else:
            label = "User" if role == "user" else "Assistant"
            lines.append(f"{label}: {m['content'].strip()}")
    lines.append("Assistant:")
    return "\n".join(lines)


def _token_text(backend: Backend, key: str) -> str:
    value = backend.meta(key)
    if value is None or not value.lstrip("-").isdigit():
        return ""
    return backend.token_bytes(int(value), special=True).decode("utf-8", errors="replace")
