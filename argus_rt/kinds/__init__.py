"""Program kinds: everything Argus knows about one kind of GPU program lives in that kind's package.

``cuda`` (:mod:`argus_rt.kinds.cuda`) and ``triton`` (:mod:`argus_rt.kinds.triton`) each own how a
program of that kind is built, its variants (trace-free, marker-only, traced, probe), its checked run
and the decoders of the device buffers its variants write. Tool adapters (:mod:`argus_rt.backends`)
sit above the kinds and call into them; the kinds import no tool adapter, only the adapter contract
(:mod:`argus_rt.backends.base`) for its error types. Import the submodule you need: this package
imports nothing, so that no kind's compiler (torch, Triton) loads before it is used.
"""
