"""A tuner plugin's pick: AWS's aws-ofi-nccl region tuner (``topologies/software/aws-ofi-nccl-regions.yaml``).

NCCL asks a tuner plugin for every collective (``getCollInfo``) before it settles on an (algorithm, protocol). From
NCCL 2.21 on, when ``NCCL_TUNER_PLUGIN`` names no library NCCL can open, NCCL looks for the tuner in the network
plugin's own library (NCCL ``src/plugin/tuner.cc`` and ``plugin_open.cc``, v2.27.7); aws-ofi-nccl bundles its tuner
there (its ``src/Makefile.am``, v1.16.3: "we cause the tuner to be used by default on NCCL 2.21 or later"). On
p5/p5e, p5en and p6-b200 instances that tuner is the *region* tuner: per platform, per ranks per node and per
collective, an ordered list of polygons in the plane (x = the collective's size in bytes, y = the rank count),
each naming an (algorithm, protocol). The first polygon that contains the point (its edges included) wins: the
plugin sets that pair's cost to 0 in NCCL's cost table, so NCCL runs it. Pairs NCCL marks as not applicable (an
algorithm or protocol disabled by NCCL_ALGO/NCCL_PROTO or unsupported here) are skipped; with no polygon left, or
on two nodes or fewer, NCCL's own cost model decides.

The polygons are data (transcribed with their source lines); this module holds the geometry, in exact rational
arithmetic: a point on an edge is inside, otherwise even-odd ray casting.

NVIDIA's example tuner (``NCCL_TUNER_PLUGIN=libnccl-tuner-example.so``, :class:`ExampleTuner`) reads a CSV
(``NCCL_TUNER_CONFIG_FILE``) and zeroes the cost of the first matching line's pair; it sets one channel for every
collective no line (or a line with channels -1) gives a count for (``topologies/software/nccl.yaml``
``example_tuner`` has the releases and source lines).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from collsim.backends.common import BackendError
from collsim.backends.nccl.constants import ExampleTunerReleases
from collsim.files import FileReadError, read_text_file
from collsim.topology.errors import TopologyError
from collsim.topology.presets import read_yaml
from collsim.vocab import COLLECTIVES, NCCL_ALGORITHMS, NCCL_PROTOCOLS

__all__ = [
    "ActiveTuner",
    "ChannelRule",
    "CsvTunerLine",
    "ExampleTuner",
    "PluginPick",
    "RegionTable",
    "RegionTuner",
    "TunerRegion",
    "extend_region",
    "in_polygon",
    "load_region_tuner",
    "read_tuner_csv",
    "resolve_tuner",
]

Point = tuple[Fraction, Fraction]


def extend_region(a: Point, b: Point, far: Point) -> Point:
    """The point where the line through ``a`` and ``b`` leaves the rectangle [0, far.x] x [0, far.y] upwards or to
    the right: the far x on it when the line is below the far y there, else the far y on it (a vertical line: far y
    at a's x; a horizontal one: far x at a's y). How the plugin extends a region to its maximum size and rank count.

    >>> F = Fraction
    >>> extend_region((F(1), F(1)), (F(2), F(2)), (F(100), F(10)))  # slope 1: reaches y = 10 first
    (Fraction(10, 1), Fraction(10, 1))
    >>> extend_region((F(0), F(1)), (F(10), F(2)), (F(100), F(1000)))  # slope 1/10: reaches x = 100 first
    (Fraction(100, 1), Fraction(11, 1))
    >>> extend_region((F(5), F(1)), (F(5), F(2)), (F(100), F(1000)))  # vertical
    (Fraction(5, 1), Fraction(1000, 1))
    """
    (ax, ay), (bx, by), (zx, zy) = a, b, far
    if ax == bx:
        return ax, zy
    if ay == by:
        return zx, ay
    slope = (ay - by) / (ax - bx)
    icpt = by - slope * bx
    y_at_far_x = slope * zx + icpt
    if y_at_far_x < zy:
        return zx, y_at_far_x
    return (zy - icpt) / slope, zy


def _on_segment(p: Point, a: Point, b: Point) -> bool:
    """Whether ``p`` lies on the closed segment from ``a`` to ``b`` (exact)."""
    dx, dy = b[0] - a[0], b[1] - a[1]
    px, py = p[0] - a[0], p[1] - a[1]
    if dx == 0 and dy == 0:  # a repeated vertex
        return px == 0 and py == 0
    if dx * py - dy * px != 0:
        return False
    dot = px * dx + py * dy
    return 0 <= dot <= dx * dx + dy * dy


def in_polygon(p: Point, vertices: Sequence[Point]) -> bool:
    """Whether ``p`` is inside the polygon ``vertices`` or on one of its edges (exact; even-odd rule, so a polygon
    of no area, such as three points on a line, holds only the points of its edges).

    >>> F = Fraction
    >>> square = [(F(0), F(0)), (F(4), F(0)), (F(4), F(4)), (F(0), F(4))]
    >>> [in_polygon((F(x), F(y)), square) for x, y in ((2, 2), (4, 2), (0, 0), (5, 2), (2, -1))]
    [True, True, True, False, False]
    >>> line = [(F(1), F(16)), (F(9), F(16)), (F(1), F(16))]  # the plugin's one-rank-count regions
    >>> in_polygon((F(5), F(16)), line), in_polygon((F(5), F(17)), line), in_polygon((F(1), F(16)), line)
    (True, False, True)
    """
    n = len(vertices)
    if any(_on_segment(p, vertices[i], vertices[(i + 1) % n]) for i in range(n)):
        return True
    x, y = p
    inside = False
    for i in range(n):
        (ax, ay), (bx, by) = vertices[i], vertices[(i + 1) % n]
        if (ay > y) != (by > y) and x < ax + (y - ay) * (bx - ax) / (by - ay):
            inside = not inside
    return inside


@dataclass(frozen=True)
class TunerRegion:
    """One region: the (algorithm, protocol) the plugin picks inside ``vertices`` ((bytes, ranks) points)."""

    algorithm: str
    protocol: str
    vertices: tuple[Point, ...]

    def contains(self, nbytes: int, nranks: int) -> bool:
        """Whether the point (``nbytes``, ``nranks``) is in the region, its edges included."""
        return in_polygon((Fraction(nbytes), Fraction(nranks)), self.vertices)


@dataclass(frozen=True)
class RegionTable:
    """The ordered regions of one platform, ranks-per-node case and collective; ``source`` says where they are."""

    regions: tuple[TunerRegion, ...]
    source: str

    def pick(self, nbytes: int, nranks: int, applicable: Callable[[str, str], bool]) -> tuple[int, TunerRegion] | None:
        """The first region (index, region) whose pair is ``applicable`` and that contains the point; None when
        none does (NCCL's own choice then stands)."""
        for i, region in enumerate(self.regions):
            if applicable(region.algorithm, region.protocol) and region.contains(nbytes, nranks):
                return i, region
        return None


@dataclass(frozen=True)
class ChannelRule:
    """A platform's channel count for one picked pair (aws-ofi-nccl on p6: Tree/LL128 all-reduce at 4-32 MiB with
    8 ranks per node): of ``candidates``, the one whose LL128 tree chunk is largest after the plugin's halvings,
    the larger count on a tie (the tables file's ``nchannels``, with its source lines)."""

    algorithm: str
    protocol: str
    collective: str
    ranks_per_node: int
    min_bytes: int
    max_bytes: int
    candidates: tuple[int, ...]
    ppn: int
    step_data_bytes: int
    grain_bytes: int
    halvings: tuple[tuple[int, int], ...]

    def chunk(self, nbytes: int, nchannels: int, log2_nodes: int) -> int:
        """The plugin's estimate of the tree's LL128 chunk (bytes, a whole number of grains) on ``nchannels``:
        halved while each channel would get fewer than ``factor`` x nSteps chunks and it is above the floor
        (nSteps = 1 + log2(nodes) + 0.1 x ppn; the left side an integer division, as the plugin's).

        >>> rule = ChannelRule("Tree", "LL128", "allreduce", 8, 4 << 20, 32 << 20, (16, 24, 32), 8, 576000, 1920,
        ...                    ((8, 131072), (2, 32768)))
        >>> [rule.chunk(s << 20, c, 2) for s in (8, 32) for c in (16, 24, 32)]  # 4 nodes, 8 and 32 MiB
        [34560, 34560, 17280, 71040, 71040, 71040]
        """
        steps = 1 + log2_nodes + 0.1 * self.ppn
        chunk = self.step_data_bytes
        for factor, floor in self.halvings:
            while nbytes // (nchannels * chunk) < steps * factor and chunk > floor:
                chunk //= 2
        return chunk // self.grain_bytes * self.grain_bytes

    def channels(self, nbytes: int, nnodes: int) -> int:
        """The channel count the plugin sets: the candidate with the largest chunk, the larger on a tie.

        >>> rule = ChannelRule("Tree", "LL128", "allreduce", 8, 4 << 20, 32 << 20, (16, 24, 32), 8, 576000, 1920,
        ...                    ((8, 131072), (2, 32768)))
        >>> rule.channels(8 << 20, 4), rule.channels(32 << 20, 4)  # 16 and 24 tie at 8 MiB; all three at 32
        (24, 32)
        """
        log2_nodes = max(0, nnodes.bit_length() - 1)
        best = max(self.candidates, key=lambda c: (self.chunk(nbytes, c, log2_nodes), c))
        return best


@dataclass(frozen=True)
class RegionTuner:
    """A region tuner's tables (:func:`load_region_tuner`).

    Attributes
    ----------
    plugin, version, source : str
        The plugin, the version its tables come from, and where.
    min_nodes : int
        The tuner picks only from this many nodes on; below, NCCL's own cost model decides.
    platforms : Mapping
        Platform key -> (instance type names, {(ranks per node, collective): RegionTable}).
    channel_rules : Mapping
        Platform key -> the channel count it sets for one picked pair (:class:`ChannelRule`), where it has one.
    """

    plugin: str
    version: str
    source: str
    min_nodes: int
    platforms: Mapping[str, tuple[tuple[str, ...], Mapping[tuple[int, str], RegionTable]]]
    channel_rules: Mapping[str, ChannelRule] = field(default_factory=dict)

    def platform_of(self, instance_type: str | None) -> str | None:
        """The platform key of an instance type name (``"p5.48xlarge"`` -> ``"p5"``), None when not one."""
        for key, (names, _tables) in self.platforms.items():
            if instance_type in names:
                return key
        return None

    def table(self, platform: str, ranks_per_node: int, collective: str) -> RegionTable | None:
        """The regions for ``collective`` with ``ranks_per_node`` on ``platform``; None where the plugin has none."""
        return self.platforms[platform][1].get((ranks_per_node, collective))

    @classmethod
    def from_mapping(cls, data: Any, file: str | None = None) -> RegionTuner:
        """Build from the YAML mapping; :class:`BackendError` naming the file and field on malformed data."""
        where = f"{file}: " if file else ""

        def fail(field: str, expected: str, got: Any) -> BackendError:
            return BackendError(f"{where}{field}: expected {expected}, got {got!r}")

        if not isinstance(data, Mapping):
            raise fail("(top)", "a mapping", data)
        try:
            far = (Fraction(str(data["max_size"])), Fraction(str(data["max_ranks"])))
            min_nodes = int(data["min_nodes"])
            platforms = data["platforms"]
        except (KeyError, ValueError, TypeError) as exc:
            raise BackendError(f"{where}missing or malformed top-level field: {exc}") from None

        def number(v: Any, field: str) -> Fraction:
            if v == "max_size":
                return far[0]
            if v == "max_ranks":
                return far[1]
            if isinstance(v, Mapping) and "extend" in v and v.get("take") in ("x", "y"):
                return extended(v, field)[0 if v["take"] == "x" else 1]
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise fail(field, "a number, max_size, max_ranks or {extend: [a, b], take: x|y}", v)
            return Fraction(str(v))

        def extended(v: Mapping[str, Any], field: str) -> Point:
            pts = v["extend"]
            if not (isinstance(pts, Sequence) and len(pts) == 2):
                raise fail(f"{field}.extend", "two points", pts)
            a, b = (point(q, f"{field}.extend[{i}]") for i, q in enumerate(pts))
            return extend_region(a, b, far)

        def point(v: Any, field: str) -> Point:
            if isinstance(v, Mapping) and "extend" in v and "take" not in v:
                return extended(v, field)
            if not (isinstance(v, Sequence) and not isinstance(v, str) and len(v) == 2):
                raise fail(field, "a vertex [x, y] or {extend: [a, b]}", v)
            return number(v[0], f"{field}[0]"), number(v[1], f"{field}[1]")

        def mapping(v: Any, field: str) -> Mapping[str, Any]:
            if not isinstance(v, Mapping):
                raise fail(field, "a mapping", v)
            return v

        def listing(v: Any, field: str) -> Sequence[Any]:
            if v is None:
                return ()
            if isinstance(v, (str, bytes)) or not isinstance(v, Sequence):
                raise fail(field, "a list", v)
            return v

        def channel_rule(v: Mapping[str, Any], field: str) -> ChannelRule:
            try:
                return ChannelRule(
                    str(v["algorithm"]), str(v["protocol"]), str(v["collective"]), int(v["ranks_per_node"]),
                    int(v["min_bytes"]), int(v["max_bytes"]), tuple(int(c) for c in v["candidates"]), int(v["ppn"]),
                    int(v["step_data_bytes"]), int(v["grain_bytes"]),
                    tuple((int(f), int(m)) for f, m in v["halvings"]),
                )  # fmt: skip
            except (KeyError, TypeError, ValueError) as exc:
                raise BackendError(f"{where}{field}: missing or malformed: {exc}") from None

        rules: dict[str, ChannelRule] = {}
        out: dict[str, tuple[tuple[str, ...], dict[tuple[int, str], RegionTable]]] = {}
        for key, plat in mapping(platforms, "platforms").items():
            base = f"platforms.{key}"
            plat = mapping(plat, base)
            names = tuple(str(n) for n in listing(plat.get("instance_types"), f"{base}.instance_types"))
            if not names:
                raise fail(f"{base}.instance_types", "a list of instance type names", plat.get("instance_types"))
            tables: dict[tuple[int, str], RegionTable] = {}
            for ti, tab in enumerate(listing(plat.get("tables"), f"{base}.tables")):
                tf = f"{base}.tables[{ti}]"
                tab = mapping(tab, tf)
                coll, ppn = tab.get("collective"), tab.get("ranks_per_node")
                if coll not in COLLECTIVES:
                    raise fail(f"{tf}.collective", f"one of {', '.join(COLLECTIVES)}", coll)
                if isinstance(ppn, bool) or not isinstance(ppn, int) or ppn < 1:
                    raise fail(f"{tf}.ranks_per_node", "a positive integer", ppn)
                regions = []
                for ri, reg in enumerate(listing(tab.get("regions"), f"{tf}.regions")):
                    rf = f"{tf}.regions[{ri}]"
                    reg = mapping(reg, rf)
                    if reg.get("algorithm") not in NCCL_ALGORITHMS:
                        raise fail(f"{rf}.algorithm", f"one of {', '.join(NCCL_ALGORITHMS)}", reg.get("algorithm"))
                    if reg.get("protocol") not in NCCL_PROTOCOLS:
                        raise fail(f"{rf}.protocol", f"one of {', '.join(NCCL_PROTOCOLS)}", reg.get("protocol"))
                    verts = listing(reg.get("vertices"), f"{rf}.vertices")
                    if len(verts) < 2:
                        raise fail(f"{rf}.vertices", "at least two vertices", verts)
                    pts = tuple(point(v, f"{rf}.vertices[{vi}]") for vi, v in enumerate(verts))
                    regions.append(TunerRegion(reg["algorithm"], reg["protocol"], pts))
                tables[(ppn, coll)] = RegionTable(tuple(regions), str(tab.get("source", "")))
            out[str(key)] = (names, tables)
            if plat.get("nchannels") is not None:
                rules[str(key)] = channel_rule(mapping(plat["nchannels"], f"{base}.nchannels"), f"{base}.nchannels")
        return cls(str(data.get("plugin", "")), str(data.get("version", "")), str(data.get("source", "")),
                   min_nodes, out, rules)  # fmt: skip


_LOADED: dict[tuple[str, int, int], RegionTuner] = {}


def load_region_tuner(path: str | Path) -> RegionTuner:
    """The region tuner in the YAML file ``path``, parsed once per file version; :class:`BackendError` naming the
    file when it cannot be read or is malformed."""
    p = Path(path)
    try:
        stat = p.stat()
        key = (str(p), stat.st_mtime_ns, stat.st_size)
        if key not in _LOADED:  # read with collsim's one YAML loader (collsim.safeyaml, through read_yaml)
            _LOADED[key] = RegionTuner.from_mapping(read_yaml(p), str(p))
        return _LOADED[key]
    except OSError as exc:
        raise BackendError(f"{p}: cannot read the tuner plugin's regions: {exc}") from None
    except TopologyError as exc:
        raise BackendError(f"cannot read the tuner plugin's regions: {exc}") from None


@dataclass(frozen=True)
class PluginPick:
    """What a tuner plugin decides for one collective: the pair (None: NCCL's cost model picks), where in its
    tables, and the channel count it sets (None: NCCL's own), with that pair only or (``every_pair``) with whatever
    pair NCCL runs."""

    algorithm: str | None
    protocol: str | None
    where: str
    channels: int | None = None
    every_pair: bool = False

    def channels_for(self, pair: tuple[str, str]) -> int | None:
        """The channel count the plugin sets when NCCL runs ``pair`` (algorithm, protocol), None for NCCL's own."""
        return self.channels if self.every_pair or (self.algorithm, self.protocol) == pair else None

    def note(self) -> str:
        """The pick in words, for a result's notes."""
        if self.algorithm is None:
            text = f"NCCL's cost model picks ({self.where} picks no pair)"
        else:
            text = f"{self.algorithm}/{self.protocol} picked by {self.where}"
        if self.channels is not None:  # the schedule caps it at the communicator's channels
            text += f"{',' if self.algorithm is None else ', which also'} sets nChannels={self.channels} (capped at "
            text += "the communicator's channels)"
        return text


@dataclass(frozen=True)
class ActiveTuner:
    """A region tuner in use on a cluster: its tables and the platform key the cluster's instance type maps to."""

    tuner: RegionTuner
    platform: str
    instance_type: str

    def pick(
        self, nnodes: int, ranks_per_node: int, collective: str, nbytes: int, applicable: Callable[[str, str], bool]
    ) -> PluginPick | None:
        """What the plugin picks for ``collective`` of ``nbytes`` on ``nnodes`` nodes of ``ranks_per_node`` ranks,
        among the ``applicable`` pairs, with the channel count it sets (:meth:`channels`); None when it leaves the
        choice to NCCL (fewer than ``min_nodes`` nodes, no table for this case, or no applicable region containing
        the point)."""
        if nnodes < self.tuner.min_nodes:
            return None
        table = self.tuner.table(self.platform, ranks_per_node, collective)
        if table is None:
            return None
        found = table.pick(nbytes, nnodes * ranks_per_node, applicable)
        if found is None:
            return None
        i, region = found
        where = (f"{self.tuner.plugin} {self.tuner.version} region tuner ({self.instance_type}, {collective}, "
                 f"{ranks_per_node} ranks per node: region {i + 1} of {len(table.regions)})")  # fmt: skip
        a, p = region.algorithm, region.protocol
        return PluginPick(a, p, where, self.channels(nnodes, ranks_per_node, collective, a, p, nbytes))

    def channels(self, nnodes: int, ranks_per_node: int, collective: str, algorithm: str, protocol: str,
                 nbytes: int) -> int | None:  # fmt: skip
        """The channel count the plugin sets with its pick (``algorithm``, ``protocol``), None where it sets none
        (every platform but p6; other pairs, sizes or ranks per node)."""
        rule = self.tuner.channel_rules.get(self.platform)
        if rule is None or (algorithm, protocol, collective) != (rule.algorithm, rule.protocol, rule.collective):
            return None
        if ranks_per_node != rule.ranks_per_node or not rule.min_bytes <= nbytes <= rule.max_bytes:
            return None
        return rule.channels(nbytes, nnodes)


#: NVIDIA's example tuner's CSV names (plugin.c parseCollType, parseAlgorithm, parseProtocol) as collsim names them;
#: a name it does not know it takes as the first entry's (allreduce, ring, simple: the functions' "default").
_CSV_COLLECTIVES = {"allreduce": "allreduce", "broadcast": "broadcast", "reduce": "reduce", "allgather": "allgather",
                    "reducescatter": "reduce_scatter"}  # fmt: skip
_CSV_ALGORITHMS = {"ring": "Ring", "tree": "Tree", "collnet_direct": "CollNetDirect", "collnet_chain": "CollNetChain",
                   "nvls": "NVLS", "nvls_tree": "NVLSTree", "pat": "PAT"}  # fmt: skip
_CSV_PROTOCOLS = {"simple": "Simple", "ll": "LL", "ll128": "LL128"}
#: plugin.c MAX_LINE_LENGTH: fgets reads a line in pieces of at most 255 characters
_CSV_LINE_CHARS = 255


@dataclass(frozen=True)
class CsvTunerLine:
    """One line of the example tuner's CSV (1-based ``line`` in its file): ``channels`` -1 keeps the plugin's
    default (one channel), ``nnodes``, ``nranks``, ``pipe_ops`` and ``reg_buff`` -1 match any."""

    line: int
    collective: str
    min_bytes: int
    max_bytes: int
    algorithm: str
    protocol: str
    channels: int
    nnodes: int = -1
    nranks: int = -1
    pipe_ops: int = -1
    reg_buff: int = -1

    def matches(self, collective: str, nbytes: int, nnodes: int, nranks: int) -> bool:
        """Whether the line applies to one collective as nccl-tests issues it (one operation in the group, no
        registered buffers: numPipeOps 1, regBuff 0)."""
        return (self.collective == collective and self.min_bytes <= nbytes <= self.max_bytes
                and self.nnodes in (-1, nnodes) and self.nranks in (-1, nranks)
                and self.pipe_ops in (-1, 1) and self.reg_buff in (-1, 0))  # fmt: skip


def read_tuner_csv(text: str, file: str) -> tuple[tuple[CsvTunerLine, ...], list[str]]:
    r"""The lines NVIDIA's example tuner loads from its CSV (plugin.c ``loadConfig``), and notes on lines it skips
    or reads otherwise than they look: a line starting with ``#`` or empty is skipped; fields are split at commas
    and trimmed; a line of fewer than 8 fields is skipped, fields past the 10th are dropped; an unknown collective,
    algorithm or protocol is read as allreduce, ring or simple, as the plugin does. Numbers that are not integers,
    a byte range that is empty, and channels below -1 are errors naming the file and line (the plugin would read
    them with atoi and strtoull as something else).

    >>> lines, notes = read_tuner_csv("# c\nallreduce,0,65536,tree,ll,-1,1,-1\nallgather,1,2,nvls\n", "t.conf")
    >>> [(x.line, x.collective, x.algorithm, x.protocol, x.channels) for x in lines]
    [(2, 'allreduce', 'Tree', 'LL', -1)]
    >>> notes
    ['t.conf line 3: 4 fields; the plugin skips a line of fewer than 8']
    """
    lines: list[CsvTunerLine] = []
    notes: list[str] = []

    def integer(value: str, what: str, n: int) -> int:
        try:
            return int(value.strip(), 10)  # a line's \r (CRLF files) is not part of the number
        except ValueError:
            raise BackendError(f"{file}: line {n}: {what} {value!r}: expected an integer") from None

    for n, raw in enumerate(text.split("\n"), start=1):
        if not raw or raw.startswith("#"):
            continue
        if len(raw) > _CSV_LINE_CHARS:
            notes.append(f"{file} line {n}: {len(raw)} characters; the plugin reads a line in pieces of "
                         f"{_CSV_LINE_CHARS}, so its fields past that go to a line of their own")  # fmt: skip
        # strtok(",") skips empty fields; each field is trimmed of spaces and tabs
        fields = [f.strip(" \t") for f in raw[:_CSV_LINE_CHARS].split(",") if f]
        if len(fields) < 8:
            notes.append(f"{file} line {n}: {len(fields)} fields; the plugin skips a line of fewer than 8")
            continue
        fields = fields[:10]
        coll, algo, proto = fields[0], fields[3], fields[4]
        for value, table, default, what in ((coll, _CSV_COLLECTIVES, "allreduce", "collective"),
                                            (algo, _CSV_ALGORITHMS, "ring", "algorithm"),
                                            (proto, _CSV_PROTOCOLS, "simple", "protocol")):  # fmt: skip
            if value not in table:
                notes.append(f"{file} line {n}: {what} {value!r} is not one the plugin knows "
                             f"({', '.join(table)}): it reads it as {default}")  # fmt: skip
        lo, hi = integer(fields[1], "min_bytes", n), integer(fields[2], "max_bytes", n)
        if lo < 0 or hi < lo:
            raise BackendError(f"{file}: line {n}: bytes {lo}..{hi}: expected 0 <= min_bytes <= max_bytes")
        channels = integer(fields[5], "channels", n)
        if channels < -1:
            raise BackendError(f"{file}: line {n}: channels {channels}: expected a count, 0 (NCCL's own) or -1")
        names = ("nNodes", "nRanks", "numPipeOps", "regBuff")
        rest = [integer(v, names[i], n) for i, v in enumerate(fields[6:])]
        rest += [-1] * (4 - len(rest))
        lines.append(CsvTunerLine(n, _CSV_COLLECTIVES.get(coll, "allreduce"), lo, hi, _CSV_ALGORITHMS.get(algo, "Ring"),
                                  _CSV_PROTOCOLS.get(proto, "Simple"), channels, *rest))  # fmt: skip
    return tuple(lines), notes


@dataclass(frozen=True)
class ExampleTuner:
    """NVIDIA's example tuner plugin as one NCCL release runs it (``topologies/software/nccl.yaml``
    ``example_tuner``): from 2.27.5 the first matching line of its CSV (``lines``) whose pair NCCL can run picks
    that pair, and its channels unless -1; the plugin's default is one channel (``default_channels``) for every
    collective (matched or not), none before 2.22.3; the stubs of 2.19-2.27.3 (``lines`` empty, ``stub``) zero
    Ring/Simple's cost wherever NCCL can run it; from 2.28.3 its init edits NCCL's tuner constants
    (``edits_constants``), which NCCL's cost model then prices with."""

    lines: tuple[CsvTunerLine, ...]
    where: str
    default_channels: int | None
    stub: bool = False
    #: whether its init edits NCCL's tuner constants (2.28.3 on: :meth:`NcclConstants.with_example_tuner_edits`)
    edits_constants: bool = False

    def pick(
        self, nnodes: int, ranks_per_node: int, collective: str, nbytes: int, applicable: Callable[[str, str], bool]
    ) -> PluginPick:
        """The plugin's answer for one collective: its pair (None: none, NCCL's cost model picks) and the channels
        it sets, whatever pair NCCL runs."""
        if self.stub and applicable("Ring", "Simple"):
            return PluginPick("Ring", "Simple", self.where, self.default_channels, every_pair=True)
        for ln in self.lines:
            if ln.matches(collective, nbytes, nnodes, nnodes * ranks_per_node) and applicable(ln.algorithm,
                                                                                              ln.protocol):
                channels = self.default_channels if ln.channels == -1 else (ln.channels or None)
                return PluginPick(ln.algorithm, ln.protocol, f"line {ln.line} of {self.where}", channels, True)
        return PluginPick(None, None, self.where, self.default_channels, every_pair=True)


def example_tuner(
    releases: ExampleTunerReleases, version: tuple[int, int, int] | None, config: str | None, base: str | None,
) -> tuple[ExampleTuner | None, str]:
    """NVIDIA's example tuner for an NCCL ``version`` (None: the latest) with its CSV ``config``
    (NCCL_TUNER_CONFIG_FILE; None: the plugin's default file name) relative to ``base``, and a note saying what it
    does here. A missing or unreadable file is no lines, as the plugin takes it (it then picks nothing and still
    sets one channel)."""
    v = version or (99, 0, 0)
    if v < releases.since:
        return None, "NCCL_TUNER_PLUGIN: NCCL loads tuner plugins from 2.19 on; its own cost model picks here"
    default = 1 if v >= releases.one_channel_since else None
    if v < releases.csv_since:
        where = "NVIDIA's example tuner (a stub before 2.27.5: Ring/Simple wherever NCCL can run it)"
        note = where + (", with one channel (its default nChannels)" if default else "")
        return ExampleTuner((), where, default, stub=True), note
    path = Path(config or releases.default_config_file)
    if not path.is_absolute():
        path = Path(base or ".") / path
    notes: list[str] = []
    try:
        text = read_text_file(path)
    except FileReadError as exc:
        text = ""
        notes.append(f"its file {path} cannot be read ({exc}); the plugin then loads no line")
    lines, skipped = read_tuner_csv(text, str(path))
    notes += skipped
    where = f"{path} (NVIDIA's example tuner)"
    note = (f"tuner: NVIDIA's example tuner with {len(lines)} line(s) of {path}; every collective runs on the "
            "channels a matching line gives, else on one channel (the plugin's default nChannels = 1, "
            "plugin.c v2.30.7-1 line 361, which a line's -1 keeps)")  # fmt: skip
    edits = v >= releases.edits_constants_since
    if edits:
        note += ("; NCCL's cost model prices with the plugin's edits of its constants (2.28.3 on: NVLS hwLat[NET] "
                 "24 us; Blackwell's Tree and Ring/LL128 per-channel caps from 3 nodes 15 and 20 GB/s)")  # fmt: skip
    if notes:
        note += "; " + "; ".join(notes)
    return ExampleTuner(lines, where, default, edits_constants=edits), note


def resolve_tuner(
    tuner_plugins: Mapping[str, tuple[str, str]],
    net_plugins: Sequence[str],
    instance_type: str | None,
    env_value: str | None,
    force_type: str | None,
    bundled: bool,
    folder: Path,
) -> tuple[ActiveTuner | None, str | None]:
    """Which tuner plugin NCCL loads here, and a note saying so (None when nothing needs saying).

    Parameters
    ----------
    tuner_plugins : Mapping
        The plugins collsim models: network plugin name -> (tables file, the word NCCL_TUNER_PLUGIN names it by).
    net_plugins : sequence of str
        The cluster's NICs' network plugins (NIC preset ``nccl_net_plugin``).
    instance_type : str or None
        The node template's ``instance_type``.
    env_value : str or None
        NCCL_TUNER_PLUGIN as set.
    force_type : str or None
        OFI_NCCL_TUNER_TYPE (``"Internal"`` turns aws-ofi-nccl's tuner off).
    bundled : bool
        Whether this NCCL loads the network plugin's bundled tuner when NCCL_TUNER_PLUGIN opens nothing (2.21 on).
    folder : Path
        Where the tables files are (``topologies/software``).
    """
    chosen: str | None = None
    if env_value:
        base = Path(env_value).name.lower()
        chosen = next((name for name, (_f, word) in tuner_plugins.items() if word in base), None)
        if chosen is None:
            return None, (f"NCCL_TUNER_PLUGIN={env_value}: a tuner plugin collsim does not model; NCCL's own cost "
                          "model picks the algorithm and protocol here")  # fmt: skip
    elif bundled:
        chosen = next((p for p in net_plugins if p in tuner_plugins), None)
    if chosen is None:
        return None, None
    if force_type == "Internal":
        return None, f"OFI_NCCL_TUNER_TYPE=Internal: {chosen}'s tuner leaves the choice to NCCL's own"
    tuner = load_region_tuner(folder / tuner_plugins[chosen][0])
    platform = tuner.platform_of(instance_type)
    if platform is None:
        known = ", ".join(n for names, _t in tuner.platforms.values() for n in names)
        what = f"instance type {instance_type}" if instance_type else "a node template without an instance_type"
        return None, (f"{chosen}'s tuner has tables for {known} only ({what}): NCCL's own cost model picks")
    assert instance_type is not None
    note = (f"algorithm and protocol: {tuner.plugin} {tuner.version}'s region tuner ({instance_type}) from "
            f"{tuner.min_nodes} nodes on, NCCL's own cost model where it has no region")  # fmt: skip
    return ActiveTuner(tuner, platform, instance_type), note
