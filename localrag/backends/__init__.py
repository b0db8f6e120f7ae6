"""Model backends: the Backend protocol (base), llama.cpp (llamacpp) and transformers (hf)."""
