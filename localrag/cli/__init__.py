"""The command line's own commands (the documents' commands live in ``localrag.rag``, ``serve`` in
``localrag.api``, the benchmarks in ``localrag.bench``; ``localrag.__main__`` assembles them all):
``core`` (models, generate, chat) and ``ask`` (one question over the documents, any mode)."""
