"""Preset libraries: exact numbers and error messages."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests_support import edit_file

from collsim.topology import TopologyError, load_presets, load_topology, topologies_dir


def test_link_numbers_match_nccl() -> None:
    lib = load_presets()
    nv3 = lib.links["nvlink3"]
    assert nv3["bandwidth"] == 25e9 and nv3["efficiency"] == 0.8 and nv3["kind"] == "nvlink"
    assert nv3["bandwidth"] * nv3["efficiency"] == pytest.approx(20e9, rel=1e-12)
    assert lib.links["nvlink4"]["bandwidth"] * lib.links["nvlink4"]["efficiency"] == pytest.approx(20.6e9, rel=1e-12)
    # NCCL's width*speed/80: Gen3 x16 = 12, Gen4 x16 = 24, Gen5 x16 = 48 GB/s.
    for name, nccl in (("pcie3", 12e9), ("pcie4", 24e9), ("pcie5", 48e9)):
        p = lib.links[name]
        assert p["bandwidth"] * p["efficiency"] == pytest.approx(nccl, rel=1e-9), name
    assert lib.links["ib-hdr"]["bandwidth"] == 25e9  # 200 Gb/s / 8 bits per byte
    assert lib.links["ib-ndr"]["bandwidth"] == 50e9
    assert lib.links["eth-100g"]["bandwidth"] == 12.5e9
    assert lib.links["amd-if"]["bandwidth"] == 16e9 and lib.links["amd-if"]["kind"] == "upi"
    assert lib.links["upi-spr"]["bandwidth"] == 22e9
    assert lib.links["nvlink3"]["latency"] == pytest.approx(0.2e-6)


def test_only_the_measured_pcie_link_has_a_dma_rate() -> None:
    lib = load_presets()
    assert [n for n, rec in lib.links.items() if rec.get("dma_efficiency") is not None] == ["pcie5"]
    topo = load_topology("hgx-h100")
    pcie = [ln for ln in topo.links() if ln.kind == "pcie"]
    assert pcie and all(ln.dma_ratio == pytest.approx(0.8727 / 0.76171875, rel=1e-12) for ln in pcie)
    assert all(ln.dma_ratio == 1.0 for ln in topo.links() if ln.kind != "pcie")
    assert all(ln.dma_ratio == 1.0 for ln in load_topology("dgx-a100").links())  # Gen4: not measured


def test_device_presets_in_si() -> None:
    lib = load_presets()
    a100 = lib.gpus["a100-sxm4-80gb"]
    assert (a100["sm"], a100["nvlinks"], a100["nvlink"], a100["p2p"]) == (80, 12, "nvlink3", True)
    assert a100["hbm_bandwidth"] == 2.0e12 and a100["nccl_channel_bw"] == 20e9
    assert a100["kernel_launch_latency"] == pytest.approx(4e-6)
    assert lib.gpus["h100-sxm5-80gb"]["nccl_channel_bw"] == 30e9
    assert lib.gpus["rtx-2080ti"]["p2p"] is False
    assert lib.cpus["xeon-8480"]["memory_bandwidth"] == pytest.approx(307.2e9)
    assert lib.cpus["epyc-7742"]["cores"] == 64 and lib.cpus["epyc-7742"]["vendor"] == "amd"
    assert lib.nics["connectx-7-ndr"]["speed"] == 50e9 and lib.nics["eth-100g"]["rdma"] is False
    for library in ("links", "gpus", "cpus", "nics"):
        for name, rec in lib.library(library).items():
            assert rec["source"], f"{library}.{name} has no source"


def test_every_cpu_number_has_a_source_and_nccls_net_overhead_follows_the_vendor() -> None:
    """Each number of a CPU preset says where it comes from (``<field>_source``); NCCL's tuner net overhead is
    tuning.cc getNetOverhead's: 2 us on an x86 AMD host, 1 us on Intel and elsewhere (v2.30.7-1 lines 228-233)."""
    import yaml

    from collsim.topology.presets import CPU_SCHEMA

    raw = yaml.safe_load((topologies_dir() / "presets" / "cpus.yaml").read_text())
    numbers = [k for k, (kind, _) in CPU_SCHEMA.items() if kind in ("positive_int", "bandwidth", "time", "pcie_gen")]
    for name, rec in raw.items():
        missing = [k for k in numbers if k in rec and not str(rec.get(f"{k}_source", "")).strip()]
        assert not missing, f"cpus.{name}: no source for {missing}"
    for name, cpu in load_presets().cpus.items():
        assert cpu["nccl_net_overhead"] == pytest.approx(2e-6 if cpu["vendor"] == "amd" else 1e-6), name


