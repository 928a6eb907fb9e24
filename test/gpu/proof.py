"""Scenarios of the GPU proof; run through test/gpu/run-gpu-proof.sh, which sets PATH so
that `nvidia-smi` is a shim counting queries into $NVSMI_LOG.

  race        a dying engine (hog.py) keeps ~90 % of the card for --hold s after SIGTERM;
              the wrapped start `sh -ec SCRIPT -- python3 check.py` is launched at once;
              check.py (vLLM's own check) must pass on its first and only attempt.
  no-preflight  the same start without the preflight: the bug, reproduced.
  timeout     memory never released: the preflight (timeout patched to --timeout-s) gives up loudly.
  cold        free GPU: time from start to exec, with and without the preflight.
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PY = sys.executable
HOG = os.path.join(HERE, "hog.py")
CHECK = os.path.join(HERE, "check.py")

p = argparse.ArgumentParser()
p.add_argument("--script", required=True, help="the preflight script (args[0] of a wrapped container)")
p.add_argument("--out", required=True)
p.add_argument("--repeats", type=int, default=3)
p.add_argument("--no-preflight-repeats", type=int, default=2)
p.add_argument("--cold", type=int, default=10)
p.add_argument("--hold", type=float, default=6.0, help="seconds the dying engine keeps the memory after SIGTERM")
p.add_argument("--fraction", type=float, default=0.9, help="share of CUDA's total the dying engine holds")
p.add_argument("--timeout-s", type=int, default=10)
p.add_argument("--shells", default="/bin/sh", help="comma list; races repeat under the first, once under the others")
p.add_argument("--only", default="race,no-preflight,timeout,cold")
a = p.parse_args()

os.makedirs(a.out, exist_ok=True)
WORK = os.path.join(a.out, "work")
os.makedirs(WORK, exist_ok=True)
SCRIPT = open(a.script).read()
m = re.search(r"^util=([0-9.]+) ", SCRIPT, re.M)
if not m:
    sys.exit("cannot find the util= settings line in the script")
UTIL = m.group(1)
SHELLS = [s for s in a.shells.split(",") if s]
ONLY = set(a.only.split(","))
results = {"script": a.script, "util": UTIL, "hold_s": a.hold, "fraction": a.fraction}


def log(*x):
    print(*x, flush=True)


def smi_free():
    """One reading straight from the real nvidia-smi (not counted)."""
    out = subprocess.run(
        [os.environ["NVSMI_REAL"], "--query-gpu=index,memory.total,memory.free,memory.used", "--format=csv,noheader,nounits"],
        capture_output=True, text=True,
    ).stdout.strip()
    return out


def queries(path):
    if not os.path.exists(path):
        return 0
    return sum(1 for line in open(path) if "--query-gpu" in line)


def start_hog(tag, hold):
    ready = os.path.join(WORK, f"{tag}.ready")
    errf = open(os.path.join(WORK, f"{tag}.hog.log"), "w")
    hog = subprocess.Popen([PY, HOG, "--fraction", str(a.fraction), "--hold-after-term", str(hold), "--ready", ready],
                           stdout=errf, stderr=subprocess.STDOUT)
    t = time.time()
    while not os.path.exists(ready):
        if hog.poll() is not None:
            raise RuntimeError(f"hog exited {hog.returncode}: {open(errf.name).read()}")
        if time.time() - t > 300:
            raise RuntimeError("hog not ready in 300 s")
        time.sleep(0.02)
    info = json.load(open(ready))
    box = {}

    def waiter():
        hog.wait()
        box["t_exit"] = time.time()

    th = threading.Thread(target=waiter, daemon=True)
    th.start()
    return hog, info, box, th


def lines(err):
    return [l for l in err.splitlines() if l.startswith("vram-preflight:")]


def race(tag, shell, preflight=True):
    hog, info, box, th = start_hog(tag, a.hold)
    before = smi_free()
    smilog = os.path.join(WORK, f"{tag}.nvidia-smi.log")
    res_path = os.path.join(WORK, f"{tag}.check.json")
    env = dict(os.environ, NVSMI_LOG=smilog)
    target = [PY, CHECK, "--util", UTIL, "--out", res_path]
    cmd = [shell, "-ec", SCRIPT, "--", *target] if preflight else target
    t_term = time.time()
    hog.send_signal(signal.SIGTERM)
    start = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = start.communicate(timeout=a.hold + 300)
    t_end = time.time()
    th.join(timeout=a.hold + 60)
    chk = json.load(open(res_path)) if os.path.exists(res_path) else None
    r = {
        "tag": tag,
        "shell": shell if preflight else None,
        "preflight": preflight,
        "exit_code": start.returncode,
        "check": chk,
        "check_passed": bool(chk and chk["ok"]) and start.returncode == 0,
        "hog": info,
        "smi_before_term": before,
        "t_release_after_term_s": round(box["t_exit"] - t_term, 3) if "t_exit" in box else None,
        "exec_after_term_s": round(chk["t_exec"] - t_term, 3) if chk else None,
        "exec_after_release_s": round(chk["t_exec"] - box["t_exit"], 3) if chk and "t_exit" in box else None,
        "check_after_term_s": round(chk["t_check"] - t_term, 3) if chk else None,
        "total_s": round(t_end - t_term, 3),
        "nvidia_smi_queries": queries(smilog),
        "preflight_lines": lines(err),
        "stderr_tail": err[-2000:],
    }
    log(json.dumps({k: v for k, v in r.items() if k not in ("stderr_tail", "hog")}))
    return r


def timeout_case():
    hog, info, box, th = start_hog("timeout", -1)
    term_file = os.path.join(os.path.abspath(a.out), "termination-log")
    if os.path.exists(term_file):
        os.remove(term_file)
    script = re.sub(r"timeout_s=\d+", f"timeout_s={a.timeout_s}", SCRIPT, count=1)
    script = re.sub(r"^msg_file=.*$", f"msg_file={term_file}", script, count=1, flags=re.M)
    smilog = os.path.join(WORK, "timeout.nvidia-smi.log")
    res_path = os.path.join(WORK, "timeout.check.json")
    env = dict(os.environ, NVSMI_LOG=smilog)
    t0 = time.time()
    hog.send_signal(signal.SIGTERM)  # ignored: the memory never comes back
    start = subprocess.Popen([SHELLS[0], "-ec", script, "--", PY, CHECK, "--util", UTIL, "--out", res_path],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = start.communicate(timeout=a.timeout_s + 120)
    dt = time.time() - t0
    hog.kill()
    th.join(timeout=60)
    r = {
        "shell": SHELLS[0],
        "timeout_s": a.timeout_s,
        "hog_pid": info["pid"],
        "exit_code": start.returncode,
        "duration_s": round(dt, 3),
        "exec_happened": os.path.exists(res_path),
        "nvidia_smi_queries": queries(smilog),
        "preflight_lines": lines(err),
        "termination_message": open(term_file).read() if os.path.exists(term_file) else None,
        "stderr_tail": err[-3000:],
    }
    log(json.dumps({k: v for k, v in r.items() if k != "stderr_tail"}))
    return r


def label(shell):
    return "busybox" if "busybox" in shell else os.path.basename(shell)


def cold(shell, n):
    def once(cmd, smilog):
        env = dict(os.environ, NVSMI_LOG=smilog)
        t0 = time.time()
        pr = subprocess.run(cmd, env=env, capture_output=True, text=True)
        t_exec = float(pr.stdout.strip())
        return t_exec - t0, pr

    with_pf, without, qs, first_lines = [], [], [], None
    for i in range(n):
        smilog = os.path.join(WORK, f"cold-{label(shell)}{i}.nvidia-smi.log")
        dt, pr = once([shell, "-ec", SCRIPT, "--", "date", "+%s.%N"], smilog)
        with_pf.append(dt)
        qs.append(queries(smilog))
        first_lines = first_lines or lines(pr.stderr)
        dt0, _ = once([shell, "-ec", 'exec "$@"', "--", "date", "+%s.%N"], os.devnull)
        without.append(dt0)
    # and once with the real check as the exec target
    res_path = os.path.join(WORK, f"cold-{label(shell)}-check.json")
    pr = subprocess.run([shell, "-ec", SCRIPT, "--", PY, CHECK, "--util", UTIL, "--out", res_path],
                        capture_output=True, text=True)
    chk = json.load(open(res_path)) if os.path.exists(res_path) else None
    # CUDA_VISIBLE_DEVICES by index and by the real UUID: still one query, still exec
    uuid = subprocess.run([os.environ["NVSMI_REAL"], "--query-gpu=uuid", "--format=csv,noheader"],
                          capture_output=True, text=True).stdout.split()[0]
    cvd = {}
    for key, val in (("index", "0"), ("uuid", uuid), ("uuid_prefix", uuid[:12])):
        smilog = os.path.join(WORK, f"cold-{label(shell)}-cvd-{key}.nvidia-smi.log")
        env = dict(os.environ, NVSMI_LOG=smilog, CUDA_VISIBLE_DEVICES=val)
        pr2 = subprocess.run([shell, "-ec", SCRIPT, "--", "true"], env=env, capture_output=True, text=True)
        cvd[key] = {"value": val, "exit_code": pr2.returncode, "queries": queries(smilog), "lines": lines(pr2.stderr)}
    r = {
        "shell": shell,
        "runs": n,
        "cuda_visible_devices": cvd,
        "start_to_exec_ms_with_preflight": [round(x * 1000, 1) for x in with_pf],
        "start_to_exec_ms_without": [round(x * 1000, 1) for x in without],
        "median_ms_with_preflight": round(statistics.median(with_pf) * 1000, 1),
        "median_ms_without": round(statistics.median(without) * 1000, 1),
        "nvidia_smi_queries_per_start": qs,
        "log_line": first_lines,
        "check_after_cold_start": {"exit_code": pr.returncode, "check": chk},
    }
    log(json.dumps(r))
    return r


log("GPU before:", smi_free())
if "race" in ONLY:
    results["race"] = [race(f"race{i + 1}", SHELLS[0]) for i in range(a.repeats)]
    results["race"] += [race(f"race-{label(s)}", s) for s in SHELLS[1:]]
if "no-preflight" in ONLY:
    results["no_preflight"] = [race(f"nopf{i + 1}", None, preflight=False) for i in range(a.no_preflight_repeats)]
if "timeout" in ONLY:
    results["timeout"] = timeout_case()
if "cold" in ONLY:
    results["cold"] = [cold(s, a.cold if i == 0 else max(3, a.cold // 2)) for i, s in enumerate(SHELLS)]
log("GPU after:", smi_free())

with open(os.path.join(a.out, "results.json"), "w") as f:
    json.dump(results, f, indent=1)

# verdicts
ok = True
for r in results.get("race", []):
    ok &= r["check_passed"] and r["exit_code"] == 0
for r in results.get("no_preflight", []):
    ok &= not r["check_passed"]
if "timeout" in results:
    t = results["timeout"]
    ok &= t["exit_code"] == 75 and not t["exec_happened"] and bool(t["termination_message"])
for c in results.get("cold", []):
    ok &= all(q == 1 for q in c["nvidia_smi_queries_per_start"]) and c["check_after_cold_start"]["exit_code"] == 0
    ok &= all(v["exit_code"] == 0 and v["queries"] == 1 for v in c["cuda_visible_devices"].values())
log("VERDICT:", "PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
