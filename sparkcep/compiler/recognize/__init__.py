"""The compiler side of ``MATCH_RECOGNIZE``: the checks (:func:`check_recognize`), the engine spec
(:func:`build_spec`), what the batch worker reads (:func:`worker_spec`), the result columns a batch returns
(:func:`pruned_output`) and the output types (:mod:`.types`)."""

from __future__ import annotations

from sparkcep.compiler.recognize.analysis import check_recognize, pattern_variables
from sparkcep.compiler.recognize.defines import WorkerSpec, describe_worker, worker_spec
from sparkcep.compiler.recognize.outputs import pruned_output, read_columns
from sparkcep.compiler.recognize.spec import build_spec
from sparkcep.compiler.recognize.types import expr_type

__all__ = ["check_recognize", "build_spec", "pattern_variables", "expr_type", "WorkerSpec", "describe_worker",
           "pruned_output", "read_columns", "worker_spec"]
