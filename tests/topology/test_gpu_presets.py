"""GPU presets (topologies/presets/gpus.yaml): every preset loads, every number has a source, `arch` follows NCCL's
choice of tuner table by compute capability, and the optional fields parse with their units."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from tests_support import edit_file

from collsim.topology import TopologyError, load_presets, load_topology, topology_from_template
from collsim.topology.presets import GPU_SCHEMA, PEAK_TFLOPS_DTYPES, parse_field

REPO_TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"
GPUS_YAML = REPO_TOPOLOGIES / "presets" / "gpus.yaml"

#: Presets issue 12 asked for, plus the three that were there before.
EXPECTED = {
    "a100-sxm4-80gb",
    "h100-sxm5-80gb",
    "rtx-2080ti",
    "v100-sxm2-32gb",
    "a100-sxm4-40gb",
    "h100-pcie-80gb",
    "h200-sxm-141gb",
    "b200-sxm-180gb",
    "l40s",
    "rtx-3090",
    "rtx-4090",
    "rtx-5090",
}

#: GPU_SCHEMA fields that hold numbers (so need a `<field>_source` wherever a preset sets them).
NUMERIC_TYPES = {
    "bandwidth",
    "time",
    "positive_int",
    "count",
    "fraction",
    "size",
    "pcie_gen",
    "pcie_lanes",
    "peak_tflops",
}
NUMERIC_FIELDS = sorted(f for f, (ftype, _) in GPU_SCHEMA.items() if ftype in NUMERIC_TYPES)


def _raw() -> dict[str, dict[str, Any]]:
    data = yaml.safe_load(GPUS_YAML.read_text())
    assert isinstance(data, dict)
    return data


def nccl_arch(sm: int) -> set[str]:
    """The tuner-table rows NCCL's ncclTopoTuneModel (src/graph/tuning.cc) would use for compute capability `sm`."""
    if sm >= 100:
        return {"blackwell"}
    if sm >= 90:
        return {"hopper"}
    if sm >= 80:
        return {"ampere"}
    # Volta's table; collsim names sm75's copy of it `turing`.
    return {"volta", "turing"} if sm >= 75 else {"volta"}


def test_every_gpu_preset_loads() -> None:
    gpus = load_presets().gpus
    assert set(gpus) >= EXPECTED
    assert set(gpus) == set(_raw())
    for name, g in gpus.items():
        assert g["preset"] == name
        for field, (_, required) in GPU_SCHEMA.items():
            assert field in g, f"{name}: {field} missing from the parsed preset"
            if required:
                assert g[field] is not None, f"{name}.{field}"


def test_new_fields_filled_for_every_preset() -> None:
    """sm_count, pcie_gen/pcie_lanes, hbm_capacity and peak_tflops are set (with units) on the issue-12 presets."""
    gpus = load_presets().gpus
    for name in sorted(EXPECTED):
        g = gpus[name]
        assert isinstance(g["sm_count"], int) and g["sm_count"] > 0, name
        assert g["pcie_gen"] in (3, 4, 5, 6), name
        assert g["pcie_lanes"] == 16, name
        assert isinstance(g["hbm_capacity"], int) and g["hbm_capacity"] >= 8e9, name
        peak = g["peak_tflops"]
        assert isinstance(peak, dict) and "float32" in peak and "float16" in peak, name
        assert set(peak) <= set(PEAK_TFLOPS_DTYPES), name
        assert all(isinstance(v, float) and v > 0 for v in peak.values()), name
        # A Tensor Core peak is never below the FP32 vector peak.
        assert peak["float16"] >= peak["float32"], name


@pytest.mark.parametrize("name", sorted(_raw()))
def test_every_number_has_a_source(name: str) -> None:
    raw = _raw()[name]
    assert isinstance(raw.get("source"), str) and raw["source"].strip()
    for field in NUMERIC_FIELDS:
        if field in raw:
            src = raw.get(f"{field}_source")
            assert isinstance(src, str) and src.strip(), f"{name}.{field} has no {field}_source"
    # arch is chosen by NCCL from sm: new presets say so.
    if name in EXPECTED - {"a100-sxm4-80gb", "h100-sxm5-80gb", "rtx-2080ti"}:
        assert "tuning.cc" in raw["arch_source"], name


