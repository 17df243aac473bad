"""Recipe catalog: built-ins, registration, validation messages."""
from __future__ import annotations

import pytest

from argus_rt.backends.base import BackendAdapter, ConfigMergeError, UnknownBackendError, get_backend, merge_configs
from argus_rt.recipes import Evidence, Recipe, RecipeError, get_recipe, register_recipe, signals, unregister_recipe


def test_builtin_catalog():
    need = {"latency", "instruction_mix", "barrier_count", "stall_reasons", "async_completion_latency",
            "system_timeline"}
    assert need <= set(signals())
    assert "pc_region_map" not in signals() and "pc_region_map" in signals(include_internal=True)
    assert get_recipe("latency").qualification == "observed"
    assert get_recipe("instruction_mix").qualification == "attributed"
    assert get_recipe("async_completion_latency").qualification == "derived"
    assert get_recipe("instruction_mix").prerequisites == ("pc_region_map",)
    # the forced-wait recipe discovers its targets at run time
    assert get_recipe("async_completion_latency").control == "async_discovery"
    # PC counters come from the same binary as the PC-to-region map
    assert get_recipe("instruction_mix").evidence[0].variant == get_recipe("pc_region_map").evidence[0].variant


def test_registration_and_errors():
    r = Recipe("t_occupancy", synthesis="latency", qualification="observed",
               evidence=(Evidence("ncu", outputs=("pc_counters",), variant="marker_only"),))
    register_recipe(r)
    try:
        assert get_recipe("t_occupancy") is r
        with pytest.raises(RecipeError, match="already registered"):
            register_recipe(r)
    finally:
        unregister_recipe("t_occupancy")
    with pytest.raises(KeyError, match="unknown signal 't_occupancy'; valid signals: "):
        get_recipe("t_occupancy")
    with pytest.raises(RecipeError, match=r"unknown effects \['slow'\]; valid: changes_overlap"):
        Evidence("ncu", outputs=("x",), effects={"slow"})
    with pytest.raises(RecipeError, match="qualification 'measured' unknown"):
        Recipe("x", synthesis="s", qualification="measured")
    with pytest.raises(RecipeError, match="unknown scope fields"):
        Recipe("x", synthesis="s", qualification="observed", scope_fields={"grid"})
    with pytest.raises(RecipeError, match="names no outputs"):
        Evidence("ncu", outputs=())


def test_backend_registry_and_config_merge():
    with pytest.raises(UnknownBackendError, match="unknown backend 'nope'; registered: .*built-in: ncu, nvbit"):
        get_backend("nope")
    assert merge_configs([{"sections": ["A"], "k": 1}, {"sections": ["B", "A"], "k": 1}]) == \
        {"sections": ["A", "B"], "k": 1}
    with pytest.raises(ConfigMergeError, match="config key 'k': 1 vs 2"):
        merge_configs([{"k": 1}, {"k": 2}])

    class Bad(BackendAdapter):
        name = "t_bad"
        effects = frozenset({"teleports"})

    from argus_rt.backends.base import register_backend

    with pytest.raises(ValueError, match="unknown effects"):
        register_backend(Bad())


def test_backends_can_be_specific_to_a_program_kind():
    from argus_rt.backends.base import register_backend, unregister_backend

    class Generic(BackendAdapter):
        name = "t_kinded"

    class ForTriton(BackendAdapter):
        name = "t_kinded"

    register_backend(Generic())
    register_backend(ForTriton(), kind="triton")
    try:
        assert isinstance(get_backend("t_kinded", "triton"), ForTriton)
        assert isinstance(get_backend("t_kinded", "cuda"), Generic)
        assert isinstance(get_backend("t_kinded"), Generic)
        unregister_backend("t_kinded")
        with pytest.raises(UnknownBackendError, match=r"registered for program kinds \['triton'\], not 'cuda'"):
            get_backend("t_kinded", "cuda")
    finally:
        unregister_backend("t_kinded")
        unregister_backend("t_kinded", "triton")
