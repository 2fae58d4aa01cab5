#!/usr/bin/env bash
# How the GPU probe files in this folder were produced (README.md, "h200-probe"): the machine's facts, then
# `collsim bench --probe` on GPU 0, then `collsim bench --probe-check` of the result against the GPU preset.
#
# Usage, from the repository root, on a machine with one CUDA GPU, torch with CUDA and collsim importable:
#   bash scenarios/measurements/probe-gpu.sh OUTDIR [RANKS]
# RANKS: the Gloo rank counts sharing the GPU (default 1,2,4,8). Writes OUTDIR/machine.txt, OUTDIR/probe.json,
# OUTDIR/probe-check.txt and OUTDIR/probe.log. Where nvcc is on the PATH the probe also builds and runs its C++
# programs (collsim/bench/cuda/: the fixed costs without Python, a pointer chase through device memory) and keeps
# their rows in probe.json's `native`. Takes 2-5 minutes on an H200 host with 16 CPUs.
# (The h200-probe files were made by this script's first version, at commit cb4ac07, which built cuda_latency.cu
# itself into cuda-latency.jsonl; the pointer chase was run by hand: README.md says how.)
set -u
out=${1:?usage: probe-gpu.sh OUTDIR [RANKS]}
ranks=${2:-1,2,4,8}
py=${PYTHON:-python3}
mkdir -p "$out"
{
    echo "# date (UTC)"; date -u +%Y-%m-%dT%H:%M:%SZ
    echo "# uname -a"; uname -a
    echo "# nvidia-smi"; nvidia-smi
    echo "# nvidia-smi --query-gpu"
    nvidia-smi --query-gpu=name,pci.device_id,driver_version,pcie.link.gen.max,pcie.link.gen.current,pcie.link.width.max,pcie.link.width.current,clocks.max.sm,clocks.max.mem,memory.total --format=csv
    echo "# nvidia-smi topo -m"; nvidia-smi topo -m
    echo "# lscpu"; lscpu
    echo "# free -g"; free -g
    echo "# nproc"; nproc
    echo "# python, torch, CUDA, NCCL"
    "$py" -c "import sys, torch; print(sys.version); print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version())"
} >"$out/machine.txt" 2>&1
echo "machine facts: $out/machine.txt"
PYTHONUNBUFFERED=1 "$py" -m collsim bench --probe --probe-ranks "$ranks" -w 5 -n 20 -o "$out/probe.json" \
    2>&1 | tee "$out/probe.log"
"$py" -m collsim bench --probe-check "$out/probe.json" --text "$out/probe-check.txt" && cat "$out/probe-check.txt"
