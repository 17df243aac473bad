"""The shared build cache (argus_rt.build_cache): keys, hits, atomic publish, concurrent builders (CPU)."""
from __future__ import annotations

import json
import multiprocessing
import time
from pathlib import Path

import pytest

from argus_rt.build_cache import SPEC_FILE, BuildCacheError, BuildSpec, entry_dir, fetch_or_build


def _source(tmp_path: Path, text: str = "int x;\n") -> Path:
    src = tmp_path / "src" / "k.cu"
    src.parent.mkdir(exist_ok=True)
    src.write_text(text)
    return src


def _writer(text: str):
    def build(staging: Path) -> None:
        (staging / "out.bin").write_text(text)
    return build


def test_key_covers_file_bytes_generated_files_and_params(tmp_path):
    src = _source(tmp_path)
    base = BuildSpec("mod", files=[src], generated={"gen.h": "#define A 1\n"}, params={"flags": ["-O3"]})
    same = BuildSpec("mod", files=[src], generated={"gen.h": "#define A 1\n"}, params={"flags": ["-O3"]})
    assert base.key() == same.key()
    keys = {base.key(),
            BuildSpec("mod", files=[src], generated={"gen.h": "#define A 2\n"}, params={"flags": ["-O3"]}).key(),
            BuildSpec("mod", files=[src], generated={"gen.h": "#define A 1\n"}, params={"flags": ["-O2"]}).key(),
            BuildSpec("other", files=[src], generated={"gen.h": "#define A 1\n"}, params={"flags": ["-O3"]}).key()}
    assert len(keys) == 4
    src.write_text("int y;\n")
    assert BuildSpec("mod", files=[src], generated={"gen.h": "#define A 1\n"}, params={"flags": ["-O3"]}).key() \
        not in keys


def test_build_once_then_hit_with_generated_files_and_spec(tmp_path):
    spec = BuildSpec("ns/mod", files=[_source(tmp_path)], generated={"gen.h": "#define A 1\n"}, params=[1, 2])
    seen = []

    def build(staging: Path) -> None:
        seen.append(sorted(p.name for p in staging.iterdir()))
        (staging / "out.bin").write_text((staging / "gen.h").read_text())

    first = fetch_or_build(spec, ["out.bin"], build, root=tmp_path / "cache")
    again = fetch_or_build(spec, ["out.bin"], build, root=tmp_path / "cache")
    assert seen == [["gen.h"]], "the generated file is in place before the build, and the build ran once"
    assert not first.cached and again.cached and again.dir == first.dir == entry_dir(spec, root=tmp_path / "cache")
    assert first.dir.parent == tmp_path / "cache" / "ns" / "mod"
    assert first.path("out.bin").read_text() == "#define A 1\n"
    record = json.loads(first.path(SPEC_FILE).read_text())
    assert record["key"] == spec.key() and record["params"] == [1, 2] and record["files"][0][0] == "k.cu"
    rebuilt = fetch_or_build(spec, ["out.bin"], _writer("new"), root=tmp_path / "cache", force=True)
    assert not rebuilt.cached and rebuilt.path("out.bin").read_text() == "new"


def test_a_failed_build_publishes_nothing(tmp_path):
    spec = BuildSpec("mod", params={"n": 1})
    final = entry_dir(spec, root=tmp_path)

    def half_then_fail(staging: Path) -> None:
        (staging / "out.bin").write_text("half")
        assert not final.exists(), "nothing is visible under the entry's name while it builds"
        raise RuntimeError("compiler exploded")

    with pytest.raises(RuntimeError, match="compiler exploded"):
        fetch_or_build(spec, ["out.bin"], half_then_fail, root=tmp_path)
    assert not final.exists()
    assert [p.name for p in final.parent.iterdir()] == [f".{final.name}.lock"], "no staging directory left behind"
    with pytest.raises(BuildCacheError, match=r"wrote no 'log.txt' \(expected outputs: out.bin, log.txt\)"):
        fetch_or_build(spec, ["out.bin", "log.txt"], _writer("x"), root=tmp_path)
    assert not final.exists()


@pytest.mark.parametrize("kwargs, message", [
    ({"namespace": "../up"}, r"namespace '../up': part '..' must use letters"),
    ({"namespace": "a//b"}, r"namespace 'a//b': part '' must use"),
    ({"namespace": "m", "generated": {"sub/x.h": ""}}, r"generated file name 'sub/x.h'"),
    ({"namespace": "m", "files": ["/no/such/file.cu"]}, r"input file '/no/such/file.cu' of 'm' does not exist"),
    ({"namespace": "m", "params": {"p": object()}}, r"params of 'm' are not JSON"),
])
def test_bad_specs_are_one_line_errors(kwargs, message):
    with pytest.raises(BuildCacheError, match=message) as info:
        BuildSpec(**kwargs)
    assert "\n" not in str(info.value)


def test_bad_outputs_are_one_line_errors(tmp_path):
    for outputs in ([], ["../x"], [SPEC_FILE]):
        with pytest.raises(BuildCacheError, match="give one or more plain file names"):
            fetch_or_build(BuildSpec("m"), outputs, _writer("x"), root=tmp_path)


def _concurrent_builder(root: str, log: str, result: str, start) -> None:
    def slow(staging: Path) -> None:
        with open(log, "a") as fh:
            fh.write("built\n")
        time.sleep(1.0)  # the other process, started at the same moment, arrives while this one builds
        (staging / "out.bin").write_text("whole")

    start.wait()
    entry = fetch_or_build(BuildSpec("race", params={"v": 1}), ["out.bin"], slow, root=root)
    Path(result).write_text(entry.path("out.bin").read_text())


def test_concurrent_builders_build_once_and_both_get_the_whole_entry(tmp_path):
    log = tmp_path / "builds.log"
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(2)
    procs = [ctx.Process(target=_concurrent_builder, args=(str(tmp_path / "cache"), str(log), str(tmp_path / f"r{i}"),
                                                           start)) for i in range(2)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
    assert [proc.exitcode for proc in procs] == [0, 0]
    assert [(tmp_path / f"r{i}").read_text() for i in range(2)] == ["whole", "whole"]
    assert log.read_text() == "built\n", "the second builder waited on the lock and reused the first's entry"
