"""What a fresh process takes of a GPU's free memory before vLLM's check, step by step
(the ground of contextMiB's estimate, docs/gpu-results.md). Run on an idle GPU:

  python3 context.py OUT.json
Each step reads nvidia-smi's free memory; the steps: CUDA initialised (torch.cuda.init and
mem_get_info, as vLLM's snapshot does), a first tensor, then a one-process NCCL group with a
first all-reduce (what each rank of a multi-GPU engine has set up when it checks).
"""
import json
import os
import subprocess
import sys

SMI = os.environ.get("NVSMI_REAL", "nvidia-smi")


def smi_free():
    out = subprocess.run([SMI, "--id=0", "--query-gpu=memory.free", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=True).stdout
    return int(out.strip())


steps = {"idle": smi_free()}
import torch  # noqa: E402

torch.cuda.set_device(0)
torch.cuda.init()
free, total = torch.cuda.mem_get_info()
steps["cuda_init"] = smi_free()
steps["cuda_free_after_init_mib"] = free / (1 << 20)
steps["cuda_total_mib"] = total / (1 << 20)
x = torch.ones(1, device="cuda:0")
steps["first_tensor"] = smi_free()
import torch.distributed as dist  # noqa: E402

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29517")
try:
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda:0"))
    dist.all_reduce(x)
    torch.cuda.synchronize()
    steps["nccl_all_reduce"] = smi_free()
    dist.destroy_process_group()
except Exception as e:  # noqa: BLE001 - recorded, not fatal: the rest still stands
    steps["nccl_error"] = repr(e)[:300]
res = {
    "steps_smi_free_mib": steps,
    "context_mib": steps["idle"] - steps["cuda_init"],
    "context_by_cuda_free_mib": round(steps["idle"] - steps["cuda_free_after_init_mib"], 1),
    "first_tensor_mib": steps["cuda_init"] - steps["first_tensor"],
    "nccl_mib": steps["first_tensor"] - steps["nccl_all_reduce"] if "nccl_all_reduce" in steps else None,
}
json.dump(res, open(sys.argv[1], "w"), indent=1)
print(json.dumps(res))
