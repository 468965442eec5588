"""Many rows as statement parameters, one parameter per column, the same SQL on both databases:
`WITH b(col, ...) AS (<source>) <statement reading b>`.

On PostgreSQL the source is `SELECT * FROM unnest($1::int8[], ...)`, each column sent as one
binary array that numpy packs in C: a batch's 50 keys x 14 rollup columns cost a few buffer
copies instead of psycopg's per-element adaptation in Python, and the statement's text is the
same for every batch (psycopg and the server parse it once). On SQLite (the demo) the source is a
VALUES list. NaN in a float column and -1 in an integer column the statement reads back through
NULLIF stand for NULL (PostgreSQL compares NaN equal to NaN).
"""

from __future__ import annotations

import struct
import weakref
from collections.abc import Sequence

import numpy as np
import psycopg
from psycopg.adapt import Dumper
from psycopg.pq import Format

# PostgreSQL type: (element oid, array oid, numpy big-endian dtype or None for variable length)
PG_TYPES = {
    "int2": (21, 1005, ">i2"),
    "int4": (23, 1007, ">i4"),
    "int8": (20, 1016, ">i8"),
    "float8": (701, 1022, ">f8"),
    "text": (25, 1009, None),
    "bytea": (17, 1001, None),
    "bool": (16, 1000, ">?"),
}


class PackedArray(bytes):
    """A PostgreSQL array in its binary wire form; `oid` is the array type's."""

    oid = 0


def _array_type(pg_type: str) -> tuple[type[PackedArray], type[Dumper]]:
    oid = PG_TYPES[pg_type][1]
    cls = type(f"{pg_type.capitalize()}Array", (PackedArray,), {"oid": oid})
    dumper = type(
        f"{pg_type.capitalize()}ArrayDumper",
        (Dumper,),
        {"format": Format.BINARY, "oid": oid, "dump": lambda self, obj: obj},
    )
    return cls, dumper


_TYPES = {pg_type: _array_type(pg_type) for pg_type in PG_TYPES}
for _cls, _dumper in _TYPES.values():
    psycopg.adapters.register_dumper(_cls, _dumper)  # connections opened from now on
_known: weakref.WeakSet = weakref.WeakSet()


def register(conn: psycopg.Connection) -> None:
    """Teach a connection opened before this module was imported to send packed arrays."""
    if conn not in _known:
        for cls, dumper in _TYPES.values():
            conn.adapters.register_dumper(cls, dumper)
        _known.add(conn)


def _array_class(pg_type: str) -> type[PackedArray]:
    return _TYPES[pg_type][0]


def pack_array(values, pg_type: str) -> PackedArray:
    """One array parameter; values: a numpy array or sequence (str/bytes for text/bytea), no NULLs."""
    element_oid, _, dtype = PG_TYPES[pg_type]
    n = len(values)
    if n == 0:
        return _array_class(pg_type)(struct.pack(">iii", 0, 0, element_oid))
    head = struct.pack(">iiiii", 1, 0, element_oid, n, 1)
    if dtype is not None:
        cells = np.empty(n, dtype=[("len", ">i4"), ("v", dtype)])
        cells["len"] = np.dtype(dtype).itemsize
        cells["v"] = values
        return _array_class(pg_type)(head + cells.tobytes())
    items = [v.encode() if isinstance(v, str) else bytes(v) for v in values]
    return _array_class(pg_type)(head + b"".join(struct.pack(">i", len(v)) + v for v in items))


class Rows:
    """The `b` of `WITH b(...) AS (...)`: columns of equal length with their PostgreSQL types."""

    def __init__(self, columns: Sequence[tuple[str, str]], data: Sequence, *, postgres: bool):
        self.names = [name for name, _ in columns]
        self.types = [t for _, t in columns]
        self.data, self.postgres = list(data), postgres
        self.n = len(self.data[0]) if self.data else 0

    def source(self) -> tuple[str, list]:
        """(SQL of the source, its parameters)."""
        if self.postgres:
            sql = "SELECT * FROM unnest(" + ", ".join(f"%s::{t}[]" for t in self.types) + ")"
            return sql, [pack_array(col, t) for col, t in zip(self.data, self.types, strict=True)]
        cols = [_python_values(col) for col in self.data]
        one = "(" + ", ".join(["%s"] * len(cols)) + ")"
        return "VALUES " + ", ".join([one] * self.n), [v for row in zip(*cols, strict=True) for v in row]

    def with_clause(self) -> tuple[str, list]:
        sql, params = self.source()
        # quoted: `values` is a column of the chunks table and a keyword that SQLite refuses bare
        return "WITH b(" + ", ".join(f'"{name}"' for name in self.names) + f") AS ({sql}) ", params


def _python_values(column) -> list:
    """SQLite parameters: numpy NaN and -1 sentinels stay as they are (NULLIF in the statement)."""
    if isinstance(column, np.ndarray):
        return column.tolist()
    return [v.tobytes() if isinstance(v, memoryview) else v for v in column]
