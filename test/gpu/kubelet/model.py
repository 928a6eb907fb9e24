"""vLLM's start on a real GPU, for the kubelet proof (test/gpu/kubelet_proof.py).

Run as the container's `vllm serve MODEL [flags]` (the image's /opt/venv/bin/vllm
execs it). It does what vLLM does before it serves, and nothing else:
- its CUDA context first, then vLLM's own check (vllm/v1/worker/utils.py,
  request_memory): requested = ceil(total x gpu_memory_utilization) with free and
  total from torch.cuda.mem_get_info(); short, vLLM's ValueError and exit 1;
- otherwise it holds what vLLM would (the requested memory, its context included)
  and answers GET /health on --port.
On SIGTERM it plays the incident's slow reclaim: the memory it held is taken over
by the host's hog (test/gpu/kubelet/hog.py, through the hand-off directory) for
HANDOFF_SECONDS (or `never`) before this process exits, so that the restarted
container finds it still held, as the incident's dying engine left it.

Environment: HANDOFF_DIR (the hog's directory, mounted from the host),
HANDOFF_SECONDS (default 20).
"""
import http.server
import math
import os
import signal
import sys
import threading
import time

GiB = 1 << 30
MiB = 1 << 20


def log(text):
    print(f"INFO {time.strftime('%m-%d %H:%M:%S')} [vllm-gpu-standin] {text}", flush=True)


def flag(args, name, default):
    value = default
    names = {name, name.replace("-", "_")}
    for i, arg in enumerate(args):
        key, eq, rest = arg.partition("=")
        if key in names:
            value = rest if eq else (args[i + 1] if i + 1 < len(args) else value)
    return value


args = sys.argv[1:]
if args and args[0] == "serve":
    args = args[1:]
util = float(flag(args, "--gpu-memory-utilization", "0.9"))
port = int(flag(args, "--port", "8000"))
log(f"gpu_memory_utilization={util} port={port} pid={os.getpid()}")

import torch  # noqa: E402

torch.cuda.init()
context = torch.zeros(1, device="cuda")  # the CUDA context, as vLLM's worker has it before the check
torch.cuda.synchronize()
free, total = torch.cuda.mem_get_info()
requested = math.ceil(total * util)
if free < requested:
    # vLLM's own words (request_memory, format_gib: two decimals of GiB).
    print(
        f"ValueError: Free memory on device cuda:0 ({free / GiB:.2f}/{total / GiB:.2f} GiB) on startup is less than "
        f"desired GPU memory utilization ({util}, {requested / GiB:.2f} GiB). Decrease GPU memory utilization or "
        "reduce GPU memory used by other processes.",
        file=sys.stderr,
        flush=True,
    )
    sys.exit(1)

# What vLLM holds once up: its budget, the context included (measured by nvidia-smi's free).
own_before = total - free
held = torch.empty(max(requested - own_before - 256 * MiB, MiB), dtype=torch.uint8, device="cuda")
held.zero_()
torch.cuda.synchronize()
free_after, _ = torch.cuda.mem_get_info()
held_mib = (total - free_after - (total - free - own_before)) // MiB
log(f"check passed: free {free / GiB:.2f} GiB >= requested {requested / GiB:.2f} GiB; holding {held_mib} MiB")


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        ok = self.path == "/health"
        self.send_response(200 if ok else 404)
        self.end_headers()

    def log_message(self, *a):
        pass


server = http.server.ThreadingHTTPServer(("0.0.0.0", port), Health)
threading.Thread(target=server.serve_forever, daemon=True).start()
log(f"Starting vLLM API server on http://0.0.0.0:{port}")


def on_term(signum, frame):
    seconds = os.environ.get("HANDOFF_SECONDS", "20")
    directory = os.environ.get("HANDOFF_DIR")
    log(f"received SIGTERM: {held_mib} MiB stay held for {seconds} s more (the host's hog takes them over)")
    global held
    held = None
    torch.cuda.empty_cache()
    if directory:
        name = f"{os.getpid()}-{time.time():.3f}"
        with open(os.path.join(directory, f".{name}"), "w") as f:
            f.write(f"{held_mib} {seconds}\n")
        os.rename(os.path.join(directory, f".{name}"), os.path.join(directory, f"{name}.want"))
        # The hog answers once it holds the memory (at most 20 s): only then does this process end.
        for _ in range(400):
            if os.path.exists(os.path.join(directory, f"{name}.held")):
                break
            time.sleep(0.05)
    os._exit(0)


signal.signal(signal.SIGTERM, on_term)
while True:
    time.sleep(3600)
