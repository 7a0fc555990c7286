"""Model families as plug-ins: one package per family, each registering itself (``registry.py``)."""
