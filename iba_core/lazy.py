"""Package attributes imported on first use, so that importing a package stays light (no torch, Plotly, …)."""
from __future__ import annotations

from importlib import import_module
from typing import Any, Callable


def lazy_exports(package: str, public: dict[str, str], namespace: dict) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """(__getattr__, __dir__) for a package whose public name → submodule map is `public`.

    A name is imported from its submodule when first asked for and then kept in the package's `namespace`.
    """

    def getattr_(name: str) -> Any:
        module = public.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(f".{module}", package), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted(set(namespace) | set(public))

    return getattr_, dir_
