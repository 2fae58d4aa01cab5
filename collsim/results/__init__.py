"""Result records, nccl-tests metrics and output formats.

One :class:`Record` describes one simulated (or measured) collective at one message size; :class:`Comparison`
(NCCL against Gloo at one size) and :class:`Explanation` (NCCL's choice at one size) are the records of
``compare`` and ``explain``. The package derives nccl-tests' metrics (:mod:`collsim.results.records`), writes
text tables (:mod:`collsim.results.text`) and JSON, CSV or DataFrames (:mod:`collsim.results.export`). It knows
nothing about how a time was produced.

The collective name sets (:data:`PER_RANK_COUNT_COLLECTIVES`, :data:`REDUCING_COLLECTIVES`,
:data:`COLLECTIVE_ALIASES`) and :func:`canonical_collective` are :mod:`collsim.vocab`'s, re-exported here.

Examples
--------
>>> r = make_record(backend="gloo", collective="all_gather", algorithm="ring", protocol="-", nranks=4,
...                 dtype="float32", size_bytes=4 * 2**20, time_s=1e-3)
>>> print(format_nccl_tests([r]).splitlines()[3])
     4194304        262144     float    none      -1  1000.00    4.19    3.15     N/A
"""

from __future__ import annotations

from collsim.results.compare import AlgorithmComparison, Comparison, Explanation
from collsim.results.export import (
    algorithm_comparisons_to_csv,
    algorithm_comparisons_to_json,
    comparisons_to_csv,
    comparisons_to_json,
    explanations_to_json,
    mark_partial,
    partial_fields,
    records_to_csv,
    records_to_dataframe,
    records_to_json,
)
from collsim.results.records import (
    BUSBW_FACTORS,
    FLAT_FIELDS,
    REPRESENTATIVE_SIZE,
    Record,
    busbw_factor,
    make_record,
    nccl_tests_bytes,
    representative_size,
    whole_element_bytes,
)
from collsim.results.repeat import (
    REPEAT_FIELDS,
    RepeatedRecord,
    format_repeated_sweep,
    repeated_record,
    repeated_to_csv,
)
from collsim.results.text import (
    NO_BREAKDOWN,
    agreement,
    format_algorithm_comparison,
    format_algorithm_perturbation,
    format_comparison,
    format_explain_perturbation,
    format_explanation,
    format_nccl_tests,
    format_perturbation,
    format_sweep,
    share_text,
)
from collsim.vocab import (
    COLLECTIVE_ALIASES,
    PER_RANK_COUNT_COLLECTIVES,
    REDUCING_COLLECTIVES,
    canonical_collective,
)

__all__ = [
    "BUSBW_FACTORS",
    "COLLECTIVE_ALIASES",
    "FLAT_FIELDS",
    "NO_BREAKDOWN",
    "PER_RANK_COUNT_COLLECTIVES",
    "REDUCING_COLLECTIVES",
    "REPEAT_FIELDS",
    "REPRESENTATIVE_SIZE",
    "AlgorithmComparison",
    "Comparison",
    "Explanation",
    "Record",
    "RepeatedRecord",
    "agreement",
    "algorithm_comparisons_to_csv",
    "algorithm_comparisons_to_json",
    "busbw_factor",
    "canonical_collective",
    "comparisons_to_csv",
    "comparisons_to_json",
    "explanations_to_json",
    "format_algorithm_comparison",
    "format_algorithm_perturbation",
    "format_comparison",
    "format_explain_perturbation",
    "format_explanation",
    "format_nccl_tests",
    "format_perturbation",
    "format_repeated_sweep",
    "format_sweep",
    "make_record",
    "mark_partial",
    "nccl_tests_bytes",
    "partial_fields",
    "records_to_csv",
    "records_to_dataframe",
    "records_to_json",
    "repeated_record",
    "repeated_to_csv",
    "representative_size",
    "share_text",
    "whole_element_bytes",
]
