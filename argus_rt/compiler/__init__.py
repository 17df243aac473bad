"""Program transforms and builds: CUDA builds with a content-hash cache (``cuda``), Triton
compilation and TTGIR discovery (``triton_discovery``, ``ttgir``). Import the submodule you need."""
