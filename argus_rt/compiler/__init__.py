"""CUDA builds with a content-hash cache (``cuda``). Import the submodule you need."""
