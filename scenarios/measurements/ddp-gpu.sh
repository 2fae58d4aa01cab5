#!/usr/bin/env bash
# Issue 14's GPU item, ready for a lent GPU: real DistributedDataParallel iterations with Gloo on CUDA tensors
# (ProcessGroupGloo stages each bucket through pinned host memory), 1 process and N processes sharing GPU 0.
#
# Usage, from the repository root, on a machine with a CUDA GPU, torch with CUDA and collsim importable:
#   bash scenarios/measurements/ddp-gpu.sh OUTDIR [NPROCS]
# NPROCS: the process counts, comma-separated (default 1,2). Per count writes OUTDIR/ddp-gpu-Nproc.json (the
# measurement), .yaml (the model with per-layer times measured on the GPU, for `collsim step`) and .txt (summary).
# The MLP is collsim's default (37.8 M float32 parameters); caps 1, 25, 100 MiB and --no-sync 4.
# What collsim can predict of it: 1 process (a Gloo allreduce of one rank: its two copies per bucket, no ring),
# with pcie-workstation (gpus: 1, the GPU's preset) and the .yaml as training.model; several processes sharing
# the GPU run their kernels time-sliced, which `collsim step` does not model (it refuses cluster.ranks_per_gpu > 1).
set -u
out=${1:?usage: ddp-gpu.sh OUTDIR [NPROCS]}
counts=${2:-1,2}
py=${PYTHON:-python3}
mkdir -p "$out"
{
    echo "# date (UTC)"; date -u +%Y-%m-%dT%H:%M:%SZ
    echo "# nvidia-smi"; nvidia-smi
    echo "# lscpu"; lscpu
    echo "# python, torch, CUDA"
    "$py" -c "import sys, torch; print(sys.version); print(torch.__version__, torch.version.cuda)"
} >"$out/machine.txt" 2>&1
for n in ${counts//,/ }; do
    PYTHONUNBUFFERED=1 "$py" -m collsim bench --ddp --device cuda --nprocs "$n" --bucket-cap-mb 1,25,100 \
        --no-sync 4 -w 5 -n 20 --rounds 4 -o "$out/ddp-gpu-${n}proc.json" --model-out "$out/ddp-gpu-${n}proc.yaml" \
        --text "$out/ddp-gpu-${n}proc.txt" 2>&1 | tee "$out/ddp-gpu-${n}proc.log"
done
