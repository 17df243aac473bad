"""Does a .npy file read back as written on this machine? A diagnostic for the GPU machine, where typed
evidence columns twice read back with null bytes in their header (numpy 2.5.2, 2026-12-02).

Writes N arrays (int64, float64 and fixed-width unicode of random sizes) with np.save, reads each straight
back with np.load and compares the file's bytes with the bytes np.save gives in memory. It does this in a
plain process, then again after CUDA is initialised through torch (the failures were in GPU test
processes). Each mismatch prints the first differing offset, the bytes there, and whether a second read
later gives the right bytes (a read-side race) or not (the file itself is wrong).

    python scripts/npy_roundtrip_check.py [--n 2000] [--dir DIR ...]
"""
from __future__ import annotations

import argparse
import io
import tempfile
import time
from pathlib import Path

import numpy as np


def _array(rng: np.random.Generator, i: int) -> np.ndarray:
    n = int(rng.integers(0, 4000))
    kind = i % 3
    if kind == 0:
        return rng.integers(-2**40, 2**40, n)
    if kind == 1:
        return rng.standard_normal(n)
    width = int(rng.integers(1, 6000))
    return np.array(["x" * int(rng.integers(0, width + 1)) for _ in range(min(n, 8))] or ["a"], dtype=f"<U{width}")


def _expected_bytes(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def check(directory: Path, n: int, seed: int, label: str) -> int:
    rng = np.random.default_rng(seed)
    bad = 0
    for i in range(n):
        arr = _array(rng, i)
        path = directory / f"c{i % 16}.npy"
        np.save(path, arr, allow_pickle=False)
        want = _expected_bytes(arr)
        got = path.read_bytes()
        try:
            back = np.load(path, allow_pickle=False)
            loaded = back.dtype == arr.dtype and np.array_equal(back, arr)
        except Exception as exc:  # noqa: BLE001 - the point is to see any failure
            loaded = f"{type(exc).__name__}: {str(exc)[:120]}"
        if got != want or loaded is not True:
            bad += 1
            off = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
            time.sleep(0.2)
            again = path.read_bytes() == want
            print(f"{label} {directory} #{i} {arr.dtype}[{arr.size}]: size {len(got)} (want {len(want)}), first "
                  f"difference at byte {off}: got {got[off:off + 16]!r} want {want[off:off + 16]!r}; load: {loaded}; "
                  f"re-read 0.2 s later {'right' if again else 'still wrong'}")
    print(f"{label} {directory}: {bad} of {n} arrays did not read back as written")
    return bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--dir", type=Path, action="append", default=[])
    a = ap.parse_args()
    dirs = a.dir or [Path(tempfile.mkdtemp(prefix="npy-check-")), Path(tempfile.mkdtemp(prefix="npy-check-", dir="."))]
    print(f"numpy {np.__version__}")
    bad = sum(check(d, a.n, 1, "plain") for d in dirs)
    try:
        import torch

        if torch.cuda.is_available():
            x = torch.randn(1 << 20, device="cuda")
            torch.cuda.synchronize()
            bad += sum(check(d, a.n, 2, "after-cuda") for d in dirs)
            del x
    except ImportError:
        print("torch not importable: the after-CUDA pass was not run")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
