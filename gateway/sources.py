"""The declared sources a client may pull from (``pull?source=NAME``), opened at startup.

Declarations (``GatewaySettings.defs_dir``) name each gateway's sources; each is opened with its
kind's factory (:data:`lakesync_platform.adapters.source.SOURCE_KINDS`). Opening connects
nothing: drivers connect on the first pull, so a source that is down fails that pull (503
``ADAPTER_ERROR``), never the gateway's start. A malformed declaration does fail the start.
"""

from __future__ import annotations

from collections.abc import Mapping

from lakesync_platform.adapters.source import DeltaSource, SourceSpec, close_source, open_source
from lakesync_platform.core.errors import SourceNotFoundError
from lakesync_platform.declarations import expand_env, load_declarations
from lakesync_platform.settings import GatewaySettings

__all__ = ["DeclaredSources"]


class DeclaredSources:
    """Every gateway's declared sources by name."""

    def __init__(self, sources: Mapping[str, Mapping[str, DeltaSource]]) -> None:
        self._sources = sources

    @classmethod
    def open(cls, settings: GatewaySettings) -> DeclaredSources:
        """Open the sources the declarations in ``settings.defs_dir`` name."""
        decls = load_declarations(settings.defs_dir)
        opened: dict[str, dict[str, DeltaSource]] = {}
        for gw, decl in decls.gateways.items():
            for name, src in decl.sources.items():
                options = {k: expand_env(v, settings.env) for k, v in src.options.items()}
                spec = SourceSpec(name, src.kind, expand_env(src.url, settings.env), options)
                opened.setdefault(gw, {})[name] = open_source(spec)
        return cls(opened)

    def get(self, gw: str, name: str) -> DeltaSource:
        """Source ``name`` of ``gw``; an unknown one is a 404 ``SOURCE_NOT_FOUND``."""
        source = self._sources.get(gw, {}).get(name)
        if source is None:
            raise SourceNotFoundError(f'Source adapter "{name}" not found')
        return source

    def close(self) -> None:
        """Release every source's connections."""
        for by_name in self._sources.values():
            for source in by_name.values():
                close_source(source)
