"""The exec target: vLLM's own start-up check, in a fresh process.

vLLM (vllm/v1/worker/utils.py, request_memory) takes free/total from
torch.cuda.mem_get_info() after its CUDA context exists and raises when
free < ceil(total * gpu_memory_utilization). This does the same, once.

  python3 check.py --util 0.9 --out RESULT.json
Exit 0 when the check passes, 1 (with vLLM's message) when it fails.
"""
import time

T_EXEC = time.time()  # first thing: when the exec happened (plus interpreter start-up)

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--util", type=float, required=True)
p.add_argument("--out", required=True)
a = p.parse_args()

import torch  # noqa: E402

torch.cuda.init()
free, total = torch.cuda.mem_get_info()
t_check = time.time()
requested = math.ceil(total * a.util)
ok = free >= requested
GiB = 1 << 30
res = {
    "pid": os.getpid(),
    "t_exec": T_EXEC,
    "t_check": t_check,
    "free": free,
    "total": total,
    "requested": requested,
    "ok": ok,
}
with open(a.out, "w") as f:
    json.dump(res, f)
if not ok:
    print(
        f"ValueError: Free memory on device cuda:0 ({free / GiB:.2f}/{total / GiB:.2f} GiB) on startup "
        f"is less than desired GPU memory utilization ({a.util}, {requested / GiB:.2f} GiB).",
        file=sys.stderr,
    )
    sys.exit(1)
print(f"check passed: free {free / GiB:.2f} GiB >= requested {requested / GiB:.2f} GiB", file=sys.stderr)
