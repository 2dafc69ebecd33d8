"""DeskScribe: private, fast desktop transcription with Whisper on ONNX Runtime."""

__version__ = "0.1.0"