def test_every_source_key_names_a_field() -> None:
    for name, raw in _raw().items():
        for key in raw:
            if key.endswith("_source"):
                assert key[: -len("_source")] in GPU_SCHEMA, f"{name}.{key} documents no field"


def test_arch_matches_sm() -> None:
    """`arch` is the tuner table NCCL picks by compute capability, and a row nccl.yaml has."""
    archs = set(yaml.safe_load((REPO_TOPOLOGIES / "software" / "nccl.yaml").read_text())["ll_max_bw_gbps"])
    for name, g in load_presets().gpus.items():
        assert g["arch"] in archs, name
        assert g["arch"] in nccl_arch(g["sm"]), f"{name}: sm {g['sm']} -> NCCL uses {nccl_arch(g['sm'])}"


def test_nccl_arch_mapping() -> None:
    # Ada (sm89) uses Ampere's table, GeForce Blackwell (sm120) Blackwell's.
    assert nccl_arch(89) == {"ampere"} and nccl_arch(86) == {"ampere"}
    assert nccl_arch(120) == {"blackwell"} and nccl_arch(100) == {"blackwell"}
    assert nccl_arch(90) == {"hopper"} and "turing" in nccl_arch(75) and nccl_arch(70) == {"volta"}


def test_new_preset_numbers() -> None:
    gpus = load_presets().gpus
    assert (gpus["v100-sxm2-32gb"]["sm"], gpus["v100-sxm2-32gb"]["arch"]) == (70, "volta")
    assert (gpus["l40s"]["sm"], gpus["l40s"]["arch"]) == (89, "ampere")
    assert (gpus["rtx-4090"]["sm"], gpus["rtx-4090"]["arch"]) == (89, "ampere")
    assert (gpus["rtx-5090"]["sm"], gpus["rtx-5090"]["arch"]) == (120, "blackwell")
    assert (gpus["b200-sxm-180gb"]["sm"], gpus["b200-sxm-180gb"]["arch"]) == (100, "blackwell")
    assert gpus["h200-sxm-141gb"]["hbm_bandwidth"] == pytest.approx(4.8e12)
    assert gpus["h200-sxm-141gb"]["hbm_capacity"] == 141 * 10**9
    assert gpus["a100-sxm4-40gb"]["hbm_bandwidth"] == pytest.approx(1555e9)
    assert gpus["a100-sxm4-80gb"]["peak_tflops"] == {
        "float32": 19.5,
        "tf32": 156.0,
        "bfloat16": 312.0,
        "float16": 312.0,
    }
    assert gpus["h100-pcie-80gb"]["sm_count"] == 114 and gpus["h100-sxm5-80gb"]["sm_count"] == 132
    # the RTX 3090's NVLink bridge (x4 links) has no link preset and no template wires it yet
    assert gpus["rtx-3090"]["nvlinks"] == 0 and gpus["rtx-3090"]["nvlink"] is None
    wired = {"v100-sxm2-32gb": (6, "nvlink2"), "b200-sxm-180gb": (18, "nvlink5"), "h200-sxm-141gb": (18, "nvlink4")}
    for name, (count, link) in wired.items():
        assert (gpus[name]["nvlinks"], gpus[name]["nvlink"]) == (count, link), name
    for name in ("h200-sxm-141gb", "h100-pcie-80gb", "a100-sxm4-40gb", "v100-sxm2-32gb", "b200-sxm-180gb"):
        assert gpus[name]["nvlink"] in load_presets().links, name
    # NCCL's per-link NVLink figures (nccl.md section 3): 20.0 (sm70), 40.1 (sm100) GB/s
    links = load_presets().links
    assert links["nvlink2"]["bandwidth"] * links["nvlink2"]["efficiency"] == pytest.approx(20.0e9)
    assert links["nvlink5"]["bandwidth"] * links["nvlink5"]["efficiency"] == pytest.approx(40.1e9)
    # GeForce cards: no CUDA peer access with NVIDIA's driver.
    assert not any(gpus[n]["p2p"] for n in ("rtx-2080ti", "rtx-3090", "rtx-4090", "rtx-5090"))


