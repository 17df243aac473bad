"""The ``proton`` program kind: a Triton kernel annotated with Proton scopes, measured by Proton."""
