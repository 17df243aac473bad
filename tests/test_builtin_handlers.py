"""The runtime's built-in handler table holds module references (argus_rt.builtin_handlers), every
built-in handler is registered by one of them, and a fresh process finds a built-in handler (and the
module to import for it) without importing torch or Triton."""
from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_the_table_holds_modules_and_they_register_every_builtin_handler():
    from argus_rt.builtin_handlers import BUILTIN_HANDLER_MODULES
    from argus_rt.runtime import handlers

    assert BUILTIN_HANDLER_MODULES and all(isinstance(m, types.ModuleType) for m in BUILTIN_HANDLER_MODULES)
    handlers.load_builtin_handlers()
    names = {m.__name__ for m in BUILTIN_HANDLER_MODULES}
    builtin = {key: module for key, module in handlers._HANDLER_MODULES.items() if module in names}
    # the ops the planner names (recipes, probe expansion) are among them, each from one listed module
    for kind, op in [("transform", "variant"), ("transform", "forced_wait_probe"), ("control", "async_discovery"),
                     ("expander", "forced_wait_probes"), ("synthesize", "latency"),
                     ("synthesize", "attributed_metric")]:
        assert (kind, op, None) in builtin, (kind, op)
    assert set(builtin.values()) == names  # no listed module that registers nothing


PROBE = """
import json, sys
from argus_rt.runtime.handlers import get_handler, handler_module
loaded_before = "argus_rt.synthesis" in sys.modules
fn = get_handler("synthesize", "latency")
print(json.dumps({"before": loaded_before, "fn": f"{fn.__module__}.{fn.__name__}",
                  "module": handler_module("expander", "forced_wait_probes"),
                  "torch": "torch" in sys.modules, "triton": "triton" in sys.modules}))
"""


def test_a_fresh_process_finds_builtins_lazily_without_torch_or_triton():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"before": False, "fn": "argus_rt.synthesis.synth_latency", "module": "argus_rt.probe_expander",
                   "torch": False, "triton": False}, got


def test_an_unknown_handler_is_one_line_naming_the_registered_ones():
    from argus_rt.runtime.handlers import UnknownHandlerError, get_handler

    with pytest.raises(UnknownHandlerError, match=r"unknown synthesize handler 'no_such_rule'; registered: .*latency"):
        get_handler("synthesize", "no_such_rule")
