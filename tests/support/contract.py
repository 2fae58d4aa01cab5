"""The JSON record keys other tools depend on (issue 2's contract)."""

CONTRACT_KEYS = [
    "backend",
    "collective",
    "algorithm",
    "protocol",
    "nranks",
    "dtype",
    "size_bytes",
    "count",
    "time_us",
    "algbw_gbps",
    "busbw_gbps",
]