def test_existing_values_unchanged() -> None:
    """The fields the three original presets had keep their values."""
    gpus = load_presets().gpus
    a100, h100, rtx = gpus["a100-sxm4-80gb"], gpus["h100-sxm5-80gb"], gpus["rtx-2080ti"]
    assert (a100["sm"], a100["arch"], a100["nvlinks"], a100["nvlink"], a100["p2p"]) == (
        80,
        "ampere",
        12,
        "nvlink3",
        True,
    )
    assert a100["hbm_bandwidth"] == 2.0e12 and a100["nccl_channel_bw"] == 20e9
    assert a100["kernel_launch_latency"] == pytest.approx(4e-6) and a100["memcpy_latency"] == pytest.approx(8e-6)
    assert (h100["sm"], h100["arch"], h100["nvlinks"], h100["nvlink"]) == (90, "hopper", 18, "nvlink4")
    assert h100["hbm_bandwidth"] == 3.35e12 and h100["nccl_channel_bw"] == 30e9
    assert (rtx["sm"], rtx["arch"], rtx["nvlinks"], rtx["p2p"]) == (75, "turing", 0, False)
    assert rtx["hbm_bandwidth"] == 616e9 and rtx["memcpy_latency"] == pytest.approx(10e-6)


# ----------------------------------------------------------------------------------------------------------------
# Parsers of the optional fields


def test_optional_field_parsers() -> None:
    assert parse_field("size", "80GB") == 80 * 10**9
    assert parse_field("size", "24GiB") == 24 * 2**30
    assert parse_field("pcie_gen", 5) == 5
    assert parse_field("pcie_lanes", 16) == 16
    assert parse_field("peak_tflops", {"fp32": 19.5, "bf16": 312, "tf32": 156, "fp8": 1979}) == {
        "float32": 19.5,
        "bfloat16": 312.0,
        "tf32": 156.0,
        "fp8": 1979.0,
    }
    for ftype, bad in (
        ("size", "80"),  # a bare number is bytes: fine, but zero is not
        ("size", "0GB"),
        ("size", "80 parsecs"),
        ("size", True),
        ("pcie_gen", 2),
        ("pcie_gen", 7),
        ("pcie_gen", "5"),
        ("pcie_lanes", 12),
        ("pcie_lanes", 0),
        ("peak_tflops", 312),
        ("peak_tflops", {}),
        ("peak_tflops", {"float32": -1}),
        ("peak_tflops", {"float32": "19.5TFLOPS"}),
        ("peak_tflops", {"float32": True}),
        ("peak_tflops", {"float32": float("inf")}),
        ("peak_tflops", {"int8": 624}),
        ("peak_tflops", {"fp16": 312, "float16": 312}),
    ):
        if (ftype, bad) == ("size", "80"):
            assert parse_field(ftype, bad) == 80
            continue
        with pytest.raises(ValueError):
            parse_field(ftype, bad)


def test_bad_peak_tflops_names_file_and_field(topo_dir: Path) -> None:
    gpus = topo_dir / "presets/gpus.yaml"
    edit_file(gpus, "peak_tflops: {float32: 15.7, float16: 125}", "peak_tflops: {float32: -15.7}")
    with pytest.raises(TopologyError) as ei:
        load_presets()
    err = ei.value
    assert err.file is not None and err.file.endswith("gpus.yaml")
    assert err.field == "v100-sxm2-32gb.peak_tflops"
    assert "float32" in err.message and "positive" in err.message
    assert "gpus.yaml" in str(err) and "v100-sxm2-32gb.peak_tflops" in str(err)


def test_unknown_peak_tflops_dtype_lists_valid(topo_dir: Path) -> None:
    edit_file(topo_dir / "presets/gpus.yaml", "peak_tflops: {float32: 15.7, float16: 125}", "peak_tflops: {fp128: 1}")
    with pytest.raises(TopologyError) as ei:
        load_presets()
    assert ei.value.field == "v100-sxm2-32gb.peak_tflops"
    assert "fp128" in ei.value.message and "bfloat16" in ei.value.message and "tf32" in ei.value.message


