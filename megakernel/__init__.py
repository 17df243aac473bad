"""Persistent megakernel: instruction encoding, tile-DAG builder, reference interpreter, launcher."""
