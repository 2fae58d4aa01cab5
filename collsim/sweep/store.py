"""The results store: a folder of Parquet files, one per finished point, named by the point's key.

Why one Parquet file per point
------------------------------
* **A point is stored whole or not at all.** The file is written under a temporary name in the same folder
  (``.<key>~<host>~<pid>~<random>.tmp``, which no reader looks at) and renamed onto ``<key>.parquet`` with
  ``os.replace``, which is atomic: a driver killed at any instant (kill -9 included) leaves either the whole file
  or none, and a later run removes the leftover temporary files of processes that are gone.
* **A point is never duplicated.** The file name is the key: rerunning a point (``--force``, or two drivers on one
  store) replaces the file, it cannot add a second copy. Skipping finished points is a directory listing.
* **Nothing to lock, nothing to recover.** An embedded database (DuckDB, SQLite) would be one file with a writer
  lock: a notebook reading it while a sweep runs would block the sweep or be refused, and a killed writer leaves a
  journal to replay. Here readers and writers never meet.
* **Everyone reads it.** ``pandas.read_parquet(folder)``, ``pyarrow.dataset.dataset(folder)``, DuckDB's
  ``read_parquet('folder/*.parquet')``, Spark, polars. Every file has the same schema (:data:`SCHEMA`).

The cost is one small file per point (about 8 KiB); a grid of 100,000 points is 100,000 files, which a local or
shared filesystem lists in well under a second. Durability is against the death of processes, not of the machine:
files are not fsync'ed.

Examples
--------
>>> import tempfile
>>> store = ResultStore(tempfile.mkdtemp())
>>> store.write("0" * 32, [{"backend": "nccl", "size_bytes": 8, "time_us": 12.5}], scenario_name="demo")
>>> sorted(store.keys()), store.read()[["backend", "size_bytes", "time_us"]].values.tolist()
(['00000000000000000000000000000000'], [['nccl', 8, 12.5]])
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import socket
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq

if TYPE_CHECKING:
    import pandas

__all__ = ["SCHEMA", "SCHEMA_VERSION", "ResultStore", "expand_params", "rows_table"]

#: Bumped when :data:`SCHEMA` changes (written into each file's metadata as ``collsim.schema``).
SCHEMA_VERSION = "1"

#: One row per collective of a point (an error point: one row with ``error`` set and no metrics).
SCHEMA = pa.schema(
    [
        pa.field("key", pa.string(), nullable=False),  # the point's key (file name without .parquet)
        pa.field("collsim_version", pa.string()),
        pa.field("scenario_name", pa.string()),  # the scenario's name (its `name` field)
        pa.field("params", pa.string()),  # JSON object: axis path -> value, as the grid that ran it named them
        pa.field("backend", pa.string()),
        pa.field("collective", pa.string()),
        pa.field("algorithm", pa.string()),
        pa.field("protocol", pa.string()),
        pa.field("nranks", pa.int64()),
        pa.field("dtype", pa.string()),
        pa.field("size_bytes", pa.int64()),  # nccl-tests' size, bytes
        pa.field("count", pa.int64()),
        pa.field("time_us", pa.float64()),  # one collective, microseconds
        pa.field("algbw_gbps", pa.float64()),  # GB/s, GB = 1e9 bytes
        pa.field("busbw_gbps", pa.float64()),
        pa.field("redop", pa.string()),
        pa.field("root", pa.int64()),
        pa.field("channels", pa.int64()),
        pa.field("breakdown", pa.string()),  # JSON object: activity -> seconds ("{}" unless the grid asks)
        pa.field("notes", pa.string()),  # JSON list of strings
        pa.field("error", pa.string()),  # null, or why the point has no result (NCCL would refuse ...)
        pa.field("sim_seconds", pa.float64()),  # wall time of the point on its worker, seconds
        pa.field("worker", pa.string()),  # host:pid
        pa.field("finished_at", pa.timestamp("ms", tz="UTC")),
    ],
    metadata={"collsim.schema": SCHEMA_VERSION},
)

_JSON_COLUMNS = ("params", "breakdown", "notes")


def rows_table(rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    """Rows (dicts with any of :data:`SCHEMA`'s columns; JSON columns may be given as data) as a table of
    :data:`SCHEMA`; a missing column is null."""
    cols: dict[str, list[Any]] = {f.name: [] for f in SCHEMA}
    for row in rows:
        for name, values in cols.items():
            value = row.get(name)
            if name in _JSON_COLUMNS and value is not None and not isinstance(value, str):
                value = json.dumps(value, sort_keys=name != "params")
            values.append(value)
    return pa.table(cols, schema=SCHEMA)


def expand_params(df: pandas.DataFrame) -> pandas.DataFrame:
    """``df`` (rows of the store) with the JSON ``params`` column spread into one column per axis path, first.

    >>> import pandas as pd
    >>> expand_params(pd.DataFrame({"params": ['{"cluster.nodes": 2}'], "time_us": [1.0]})).columns.tolist()
    ['cluster.nodes', 'time_us']
    """
    import pandas as pd

    if "params" not in df.columns:
        return df
    params = [json.loads(p) if isinstance(p, str) and p else {} for p in df["params"]]
    names: dict[str, None] = {}
    for p in params:
        names.update(dict.fromkeys(p))
    axes = pd.DataFrame({n: [p.get(n) for p in params] for n in names}, index=df.index)
    rest = df.drop(columns=["params", *[n for n in names if n in df.columns]])
    return pd.concat([axes, rest], axis=1)


class ResultStore:
    """A folder of finished points (see the module docstring); created when missing.

    Parameters
    ----------
    path : str or Path
        The folder.
    """

    SUFFIX = ".parquet"

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()
        self.path.mkdir(parents=True, exist_ok=True)
        self._host = socket.gethostname()
        self._clean()

    def __repr__(self) -> str:
        return f"ResultStore({str(self.path)!r})"

    def file(self, key: str) -> Path:
        """Where the point ``key`` is (or will be) stored."""
        return self.path / f"{key}{self.SUFFIX}"

    def keys(self) -> set[str]:
        """Keys of the points stored."""
        n = len(self.SUFFIX)
        with os.scandir(self.path) as entries:
            return {e.name[:-n] for e in entries if e.name.endswith(self.SUFFIX) and not e.name.startswith(".")}

    def write(self, key: str, rows: Sequence[Mapping[str, Any]], **common: Any) -> None:
        """Store one finished point at once: ``rows`` (a Record's fields, and any of :data:`SCHEMA`'s columns),
        each completed with ``common`` and the key; replaces what was stored for ``key``."""
        now = datetime.datetime.now(datetime.UTC)
        full = [{"finished_at": now, **common, **row, "key": key} for row in rows] or [
            {"finished_at": now, **common, "key": key}
        ]
        tmp = self.path / f".{key}~{self._host}~{os.getpid()}~{uuid.uuid4().hex[:8]}.tmp"
        try:
            pq.write_table(rows_table(full), tmp)
            os.replace(tmp, self.file(key))
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()

    def table(self, keys: Iterable[str] | None = None) -> pa.Table:
        """The stored rows (of ``keys`` only, those stored, when given) as a table of :data:`SCHEMA`."""
        if keys is None:
            files = [str(self.file(k)) for k in sorted(self.keys())]
        else:
            files = [str(f) for f in (self.file(k) for k in dict.fromkeys(keys)) if f.is_file()]
        if not files:
            return SCHEMA.empty_table()
        return pads.dataset(files, schema=SCHEMA, format="parquet").to_table()

    def read(self, keys: Iterable[str] | None = None, *, params: bool = True) -> pandas.DataFrame:
        """The stored rows as a DataFrame; with ``params`` the axes as columns (:func:`expand_params`)."""
        df = self.table(keys).to_pandas()
        return expand_params(df) if params else df

    def _clean(self) -> None:
        """Remove temporary files of writers on this host that are gone (a driver killed mid-write)."""
        for tmp in self.path.glob(".*.tmp"):
            parts = tmp.name[1 : -len(".tmp")].split("~")
            if len(parts) != 4 or parts[1] != self._host or not parts[2].isdigit():
                continue
            if not _alive(int(parts[2])):
                with contextlib.suppress(FileNotFoundError):
                    tmp.unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