@pytest.mark.parametrize(
    ("old", "new", "field", "words"),
    [
        ("hbm_capacity: 32GB", "hbm_capacity: 32 parsecs", "v100-sxm2-32gb.hbm_capacity", "size"),
        (
            'pcie_gen: 3\n  pcie_gen_source: "NVIDIA V100',
            'pcie_gen: 9\n  pcie_gen_source: "NVIDIA V100',
            "v100-sxm2-32gb.pcie_gen",
            "PCIe generation",
        ),
        ("sm_count: 80", "sm_count: 0", "v100-sxm2-32gb.sm_count", "positive integer"),
        ('cuda_names: ["NVIDIA B200"]', 'cuda_names: "NVIDIA B200"', "b200-sxm-180gb.cuda_names", "list of device"),
        ('cuda_names: ["NVIDIA B200"]', 'cuda_names: ["NVIDIA B200", "nvidia b200"]', "b200-sxm-180gb.cuda_names",
         "given twice"),
    ],
)
def test_bad_optional_field_names_file_and_field(topo_dir: Path, old: str, new: str, field: str, words: str) -> None:
    edit_file(topo_dir / "presets/gpus.yaml", old, new)
    with pytest.raises(TopologyError) as ei:
        load_presets()
    assert ei.value.file is not None and ei.value.file.endswith("gpus.yaml")
    assert ei.value.field == field and words in ei.value.message


def test_spec_override_of_optional_field(build: Any) -> None:
    """Templates may override the new fields per device, with the same parsing."""
    topo = build(
        [
            {
                "name": "gpu",
                "count": 1,
                "kind": "gpu",
                "preset": "h100-pcie-80gb",
                "spec": {"peak_tflops": {"bf16": 700}},
            },
            {"name": "cpu", "count": 1, "kind": "cpu", "preset": "xeon-8480"},
        ],
        [{"a": "gpu0", "b": "cpu0", "preset": "pcie5"}],
    )
    assert topo.device("n0/gpu0").spec["peak_tflops"] == {"bfloat16": 700.0}
    assert topo.device("n0/gpu0").spec["sm_count"] == 114
    with pytest.raises(TopologyError, match=r"devices\.0\.spec\.pcie_lanes: expected a PCIe link width"):
        topology_from_template(
            {
                "name": "t",
                "devices": [{"name": "gpu", "count": 1, "kind": "gpu", "preset": "l40s", "spec": {"pcie_lanes": 3}}],
                "links": [],
            }
        )


@pytest.mark.parametrize("gpu", ["l40s", "rtx-3090", "rtx-4090", "rtx-5090", "h100-pcie-80gb"])
def test_pcie_workstation_builds_with_new_presets(gpu: str) -> None:
    topo = load_topology("pcie-workstation", node_params={"gpu": gpu, "gpus": 2, "pcie_gen": 4})
    assert [g.spec["preset"] for g in topo.gpus()] == [gpu, gpu]


def test_rtx_pro_6000_blackwell() -> None:
    """The RTX PRO 6000 Blackwell: the RTX 5090's sm120 GPU with 188 SMs, 96 GB and P2P over PCIe Gen5 x16 (no
    NVLink); its dense tensor peaks follow from NVIDIA's FP4 figure, each doubling of the width halving the rate."""
    gpus = load_presets().gpus
    pro, geforce = gpus["rtx-pro-6000-blackwell"], gpus["rtx-5090"]
    assert (pro["sm"], pro["arch"]) == (geforce["sm"], geforce["arch"]) == (120, "blackwell")
    assert pro["p2p"] and not geforce["p2p"] and pro["gpudirect_rdma"]
    assert (pro["nvlinks"], pro["nvlink"], pro["pcie_gen"], pro["pcie_lanes"]) == (0, None, 5, 16)
    assert pro["sm_count"] == 188 and pro["hbm_capacity"] == 96 * 10**9
    assert pro["hbm_bandwidth"] == pytest.approx(512 / 8 * 28e9)  # 512-bit GDDR7 at 28 Gb/s a pin
    peak = pro["peak_tflops"]
    assert peak["fp8"] == 2 * peak["bfloat16"] == 2 * peak["float16"] == 4 * peak["tf32"] == 1000.0
    assert tuple(pro["pci_device_ids"]) == ("10de:2bb5",)


def test_pcie_workstation_builds_with_the_rtx_pro_6000() -> None:
    box = {"gpu": "rtx-pro-6000-blackwell", "gpus": 4, "pcie_gen": 5, "gpus_per_switch": 2, "cpu": "epyc-9654"}
    topo = load_topology("pcie-workstation", node_params=box)
    assert [g.spec["p2p"] for g in topo.gpus()] == [True] * 4
    assert topo.path_class("n0/gpu0", "n0/gpu1") == "PIX" and topo.path_class("n0/gpu0", "n0/gpu2") == "PHB"
