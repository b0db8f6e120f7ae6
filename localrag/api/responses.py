"""OpenAI response bodies: a chat completion, its stream chunks, the usage block (with the
speed stats), embeddings and the model list. Pure functions of the typed answer.

localrag's additions ride in extra fields that OpenAI clients keep: ``usage.speedup`` (mode,
tokens/s, accepted tokens per step, speedup over plain decoding, time waited in line) and, for a
grounded answer, ``localrag`` (citations, supported, what was searched, sentence evidence).
"""

from __future__ import annotations

import base64
import json
import time
import uuid

import numpy as np

from localrag.api.answering import ChatReply


def completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex}"


def usage_block(answer: ChatReply) -> dict:
    stats = answer.stats
    gen = stats.generation
    decoder = gen.decoder if gen is not None else None
    speedup = {
        "mode": stats.mode,
        "tokens_per_s": gen.decode_tps if gen is not None else None,
        "prefill_tokens_per_s": gen.prefill_tps if gen is not None else None,
        "steps": gen.steps if gen is not None else None,
        "accepted_tokens_per_step": (decoder.mean_accepted if decoder is not None
                                     else gen.tokens_per_step if gen is not None else None),
        "speedup_vs_plain": decoder.speedup_vs_plain if decoder is not None else 1.0,
        "acceptance_by_source": decoder.acceptance_by_source if decoder is not None else {},
        "waited_s": stats.waited_s,
        "total_s": stats.total_s,
    }
    return {"prompt_tokens": answer.prompt_tokens, "completion_tokens": answer.completion_tokens,
            "total_tokens": answer.prompt_tokens + answer.completion_tokens, "speedup": speedup}


def completion_body(cid: str, created: int, model: str, answer: ChatReply) -> dict:
    body = {"id": cid, "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": answer.text},
                         "finish_reason": answer.finish_reason, "logprobs": None}],
            "usage": usage_block(answer)}
    if answer.grounding is not None:
        body["localrag"] = answer.grounding.to_dict()
    return body


def chunk(cid: str, created: int, model: str, delta: dict, finish_reason: str | None = None) -> dict:
    return {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}]}


def final_chunks(cid: str, created: int, model: str, answer: ChatReply, include_usage: bool) -> list[dict]:
    """The closing chunk (finish reason; the grounding rides on it), then the usage chunk (no choices)
    when the client asked for it with ``stream_options.include_usage``."""
    last = chunk(cid, created, model, {}, answer.finish_reason)
    if answer.grounding is not None:
        last["localrag"] = answer.grounding.to_dict()
    out = [last]
    if include_usage:
        out.append({"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                    "choices": [], "usage": usage_block(answer)})
    return out


def sse(data: dict | str) -> bytes:
    """One server-sent event."""
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"data: {text}\n\n".encode()


def model_list(llms: list[str], embedder: str | None) -> dict:
    created = int(time.time())
    data = [{"id": name, "object": "model", "created": created, "owned_by": "localrag"} for name in llms]
    if embedder:
        data.append({"id": embedder, "object": "model", "created": created, "owned_by": "localrag"})
    return {"object": "list", "data": data}


def embeddings_body(model: str, vectors: np.ndarray, prompt_tokens: int, encoding_format: str = "float") -> dict:
    """``vectors``: one row per input. base64 is the rows' little-endian float32 bytes."""
    rows = np.asarray(vectors, dtype="<f4")
    encoded = ([base64.b64encode(r.tobytes()).decode("ascii") for r in rows] if encoding_format == "base64"
               else [[float(x) for x in r] for r in rows])
    return {"object": "list", "model": model,
            "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(encoded)],
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}}
