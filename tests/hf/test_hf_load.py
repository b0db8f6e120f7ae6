"""Loading the transformers backend: device/dtype choice, local HF folders, vocabulary checks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from localrag.backends.hf import HFBackend, pick_device, pick_dtype, token_piece_table
from localrag.backends.loader import load_backend
from localrag.config import ModelConfig
from localrag.models import ModelError
from localrag.rasd.draft import check_vocab, load_draft
from tests.hf.conftest import has_gpu, tiny_backend, tiny_model, tiny_tokenizer


def test_device_and_dtype_choice():
    dev = pick_device()
    assert dev.type == ("cuda" if torch.cuda.is_available() else "mps" if has_gpu() else "cpu")
    assert pick_device("cpu") == torch.device("cpu")
    assert pick_dtype(torch.device("cpu")) == torch.float32
    assert pick_dtype(torch.device("cuda")) in (torch.bfloat16, torch.float16) or not torch.cuda.is_available()
    assert pick_dtype(torch.device("mps")) == torch.float16
    assert pick_dtype(torch.device("cpu"), "bf16") == torch.bfloat16
    assert pick_dtype(torch.device("cpu"), "float16") == torch.float16
    with pytest.raises(ModelError, match="unknown dtype"):
        pick_dtype(torch.device("cpu"), "int3")
    if not torch.cuda.is_available():
        with pytest.raises(ModelError, match="CUDA is not available"):
            pick_device("cuda")


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    """A tiny random Llama saved as a local Hugging Face folder (config.json + weights + tokenizer)."""
    folder = tmp_path_factory.mktemp("tiny-llama")
    tiny_model(seed=7).save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    return folder


def test_local_hf_folder_loads_through_load_backend(tiny_folder):
    be = load_backend(ModelConfig(model=str(tiny_folder), device="cpu"))  # a folder always loads in transformers
    assert isinstance(be, HFBackend) and be.dtype == torch.float32 and be.device.type == "cpu"
    ref = HFBackend.from_model(tiny_model(seed=7), tiny_tokenizer())
    ids = be.tokenize("w1 w2 w3", add_special=True)
    assert ids == [4, 5, 6] and be.detokenize(ids) == "w1w2w3" and not be.add_bos
    np.testing.assert_allclose(be.prefill(ids), ref.prefill(ids), atol=1e-5)
    assert be.is_eog(2) and not be.is_eog(4)
    assert be.meta("tokenizer.ggml.eos_token_id") == "2"


def test_dtype_override(tiny_folder):
    be = HFBackend(ModelConfig(model=str(tiny_folder), backend="hf", device="cpu", dtype="bf16"))
    assert be.dtype == torch.bfloat16
    rows = be.eval_tree([4, 5, 6], [-1, 0, 0])
    assert rows.dtype == np.float32 and np.isfinite(rows).all()


def test_unknown_backend_and_unloadable_folder(tmp_path):
    with pytest.raises(ModelError, match="unknown backend"):
        load_backend(ModelConfig(model=str(tmp_path), backend="onnx"))
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ModelError, match="transformers could not load"):
        load_backend(ModelConfig(model=str(tmp_path), backend="hf"))


def test_transformers_draft_with_same_vocab_is_accepted(tiny_folder):
    target = tiny_backend(seed=1)
    draft = load_draft(target, str(tiny_folder))  # a small transformers draft (different weights)
    assert isinstance(draft, HFBackend) and draft.vocab_pieces() == target.vocab_pieces()


def test_draft_with_other_vocab_is_refused(tiny_folder):
    words = [f"w{i}" for i in range(61)]
    words[10] = "other"
    target = tiny_backend(seed=1, tokenizer=tiny_tokenizer(words))
    with pytest.raises(ModelError, match="token 13 .*must share the target's tokenizer"):
        load_draft(target, str(tiny_folder))
    small = tiny_backend(seed=2, vocab_size=60)
    with pytest.raises(ModelError, match="vocabulary sizes differ"):
        check_vocab(target, small)


def test_piece_table_renders_specials_like_llamacpp():
    tok = tiny_tokenizer()
    pieces, specials = token_piece_table(tok, 66)  # 2 padded embedding rows past the tokenizer
    assert pieces[1] == b"" and specials[1] == b"<s>"  # control tokens: empty unless special=True
    assert pieces[5] == specials[5] == b"w2"
    assert pieces[64:] == [b"", b""]


def test_sliding_window_models_are_refused_clearly():
    """Windowed layers cache only the last W positions: tree compaction is not defined for them yet."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    config = Gemma3TextConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, sliding_window=16, layer_types=["sliding_attention", "full_attention"],
    )  # fmt: skip
    with pytest.raises(ModelError, match="sliding-window"):
        HFBackend.from_model(Gemma3ForCausalLM(config), tiny_tokenizer())
