"""The engine choice without a Ray cluster: Ray stays an optional import (one line naming the extra
when it is missing), and options that belong to one engine are refused on the other."""
from __future__ import annotations

import sys

import pytest

from argus_rt.cli import main
from argus_rt.engines import EngineError, open_engine
from argus_rt.query import query
from test_query import write_program_dir
from test_runtime_standins import demo_program, standins  # noqa: F401  (fixture)


@pytest.fixture
def no_ray(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError


def test_ray_engine_without_ray_is_one_line_naming_the_extra(no_ray, standins, tmp_path, capsys):
    with pytest.raises(EngineError, match=r"^the ray engine needs Ray, which is not installed here: "
                                          r"pip install 'argus-rt\[ray\]'$"):
        query(demo_program(), "gemm", ["latency"], workspace=tmp_path / "ws", engine="ray")
    prog = write_program_dir(tmp_path / "prog", demo_program())
    assert main(["query", str(prog), "--region", "gemm", "--workspace", str(tmp_path / "ws"), "--engine", "ray"]) == 2
    err = capsys.readouterr().err
    assert err == "argus query: the ray engine needs Ray, which is not installed here: pip install 'argus-rt[ray]'\n"


def test_engine_options_belong_to_their_engine(standins, tmp_path, capsys):
    prog = write_program_dir(tmp_path / "prog", demo_program())
    base = ["query", str(prog), "--region", "gemm", "--workspace", str(tmp_path / "ws")]
    assert main([*base, "--address", "auto"]) == 2
    assert "--address names a Ray cluster; it needs --engine ray" in capsys.readouterr().err
    assert main([*base, "--collect-resources", '{"num_gpus": 0}']) == 2
    assert "--collect-resources is a Ray engine option" in capsys.readouterr().err
    with pytest.raises(EngineError, match="unknown engine 'dask'; valid: embedded, ray"):
        open_engine("dask", None)
    with pytest.raises(EngineError, match="the embedded engine takes no option"):
        open_engine("embedded", None, ship="never")
    with pytest.raises(EngineError, match="cpu_pool='thread' is an embedded engine option"):
        open_engine("ray", None, cpu_pool="thread")
