"""Turn frozen-dataclass trees (AST, specs) into JSON-able data and back.

Generated jobs bake their compiled engine spec in as a literal; this is the format.

Example::

    >>> from sparkcep.ir.ast import Attr
    >>> from_data(to_data(Attr("a", "x", "prev"))) == Attr("a", "x", "prev")
    True
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

_MODULES = ("sparkcep.ir.ast", "sparkcep.ir.spec", "sparkcep.ir.recognize")

#: Field metadata key: leave the field out of :func:`to_data` while it has its default value.
OMIT_DEFAULT = "omit_default"


def to_data(obj: Any) -> Any:
    """A JSON-able form of ``obj``: dataclasses become ``{"@": name, field: ...}``, tuples become lists."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out: dict[str, Any] = {"@": type(obj).__name__}
        for f in dataclasses.fields(obj):
            if f.name == "span":
                continue
            value = getattr(obj, f.name)
            if f.metadata.get(OMIT_DEFAULT) and value == f.default:
                continue  # a field added with a default: specs that do not use it read as before
            out[f.name] = to_data(value)
        return out
    if isinstance(obj, (tuple, list)):
        return [to_data(x) for x in obj]
    if isinstance(obj, dict):
        return {k: to_data(v) for k, v in obj.items()}
    return obj


def _classes() -> dict[str, type]:
    out: dict[str, type] = {}
    for mod_name in _MODULES:
        mod = importlib.import_module(mod_name)
        for name, value in vars(mod).items():
            if isinstance(value, type) and dataclasses.is_dataclass(value):
                out[name] = value
    return out


def from_data(data: Any) -> Any:
    """Inverse of :func:`to_data` (lists become tuples, as the frozen dataclasses expect)."""
    classes = _classes()

    def build(d: Any) -> Any:
        if isinstance(d, dict) and "@" in d:
            cls = classes[d["@"]]
            return cls(**{k: build(v) for k, v in d.items() if k != "@"})
        if isinstance(d, list):
            return tuple(build(x) for x in d)
        if isinstance(d, dict):
            return {k: build(v) for k, v in d.items()}
        return d

    return build(data)
