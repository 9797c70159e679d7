"""sparkcep: a complex event processing compiler for Apache Spark.

    >>> import sparkcep
    >>> q = sparkcep.compile("PATTERN SEQ(A a, B b) WHERE [id] WITHIN 10")
    >>> q.resolved().mode
    'match'
"""

from __future__ import annotations

from sparkcep.api import CompiledQuery, CompiledWorkload, compile, compile_shared_workload, compile_workload
from sparkcep.ir.errors import CEPError, CEPSemanticError, CEPSyntaxError
from sparkcep.sql_api import sql, sql_workload

__all__ = ["CEPError", "CEPSemanticError", "CEPSyntaxError", "CompiledQuery", "CompiledWorkload", "compile",
           "compile_shared_workload", "compile_workload", "sql", "sql_workload"]
__version__ = "0.1.0"
