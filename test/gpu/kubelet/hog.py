"""The incident's dying engine, on the host: takes over the memory a stopping model hands it.

  python3 hog.py DIR
A model (test/gpu/kubelet/model.py) that gets SIGTERM writes DIR/NAME.want holding
"MiB SECONDS" and frees its memory; this process allocates that much at once,
writes DIR/NAME.held (the model then exits), and keeps it SECONDS (`never`: until
DIR/release-all appears), then frees it. Every hold is logged with its times and
this process's pid (the pid nvidia-smi's --query-compute-apps names).
"""
import os
import sys
import threading
import time

import torch

MiB = 1 << 20
directory = sys.argv[1]
torch.cuda.init()
torch.zeros(1, device="cuda")
print(f"hog pid {os.getpid()} watching {directory}", flush=True)


def hold(name, mib, seconds):
    try:
        buf = torch.empty(mib * MiB, dtype=torch.uint8, device="cuda")
        buf.zero_()
        torch.cuda.synchronize()
    except RuntimeError as error:  # the model's memory is not free yet: say so, and take what there is
        print(f"{time.time():.3f} {name}: could not take {mib} MiB at once: {error}", flush=True)
        buf = None
    open(os.path.join(directory, f"{name}.held"), "w").close()
    print(f"{time.time():.3f} {name}: holding {mib} MiB for {seconds} s", flush=True)
    end = None if seconds == "never" else time.time() + float(seconds)
    while (end is None or time.time() < end) and not os.path.exists(os.path.join(directory, "release-all")):
        time.sleep(0.05)
    del buf
    torch.cuda.empty_cache()
    print(f"{time.time():.3f} {name}: released", flush=True)


seen = set()
while True:
    for entry in sorted(os.listdir(directory)):
        if entry.endswith(".want") and entry not in seen:
            seen.add(entry)
            with open(os.path.join(directory, entry)) as f:
                mib, seconds = f.read().split()
            threading.Thread(target=hold, args=(entry[: -len(".want")], int(mib), seconds), daemon=True).start()
    time.sleep(0.02)
