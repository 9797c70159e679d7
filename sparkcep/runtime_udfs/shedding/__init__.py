"""Load shedding under a latency bound (gSPICE, Slo et al.): a black-box stage in front of the stateful operator.

When the input rate exceeds what a job can process, the shedder drops the events least likely to contribute to
complex events, so that results arrive within a latency bound.  Shedding is off unless asked for
(``WITH SHEDDING LATENCY 1 s``, ``shedding_latency=`` in the API, ``--shedding-latency`` in the CLI), and every
dropped event is counted per type.

The pieces, pure Python unless said otherwise:

* :mod:`.observations` — contribution statistics (which complex events each event contributed to, derived from
  the engine's outputs by a hidden event-id column), predecessor-pane type frequencies, attribute bins and the
  aggregated observations ⟨T, F, E, M, O⟩ of gSPICE §III-B;
* :mod:`.zobrist` — gSPICE-H: Zobrist keys with the incremental pane update, utility tables;
* :mod:`.models` — gSPICE-M: decision tree / random forest (scikit-learn) over the same features;
* :mod:`.threshold` — the utility threshold for a drop ratio ρ from cumulative utility occurrences (§III-C);
* :mod:`.baselines` — random shedding and type-based shedding (the paper's BL);
* :mod:`.base` — the event coder and the shedder base class every model shares;
* :mod:`.shedder` — the per-event drop decision given a utility model and ρ, and drift detection;
* :mod:`.controller` — ρ from measured latency with the paper's safety margin; the backlog controller (ρ, the
  admission bound and the expiry age from the arrival-to-result latency and the backlog);
* :mod:`.spark` — the ``mapInPandas`` stage before the shuffle, per-type drop counts, the listener.
"""

from __future__ import annotations

#: The utility models a shedding stage can use: gSPICE-H (``hash``), gSPICE-M (``tree``, ``forest``) and the
#: paper's baselines (``random``, ``type``: type-based), for comparisons (light: the CLI's choices).
MODELS = ("hash", "tree", "forest", "random", "type")
