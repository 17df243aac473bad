"""Backend adapters: the only code that knows each measurement tool. See :mod:`.base` for the contract."""
from .base import (  # noqa: F401
    EFFECTS,
    BackendAdapter,
    BackendError,
    BackendUnavailableError,
    CollectContext,
    ConfigMergeError,
    EffectMismatchError,
    UnknownBackendError,
    backend_module,
    backend_names,
    get_backend,
    merge_configs,
    register_backend,
    unregister_backend,
)
