"""The generate CLI: argument checks, and a clear refusal without a GPU (it never falls back silently)."""
import pytest
import torch

from tinyllama import generate


def test_bad_arguments_are_refused():
    with pytest.raises(SystemExit) as exc:
        generate.main(["--tokens", "0"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit):
        generate.main(["--backend", "tensorrt"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU refusal")
def test_without_gpu_it_says_so(capsys):
    assert generate.main(["--backend", "eager", "--tokens", "2"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["megakernel", "cudagraph"])
def test_generate_cli_runs(backend, capsys):
    assert generate.main(["--backend", backend, "--tokens", "8", "--prompt-len", "4"]) == 0
    out = capsys.readouterr().out
    assert f"backend={backend}" in out and "ms/token=" in out
