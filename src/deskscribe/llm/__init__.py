"""Local language models for meeting notes: OpenAI-compatible chat endpoints (Ollama, LM
Studio, llama.cpp's server, vLLM, a remote provider) and an embedded llama.cpp server
(``embedded``), and the notes written from a transcript (``notes``). No Qt, no web framework:
front ends reach it through ``service.notes``."""
