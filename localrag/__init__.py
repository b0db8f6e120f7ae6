"""localrag: a local, private chat app over your own documents, answering fast on your own hardware.

The engine is UI-free (``localrag.engine``, ``localrag.rag``, ``localrag.rasd``); the Gradio
app is started by ``localrag.launch`` (the page in ``localrag.ui``, the API in ``localrag.api``, both on ``localrag.app``); ``python -m localrag --help`` lists the command line.
"""

__version__ = "0.1.0"