def test_every_link_number_has_a_source() -> None:
    import yaml

    raw = yaml.safe_load((topologies_dir() / "presets" / "links.yaml").read_text())
    for name, rec in raw.items():
        numbers = ("bandwidth", "efficiency", "latency", "dma_efficiency")
        missing = [k for k in numbers if k in rec and not rec.get(f"{k}_source")]
        assert not missing, f"links.{name}: no source for {missing}"


def test_unknown_link_kind_lists_valid(topo_dir: Path) -> None:
    edit_file(topo_dir / "presets/links.yaml", "kind: nvlink", "kind: warp")
    with pytest.raises(TopologyError) as ei:
        load_topology("dgx-a100")
    err = ei.value
    assert err.file is not None and err.file.endswith("links.yaml")
    assert err.field == "nvlink3.kind"
    assert "warp" in err.message and "nvlink, pcie, upi, c2c, ib, roce, eth" in err.message


def test_missing_bandwidth(topo_dir: Path) -> None:
    edit_file(topo_dir / "presets/links.yaml", "  bandwidth: 25GB/s\n", "")
    with pytest.raises(TopologyError, match=r"links\.yaml: nvlink3\.bandwidth: missing bandwidth"):
        load_topology("dgx-a100")


@pytest.mark.parametrize("bad", ["0GB/s", "-5GB/s", "0", "fast"])
def test_non_positive_or_bad_bandwidth(topo_dir: Path, bad: str) -> None:
    edit_file(topo_dir / "presets/links.yaml", "bandwidth: 25GB/s", f"bandwidth: {bad}")
    with pytest.raises(TopologyError) as ei:
        load_topology("dgx-a100")
    assert ei.value.field == "nvlink3.bandwidth"
    assert "bandwidth" in ei.value.message


def test_broken_yaml_names_line(topo_dir: Path) -> None:
    (topo_dir / "presets/nics.yaml").write_text("a: [1, 2\nb: 3\n")
    with pytest.raises(TopologyError) as ei:
        load_topology("dgx-a100")
    assert ei.value.file is not None and ei.value.file.endswith("nics.yaml")
    assert "broken YAML" in ei.value.message and "line " in ei.value.message


def test_empty_preset_file(topo_dir: Path) -> None:
    (topo_dir / "presets/cpus.yaml").write_text("# nothing\n")
    with pytest.raises(TopologyError, match=r"cpus\.yaml: empty file"):
        load_topology("dgx-a100")


def test_unknown_preset_field(topo_dir: Path) -> None:
    edit_file(topo_dir / "presets/gpus.yaml", "  arch: ampere\n", "  arch: ampere\n  archh: x\n")
    with pytest.raises(TopologyError) as ei:
        load_topology("dgx-a100")
    assert ei.value.field == "a100-sxm4-80gb.archh" and "valid fields" in ei.value.message


def test_dangling_cross_reference(topo_dir: Path) -> None:
    edit_file(topo_dir / "presets/nics.yaml", "link: ib-hdr", "link: ib-xdr")
    with pytest.raises(TopologyError) as ei:
        load_topology("dgx-a100")
    assert ei.value.field == "connectx-6-hdr.link" and "ib-xdr" in ei.value.message and "ib-ndr" in ei.value.message


def test_nic_plugin_env() -> None:
    # AWS's EFA plugin sets NCCL_PROTO=simple on p4d/p4de (aws-ofi-nccl platform-aws.c); other NICs set nothing
    lib = load_presets()
    assert lib.nics["efa-100g"]["nccl_plugin_env"] == {"NCCL_PROTO": "Simple"}
    assert lib.nics["connectx-6-hdr"].get("nccl_plugin_env") is None


@pytest.mark.parametrize(
    ("bad", "expected"),
    [("{PROTO: Simple}", "expected NCCL_\\* variable names, got 'PROTO'"), ("Simple", "expected a mapping")],
)
def test_nic_plugin_env_errors(topo_dir: Path, bad: str, expected: str) -> None:
    edit_file(topo_dir / "presets/nics.yaml", "nccl_plugin_env: {NCCL_PROTO: Simple}", f"nccl_plugin_env: {bad}")
    with pytest.raises(TopologyError, match=expected) as ei:
        load_topology("aws-p4de")
    assert ei.value.field == "efa-100g.nccl_plugin_env"
