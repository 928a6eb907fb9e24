"""A dying engine: holds a fraction of the GPU, and keeps it for a while after SIGTERM.

  python3 hog.py --fraction 0.9 --hold-after-term 5 --ready FILE [--device N]
  --device N            the GPU to hold (index as CUDA numbers it in this process)
  --hold-after-term N   seconds to keep the memory after SIGTERM, then exit (releasing it)
  --hold-after-term -1  ignore SIGTERM: hold until SIGKILL (memory that never comes back)
Writes FILE (JSON: pid, held bytes, free/total after allocating) once the memory is held.
"""
import argparse
import json
import os
import signal
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--fraction", type=float, default=0.9)
p.add_argument("--hold-after-term", type=float, default=5.0)
p.add_argument("--ready", required=True)
p.add_argument("--device", type=int, default=0)
a = p.parse_args()

import torch  # noqa: E402  (after argument errors, which should not wait for CUDA)

torch.cuda.set_device(a.device)
free0, total = torch.cuda.mem_get_info()
n = int(total * a.fraction)
buf = torch.empty(n, dtype=torch.uint8, device=f"cuda:{a.device}")
buf.zero_()  # touch it all
torch.cuda.synchronize()
free1, _ = torch.cuda.mem_get_info()

terms = []
if a.hold_after_term < 0:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
else:
    signal.signal(signal.SIGTERM, lambda s, f: terms.append(time.time()))

tmp = a.ready + ".tmp"
with open(tmp, "w") as f:
    json.dump({"pid": os.getpid(), "device": a.device, "held_bytes": n, "free_before": free0, "free_after": free1, "total": total}, f)
os.rename(tmp, a.ready)

while not terms:
    time.sleep(0.01)
time.sleep(a.hold_after_term)
sys.stdout.flush()
os._exit(0)  # the driver frees the memory as the process ends
