"""A stand-in for cuda-python (tests only): put ``tests/stub_driver`` first on ``sys.path``."""
