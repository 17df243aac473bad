"""Regenerate the megakernel program's generated files from megakernel/ (its single source of truth).

    python examples/megakernel/generate.py          # rewrite regions.json and the two headers
    python examples/megakernel/generate.py --check  # exit 1 if a committed file is stale

``regions.json`` comes from megakernel/regions.py, ``megakernel_params.h`` from megakernel/params.py
and ``megakernel_regions.h`` from the same region tree: the files megakernel/build.py writes into its
build directory. Argus builds the kernel from this directory, so they are committed here
(tests/test_megakernel_argus.py fails when they fall behind).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from argus_rt.fsutil import atomic_write_text  # noqa: E402
from megakernel.params import params_header  # noqa: E402
from megakernel.regions import region_tree  # noqa: E402

HERE = Path(__file__).resolve().parent


def generated_files() -> dict[str, str]:
    """{file name in this directory: its text}."""
    return {
        "regions.json": json.dumps(region_tree().to_manifest(), indent=2, sort_keys=True),
        "megakernel_params.h": params_header(),
        "megakernel_regions.h": region_tree().cuda_defines(),
    }


def stale_files() -> list[str]:
    return [name for name, text in generated_files().items()
            if not (HERE / name).is_file() or (HERE / name).read_text(encoding="utf-8") != text]


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        stale = stale_files()
        if stale:
            print(f"stale: {', '.join(stale)}; run python examples/megakernel/generate.py", file=sys.stderr)
            return 1
        return 0
    if argv:
        print(f"unknown arguments {argv}; valid: none or --check", file=sys.stderr)
        return 2
    for name, text in generated_files().items():
        atomic_write_text(HERE / name, text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
