"""The minimal Triton program of docs/programs.md: y = alpha * x, one block of BLOCK elements per program."""
import triton
import triton.language as tl

from argus_rt import triton_regions as argus

N, BLOCK, ALPHA = 1 << 20, 1024, 0.5


@triton.jit
def scale_kernel(x, y, n, alpha, BLOCK: tl.constexpr):
    argus.begin("scale")
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    argus.begin("scale/load")
    v = tl.load(x + offs, mask=offs < n)
    argus.end("scale/load")
    argus.begin("scale/store")
    tl.store(y + offs, v * alpha, mask=offs < n)
    argus.end("scale/store")
    argus.end("scale")


def make_inputs(seed=None) -> dict:
    """Fresh random inputs on the GPU, named after the kernel's arguments."""
    import torch

    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed) if seed is not None else gen.seed()
    return {"x": torch.randn(N, device="cuda", generator=gen), "y": torch.empty(N, device="cuda")}


def run(compiled, inputs: dict, probe_out=None):
    """Poison the output, launch ``compiled`` (plus Argus's buffer, if given), check every element was written."""
    import torch

    y = inputs["y"]
    y.fill_(float("nan"))
    args = [inputs["x"], y, N, ALPHA] + ([probe_out] if probe_out is not None else [])
    launch = compiled[(triton.cdiv(N, BLOCK),)]  # grid: as for the @triton.jit function itself
    launch(*args)
    torch.cuda.synchronize()
    if torch.isnan(y).any():
        raise RuntimeError("scale_kernel left unwritten (NaN) elements in y")
    return y


def reference(x):
    """Plain PyTorch."""
    return x * ALPHA
