"""The app's configuration: one frozen value from the launcher (defaults or the command line) down
to every part that reads it: the server, the target model, the index, and the modes' own configs
(the decoder's, Grounded's, the evidence check's: ``AnswerConfig``).

    cfg = AppConfig(index=IndexConfig(index_dir=Path("~/idx")), answer=AnswerConfig(rasd=RasdConfig(max_nodes=32)))
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from localrag.answer import AnswerConfig
from localrag.backends.endpoint import EndpointConfig
from localrag.config import ModelConfig, default_data_dir, default_index_dir
from localrag.rag.config import IndexConfig


@dataclass(frozen=True)
class AppConfig:
    """Everything the launcher hands to the app."""

    host: str = "127.0.0.1"
    port: int = 7860
    share: bool = False
    model: ModelConfig = field(default_factory=ModelConfig)
    endpoint: EndpointConfig | None = None  # the answer model on a serving engine instead of ``model``
    data_dir: Path = field(default_factory=default_data_dir)
    index: IndexConfig = field(default_factory=lambda: IndexConfig.from_env(index_dir=default_index_dir()))
    answer: AnswerConfig = field(default_factory=AnswerConfig)
    max_waiting: int = 8  # requests that may wait for the model; past it they are refused (HTTP 429)
    api: bool = True  # serve the HTTP API and MCP tools beside the UI
    api_key: str | None = None  # when set, every API and MCP call must carry it (LOCALRAG_API_KEY)

    @property
    def index_dir(self) -> Path:
        return Path(self.index.index_dir)

    @property
    def upload_temp_dir(self) -> Path:
        """Where Gradio receives uploads (GRADIO_TEMP_DIR) before they are staged and ingested."""
        return Path(self.data_dir) / "tmp"
