"""localrag: a local, private chat app over your own documents, answering fast on your own hardware.

The engine is UI-free (``localrag.engine``, ``localrag.rag``, ``localrag.rasd``); the Gradio
app lives in ``localrag.ui``; ``python -m localrag --help`` lists the command line.
"""

__version__ = "0.1.0"
