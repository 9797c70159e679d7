"""sparkcep: a complex event processing compiler for Apache Spark.

    >>> import sparkcep
    >>> q = sparkcep.compile("PATTERN SEQ(A a, B b) WHERE [id] WITHIN 10")
    >>> q.resolved().mode
    'match'

The public names are imported on first use (PEP 562): a Spark executor's Python worker that unpickles an
operator (``sparkcep.spark.operator``) imports the engines it runs, not the compiler (sqlglot, Lark, networkx),
which is most of the import time a worker pays when it starts.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparkcep.api import (
        CompiledQuery,
        CompiledWorkload,
        LiveStream,
        apply_stream,
        compile,
        compile_shared_workload,
        compile_workload,
    )
    from sparkcep.ir.errors import CEPError, CEPSemanticError, CEPSyntaxError
    from sparkcep.sql_api import sql, sql_workload

#: public name → the module defining it
_EXPORTS = {"CompiledQuery": "sparkcep.api", "LiveStream": "sparkcep.api", "apply_stream": "sparkcep.api",
            "CompiledWorkload": "sparkcep.api", "compile": "sparkcep.api",
            "compile_shared_workload": "sparkcep.api", "compile_workload": "sparkcep.api",
            "CEPError": "sparkcep.ir.errors", "CEPSemanticError": "sparkcep.ir.errors",
            "CEPSyntaxError": "sparkcep.ir.errors", "sql": "sparkcep.sql_api", "sql_workload": "sparkcep.sql_api"}

__all__ = ["CEPError", "CEPSemanticError", "CEPSyntaxError", "CompiledQuery", "CompiledWorkload", "LiveStream",
           "apply_stream", "compile",
           "compile_shared_workload", "compile_workload", "sql", "sql_workload"]
__version__ = "0.1.0"


def __getattr__(name: str):
    """A public name (imported from its module on first use), or a submodule (``sparkcep.api`` after a plain
    ``import sparkcep``, as when the package imported it eagerly)."""
    module = _EXPORTS.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
    elif not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
