"""Holds GPU memory so that nvidia-smi's free memory sits in a chosen window (the threshold proof).

  python3 hold.py --device 0      # then, on stdin, one command a line:
    free N      allocate or release 2 MiB blocks until nvidia-smi says N <= free <= N + 1 MiB
                (or as close above N as 2 MiB steps allow); answers one JSON line
    quit        release everything and exit
The caching allocator is off (PYTORCH_NO_CUDA_MEMORY_CACHING=1), so every block is its own
cudaMalloc and freeing one gives its 2 MiB back to the driver at once.
"""
import json
import os
import subprocess
import sys

os.environ["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"

import argparse  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--device", type=int, default=0)
a = p.parse_args()

import torch  # noqa: E402

SMI = os.environ.get("NVSMI_REAL", "nvidia-smi")
MiB = 1 << 20
BLOCK = 2 * MiB


def smi_free():
    out = subprocess.run([SMI, f"--id={a.device}", "--query-gpu=memory.free", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=True).stdout
    return int(out.strip())


torch.cuda.set_device(a.device)
torch.cuda.init()
torch.empty(1, device=f"cuda:{a.device}")  # the context, and the allocator's first block
big = []      # large blocks, to get near the target fast
blocks = []   # 2 MiB blocks, for the last steps


def hold(target):
    free = smi_free()
    # below the target: give back large blocks first, then 2 MiB ones
    while free < target and (big or blocks):
        (big or blocks).pop()
        free = smi_free()
    # far above: one large block (64 MiB short of the target, in 2 MiB), then 2 MiB steps
    if free - target > 96:
        n = (free - target - 64) // 2 * 2
        big.append(torch.empty(n * MiB, dtype=torch.uint8, device=f"cuda:{a.device}"))
        free = smi_free()
    while free - 2 >= target:
        blocks.append(torch.empty(BLOCK, dtype=torch.uint8, device=f"cuda:{a.device}"))
        free = smi_free()
    return free


print(json.dumps({"ready": True, "pid": os.getpid(), "free": smi_free()}), flush=True)
for line in sys.stdin:
    cmd = line.split()
    if not cmd:
        continue
    if cmd[0] == "quit":
        break
    if cmd[0] == "free":
        target = int(cmd[1])
        got = hold(target)
        print(json.dumps({"target": target, "free": got, "held_mib": sum(t.numel() for t in big + blocks) // MiB}), flush=True)
big.clear()
blocks.clear()
