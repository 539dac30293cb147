"""Models: architectures as graph descriptions, the Model (an architecture plus sizes), presets and
Hugging Face ``config.json`` loading (field readers, one adapter per family)."""

__all__: list[str] = []
