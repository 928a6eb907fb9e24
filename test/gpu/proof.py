"""Scenarios of the GPU proof; run through test/gpu/run-gpu-proof.sh, which sets PATH so
that `nvidia-smi` is a shim counting queries into $NVSMI_LOG.

  race        a dying engine (hog.py) keeps ~90 % of the card for --hold s after SIGTERM;
              the wrapped start `sh -ec SCRIPT -- python3 check.py` is launched at once;
              check.py (vLLM's own check) must pass on its first and only attempt.
  no-preflight  the same start without the preflight: the bug, reproduced.
  timeout     memory never released: the preflight (timeout patched to --timeout-s) gives up loudly.
  cold        free GPU: time from start to exec, with and without the preflight.
  slow        (with --faults-warn/--faults-fail) nvidia-smi delayed by the shim (NVSMI_DELAY)
              past the per-query limit: warn starts the check loudly, fail exits 69 saying
              nvidia-smi hung; delayed less than the limit: waits for the answer and passes,
              on a free GPU and during the race.
  sigterm     (with --faults-fail) SIGTERM while a slow query runs: exit 143 within 1 s,
              as PID 1 (unshare --pid) where possible and as a plain process; no nvidia-smi
              (nor the shim) left running 1 s after the exit.
  threshold   (with --threshold SCRIPT...) vLLM's own rule, at each script's utilization u: memory
              held (hold.py) so that nvidia-smi's free sits at the script's need, then 2 MiB under
              it. At the need the wrapped check must start on the first query and vLLM's check
              pass; under it the preflight must wait (exit 75 at a 2 s timeout). Records by how
              much vLLM's check passes (the excess) at the need and just under it.
  context     (on the idle GPU) what a fresh process takes of nvidia-smi's free memory: its CUDA
              context, a first tensor, a one-process NCCL group (context.py): contextMiB's ground.
  child-holds-pipe  (with --faults-warn/--faults-fail) child-holds-pipe.sh: an nvidia-smi that
              leaves a child holding its output; ends at the limit, nothing left running.
  two-gpu     only with >= 2 GPUs: one held, one free; CUDA_VISIBLE_DEVICES by index and by
              UUID selecting the held or the free one, for the race, the cold start and the
              timeout; and no CUDA_VISIBLE_DEVICES (sees both: must wait).
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
HOLD = os.path.join(HERE, "hold.py")
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
p.add_argument("--only", default="race,no-preflight,timeout,cold,slow,sigterm,context,threshold,child-holds-pipe,two-gpu")
p.add_argument("--threshold", nargs="*", default=[], help="scripts rendered at other utilizations (threshold proof)")
p.add_argument("--work", default=None, help="per-run files (default OUT/work)")
p.add_argument("--faults-warn", default=None, help="script rendered with on-unavailable warn and a short per-query limit")
p.add_argument("--faults-fail", default=None, help="the same with on-unavailable fail")
a = p.parse_args()

os.makedirs(a.out, exist_ok=True)
WORK = a.work or os.path.join(a.out, "work")
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


def start_hog(tag, hold, device=None):
    ready = os.path.join(WORK, f"{tag}.ready")
    errf = open(os.path.join(WORK, f"{tag}.hog.log"), "w")
    cmd = [PY, HOG, "--fraction", str(a.fraction), "--hold-after-term", str(hold), "--ready", ready]
    env = None
    if device is not None:
        cmd += ["--device", str(device)]
        # CUDA numbers GPUs fastest first unless told to follow the PCI order nvidia-smi uses
        env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    hog = subprocess.Popen(cmd, stdout=errf, stderr=subprocess.STDOUT, env=env)
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
    term_file = os.path.join(os.path.abspath(WORK), "termination-log")
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




# ---- faults: a slow nvidia-smi, SIGTERM during a query (docs/restart-race.md §8) ----

def script_text(path, tag):
    """A fault script with its termination message redirected into WORK."""
    term_file = os.path.join(os.path.abspath(WORK), f"{tag}.termination-log")
    if os.path.exists(term_file):
        os.remove(term_file)
    text = re.sub(r"^msg_file=.*$", f"msg_file={term_file}", open(path).read(), count=1, flags=re.M)
    return text, term_file


def smi_limit(path):
    m = re.search(r" smi_limit_s=(\d+)", open(path).read())
    if not m:
        sys.exit(f"no smi_limit_s= in {path}: render it with this version")
    return int(m.group(1))


def leftovers(tag):
    """Live processes that inherited VRAM_PROOF_TAG=tag (the shim, python, nvidia-smi, sleeps)."""
    found = []
    marker = f"VRAM_PROOF_TAG={tag}\0".encode()
    for e in os.listdir("/proc"):
        if not e.isdigit():
            continue
        try:
            if marker not in open(f"/proc/{e}/environ", "rb").read():
                continue
            stat = open(f"/proc/{e}/stat").read()
            if stat[stat.rindex(")") + 2] == "Z":
                continue
            cmd = open(f"/proc/{e}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace").strip()
            found.append(f"{e} {cmd[:80]}")
        except OSError:
            pass
    return found


def settle(tag, seconds):
    end = time.time() + seconds
    left = leftovers(tag)
    while left and time.time() < end:
        time.sleep(0.05)
        left = leftovers(tag)
    return left


def slow_case(tag, path, delay, shell, hold=None):
    """The fault script with every query delayed by `delay` s; with `hold`, during the race."""
    text, term_file = script_text(path, tag)
    limit = smi_limit(path)
    smilog = os.path.join(WORK, f"{tag}.nvidia-smi.log")
    res_path = os.path.join(WORK, f"{tag}.check.json")
    env = dict(os.environ, NVSMI_LOG=smilog, NVSMI_DELAY=str(delay), VRAM_PROOF_TAG=tag)
    hog = box = th = None
    if hold is not None:
        hog, _info, box, th = start_hog(tag, hold)
        hog.send_signal(signal.SIGTERM)
    t0 = time.time()
    pr = subprocess.run([shell, "-ec", text, "--", PY, CHECK, "--util", UTIL, "--out", res_path],
                        env=env, capture_output=True, text=True, timeout=limit * 4 + (hold or 0) + 120)
    dt = time.time() - t0
    if th is not None:
        th.join(timeout=60)
    chk = json.load(open(res_path)) if os.path.exists(res_path) else None
    r = {
        "tag": tag,
        "shell": shell,
        "script": os.path.basename(path),
        "on_unavailable": re.search(r"on_unavailable=(\w+)", text).group(1),
        "smi_limit_s": limit,
        "nvidia_smi_delay_s": delay,
        "hold_s": hold,
        "exit_code": pr.returncode,
        "duration_s": round(dt, 3),
        "exec_happened": chk is not None,
        "check_passed": bool(chk and chk["ok"]),
        "nvidia_smi_queries": queries(smilog),
        "preflight_lines": lines(pr.stderr),
        "termination_message": open(term_file).read() if os.path.exists(term_file) else None,
        "left_running_after_2s": settle(tag, 2.0),
        "stderr_other": [l for l in pr.stderr.splitlines() if l and not l.startswith("vram-preflight:")][-10:],
    }
    log(json.dumps(r))
    return r


def slow_verdict(r):
    lim = r["smi_limit_s"]
    if r["left_running_after_2s"]:
        return False
    if r["nvidia_smi_delay_s"] > lim:
        hung = any(f"nvidia-smi did not answer within {lim} s" in l for l in r["preflight_lines"])
        if r["on_unavailable"] == "warn":
            return hung and r["exit_code"] == 0 and r["check_passed"] and r["duration_s"] >= lim
        return hung and r["exit_code"] == 69 and not r["exec_happened"] and bool(r["termination_message"]) \
            and "did not answer" in r["termination_message"]
    # under the limit: waits for the (slow) answer and passes; no warning
    return r["exit_code"] == 0 and r["check_passed"] and not any("WARNING" in l for l in r["preflight_lines"]) \
        and r["duration_s"] >= r["nvidia_smi_delay_s"]


def can_unshare():
    return subprocess.run(["unshare", "--pid", "--fork", "--kill-child", "true"], capture_output=True).returncode == 0


def children(pid):
    out = []
    for e in os.listdir("/proc"):
        if e.isdigit():
            try:
                stat = open(f"/proc/{e}/stat").read()
                if int(stat[stat.rindex(")") + 2:].split()[1]) == pid:
                    out.append(int(e))
            except (OSError, ValueError):
                pass
    return out


def sigterm_case(tag, path, shell, pid1, sig=signal.SIGTERM):
    """SIGTERM (or SIGINT) while the first query is still running (delayed far past the limit)."""
    text, term_file = script_text(path, tag)
    limit = smi_limit(path)
    delay = limit + 30  # the query would be killed at `limit`; the signal comes first
    smilog = os.path.join(WORK, f"{tag}.nvidia-smi.log")
    res_path = os.path.join(WORK, f"{tag}.check.json")
    env = dict(os.environ, NVSMI_LOG=smilog, NVSMI_DELAY=str(delay), VRAM_PROOF_TAG=tag)
    cmd = [shell, "-ec", text, "--", PY, CHECK, "--util", UTIL, "--out", res_path]
    if pid1:
        cmd = ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", *cmd]
    pr = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t0 = time.time()
    while queries(smilog) < 1 and time.time() - t0 < 30:
        time.sleep(0.01)
    time.sleep(min(1.0, limit / 3))  # well inside the slow query
    target = pr.pid
    if pid1:
        for _ in range(200):
            kids = children(pr.pid)
            if kids:
                target = kids[0]
                break
            time.sleep(0.01)
    in_query = any("time.sleep" in l for l in leftovers(tag))  # the shim, still delaying nvidia-smi
    t_sig = time.time()
    os.kill(target, sig)
    try:
        pr.wait(timeout=limit + 60)
    except subprocess.TimeoutExpired:
        pr.kill()
    t_exit = time.time() - t_sig
    left_at_exit = leftovers(tag)
    left_1s = settle(tag, 1.0)
    err = pr.stderr.read()  # after the checks: a process still running holds stderr open
    left_after_limit = settle(tag, limit + 2.0)
    r = {
        "tag": tag,
        "shell": shell,
        "pid1": pid1,
        "signal": signal.Signals(sig).name,
        "smi_limit_s": limit,
        "nvidia_smi_delay_s": delay,
        "query_running_when_signalled": in_query,
        "signal_to_exit_s": round(t_exit, 3),
        "exit_code": pr.returncode,
        "exec_happened": os.path.exists(res_path),
        "nvidia_smi_queries": queries(smilog),
        "preflight_lines": lines(err),
        "left_running_at_exit": left_at_exit,
        "left_running_1s_after_exit": left_1s,
        "left_running_after_limit": left_after_limit,
        "stderr_other": [l for l in err.splitlines() if l and not l.startswith("vram-preflight:")][-10:],
    }
    log(json.dumps(r))
    return r


def sigterm_verdict(r):
    code = 143 if r["signal"] == "SIGTERM" else 130
    ok = r["query_running_when_signalled"] and r["signal_to_exit_s"] < 1.0 and r["exit_code"] == code \
        and not r["exec_happened"] and r["nvidia_smi_queries"] == 1 \
        and r["preflight_lines"][-1:] == [f"vram-preflight: {r['signal']} while waiting for GPU memory, exiting"]
    # as PID 1 the namespace ends with the shell; otherwise the shell kills all it started before it exits
    ok &= not r["left_running_after_limit"] and not r["left_running_1s_after_exit"]
    return ok


# ---- two GPUs (docs/gpu-results.md, Faults on the GPU): a container that sees both, one held ----

def gpu_uuids():
    out = subprocess.run([os.environ["NVSMI_REAL"], "--query-gpu=index,uuid", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout
    return [l.split(", ")[1].strip() for l in out.splitlines() if ", " in l]


def two_gpu():
    uuids = gpu_uuids()
    res = {"gpus": len(uuids)}
    if len(uuids) < 2:
        res["skipped"] = f"needs 2 GPUs, nvidia-smi lists {len(uuids)}"
        log(json.dumps(res))
        return res
    held, free = 1, 0
    selections = [
        ("index-held", str(held), True), ("uuid-held", uuids[held], True),
        ("index-free", str(free), False), ("uuid-free", uuids[free], False),
        ("both", None, True),
    ]
    res["held_gpu"] = held
    res["race"], res["cold"], res["timeout"] = [], [], []
    for name, cvd, waits in selections:
        # race: GPU `held` is released `hold` s after SIGTERM
        tag = f"two-race-{name}"
        hog, _info, box, th = start_hog(tag, a.hold, device=held)
        smilog = os.path.join(WORK, f"{tag}.nvidia-smi.log")
        res_path = os.path.join(WORK, f"{tag}.check.json")
        env = dict(os.environ, NVSMI_LOG=smilog, CUDA_DEVICE_ORDER="PCI_BUS_ID")
        env.pop("CUDA_VISIBLE_DEVICES", None)
        if cvd is not None:
            env["CUDA_VISIBLE_DEVICES"] = cvd
        t_term = time.time()
        hog.send_signal(signal.SIGTERM)
        pr = subprocess.run([SHELLS[0], "-ec", SCRIPT, "--", PY, CHECK, "--util", UTIL, "--out", res_path],
                            env=env, capture_output=True, text=True, timeout=a.hold + 300)
        th.join(timeout=a.hold + 60)
        chk = json.load(open(res_path)) if os.path.exists(res_path) else None
        r = {"selection": name, "cuda_visible_devices": cvd, "expect_wait": waits, "exit_code": pr.returncode,
             "check_passed": bool(chk and chk["ok"]), "queries": queries(smilog),
             "exec_after_term_s": round(chk["t_exec"] - t_term, 3) if chk else None,
             "t_release_after_term_s": round(box["t_exit"] - t_term, 3) if "t_exit" in box else None,
             "preflight_lines": lines(pr.stderr)}
        r["ok"] = r["exit_code"] == 0 and r["check_passed"] and (
            (r["queries"] > 1 and r["exec_after_term_s"] >= a.hold * 0.8) if waits else r["queries"] == 1)
        log(json.dumps(r))
        res["race"].append(r)
    for name, cvd, _ in selections:
        tag = f"two-cold-{name}"
        smilog = os.path.join(WORK, f"{tag}.nvidia-smi.log")
        env = dict(os.environ, NVSMI_LOG=smilog, CUDA_DEVICE_ORDER="PCI_BUS_ID")
        env.pop("CUDA_VISIBLE_DEVICES", None)
        if cvd is not None:
            env["CUDA_VISIBLE_DEVICES"] = cvd
        pr = subprocess.run([SHELLS[0], "-ec", SCRIPT, "--", "true"], env=env, capture_output=True, text=True)
        r = {"selection": name, "cuda_visible_devices": cvd, "exit_code": pr.returncode, "queries": queries(smilog),
             "preflight_lines": lines(pr.stderr)}
        r["ok"] = r["exit_code"] == 0 and r["queries"] == 1
        log(json.dumps(r))
        res["cold"].append(r)
    hog, _info, box, th = start_hog("two-timeout", -1, device=held)
    script = re.sub(r"timeout_s=\d+", f"timeout_s={a.timeout_s}", SCRIPT, count=1)
    script = re.sub(r"^msg_file=.*$", f"msg_file={os.path.join(WORK, 'two-timeout.termination-log')}", script, count=1, flags=re.M)
    for name, cvd, waits in selections:
        smilog = os.path.join(WORK, f"two-timeout-{name}.nvidia-smi.log")
        env = dict(os.environ, NVSMI_LOG=smilog, CUDA_DEVICE_ORDER="PCI_BUS_ID")
        env.pop("CUDA_VISIBLE_DEVICES", None)
        if cvd is not None:
            env["CUDA_VISIBLE_DEVICES"] = cvd
        t0 = time.time()
        pr = subprocess.run([SHELLS[0], "-ec", script, "--", "true"], env=env, capture_output=True, text=True,
                            timeout=a.timeout_s + 120)
        r = {"selection": name, "cuda_visible_devices": cvd, "exit_code": pr.returncode,
             "duration_s": round(time.time() - t0, 3), "queries": queries(smilog), "preflight_lines": lines(pr.stderr)}
        r["ok"] = (r["exit_code"] == 75 and r["duration_s"] >= a.timeout_s) if waits else (r["exit_code"] == 0 and r["queries"] == 1)
        log(json.dumps(r))
        res["timeout"].append(r)
    hog.kill()
    th.join(timeout=60)
    return res

# ---- threshold (docs/restart-race.md, The threshold: vLLM's own rule): the wait ends exactly when vLLM's own check will pass ----

def script_settings(text):
    """util, headroom and the one-GPU context estimate written into a script."""
    m = re.search(r"^util=([0-9.]+) headroom_mib=(\d+) context_mib=(\d+) ", text, re.M)
    if not m:
        sys.exit("no util=... headroom_mib=... context_mib=... line: render the script with this version")
    return m.group(1), int(m.group(2)), int(m.group(3))


def smi_total_reserved():
    out = subprocess.run([os.environ["NVSMI_REAL"], "--id=0", "--query-gpu=memory.total,memory.reserved", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=True).stdout
    total, reserved = (int(x) for x in out.split(","))
    return total, reserved


def ceil_mul(n, u):
    """ceil(n x u) for a decimal string u, on integers (as the script does)."""
    i, _, f = u.partition(".")
    den = 10 ** len(f)
    num = int(i) * den + int(f or "0")
    return -(-n * num // den)


def threshold_runs(paths):
    total, reserved = smi_total_reserved()
    ct = total - reserved
    hold = subprocess.Popen([PY, HOLD, "--device", "0"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=open(os.path.join(WORK, "hold.log"), "w"), text=True)
    ready = json.loads(hold.stdout.readline())
    out = {"nvidia_smi_total": total, "nvidia_smi_reserved": reserved, "cuda_total_expected": ct, "hold_pid": ready["pid"],
           "runs": []}

    def hold_at(target):
        hold.stdin.write(f"free {target}\n")
        hold.stdin.flush()
        return json.loads(hold.stdout.readline())

    def check(tag, u):
        res_path = os.path.join(WORK, f"{tag}.check.json")
        pr = subprocess.run([PY, CHECK, "--util", u, "--out", res_path], capture_output=True, text=True)
        chk = json.load(open(res_path)) if os.path.exists(res_path) else None
        return pr.returncode, chk

    MiB = 1 << 20
    for path in paths:
        text = open(path).read()
        u, headroom, context = script_settings(text)
        text = re.sub(r"timeout_s=\d+", "timeout_s=2", text, count=1)
        text = re.sub(r"^msg_file=.*$", f"msg_file={os.path.join(os.path.abspath(WORK), 'threshold.termination-log')}", text, count=1, flags=re.M)
        request = ceil_mul(ct, u)
        need = request + context + headroom
        r = {"u": u, "context_mib": context, "headroom_mib": headroom, "vllm_request_mib": request, "need_mib": need}
        for where, target in (("at_need", need), ("under_need", need - 2)):
            held = hold_at(target)
            tag = f"threshold-{u}-{where}"
            smilog = os.path.join(WORK, f"{tag}.nvidia-smi.log")
            res_path = os.path.join(WORK, f"{tag}.check.json")
            t0 = time.time()
            pr = subprocess.run([SHELLS[0], "-ec", text, "--", PY, CHECK, "--util", u, "--out", res_path],
                                env=dict(os.environ, NVSMI_LOG=smilog), capture_output=True, text=True, timeout=120)
            dt = time.time() - t0
            chk = json.load(open(res_path)) if os.path.exists(res_path) else None
            if chk is None:  # the preflight did not start it: vLLM's check on its own, now
                _rc, chk_direct = check(f"{tag}-direct", u)
            else:
                chk_direct = None
            c = chk or chk_direct
            r[where] = {
                "smi_free_held": held["free"],
                "preflight_exit": pr.returncode,
                "preflight_s": round(dt, 3),
                "nvidia_smi_queries": queries(smilog),
                "preflight_lines": lines(pr.stderr),
                "exec_happened": chk is not None,
                "check_direct": chk_direct is not None,
                "check_passed": bool(c and c["ok"]),
                "cuda_free_mib": c and c["free"] / MiB,
                "cuda_total_mib": c and c["total"] / MiB,
                "vllm_requested_mib": c and c["requested"] / MiB,
                # by how much vLLM's check passed (negative: failed), and what its process took of the free memory
                "excess_mib": c and round((c["free"] - c["requested"]) / MiB, 1),
                "context_taken_mib": c and round(held["free"] - c["free"] / MiB, 1),
            }
        a, b = r["at_need"], r["under_need"]
        r["ok"] = (a["preflight_exit"] == 0 and a["exec_happened"] and a["nvidia_smi_queries"] == 1 and a["check_passed"]
                   and b["preflight_exit"] == 75 and not b["exec_happened"])
        log(json.dumps(r))
        out["runs"].append(r)
    hold.stdin.write("quit\n")
    hold.stdin.flush()
    hold.wait(timeout=60)
    return out


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
if "slow" in ONLY and a.faults_warn and a.faults_fail:
    lim = smi_limit(a.faults_fail)
    UNDER = 1.0  # well under the per-query limit (4 s in the rendered set), python's start included
    results["slow"] = []
    for i, s in enumerate(SHELLS):
        for path in (a.faults_warn, a.faults_fail):
            results["slow"].append(slow_case(f"slow-over-{label(s)}-{i}-{os.path.basename(path)[17:21]}", path, lim + 2, s))
        results["slow"].append(slow_case(f"slow-under-{label(s)}-{i}", a.faults_fail, UNDER, s))
    results["slow"].append(slow_case("slow-under-race", a.faults_fail, UNDER, SHELLS[0], hold=a.hold))
if "sigterm" in ONLY and a.faults_fail:
    pid1s = [True, False] if can_unshare() else [False]
    results["sigterm"] = [sigterm_case(f"sigterm-{label(s)}-{'pid1' if p1 else 'plain'}", a.faults_fail, s, p1)
                          for s in SHELLS for p1 in pid1s]
    results["sigterm"].append(sigterm_case(f"sigint-{label(SHELLS[0])}", a.faults_fail, SHELLS[0], pid1s[0], signal.SIGINT))
if "context" in ONLY:
    cp = subprocess.run([PY, os.path.join(HERE, "context.py"), os.path.join(WORK, "context.json")], capture_output=True, text=True, timeout=300)
    results["context"] = json.load(open(os.path.join(WORK, "context.json"))) if cp.returncode == 0 else {"error": cp.stderr[-2000:]}
    log(json.dumps({"context": results["context"]}))
if "child-holds-pipe" in ONLY and a.faults_fail and a.faults_warn:
    cp = subprocess.run(["sh", os.path.join(HERE, "child-holds-pipe.sh"), os.path.dirname(os.path.abspath(a.faults_fail))],
                        capture_output=True, text=True, timeout=600)
    results["child_holds_pipe"] = {"exit_code": cp.returncode, "lines": cp.stdout.splitlines(), "stderr": cp.stderr[-2000:]}
    log(json.dumps({"child_holds_pipe": results["child_holds_pipe"]}))
if "threshold" in ONLY and a.threshold:
    results["threshold"] = threshold_runs(a.threshold)
if "two-gpu" in ONLY:
    results["two_gpu"] = two_gpu()
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
for r in results.get("slow", []):
    r["ok"] = slow_verdict(r)
    ok &= r["ok"]
for r in results.get("sigterm", []):
    r["ok"] = sigterm_verdict(r)
    ok &= r["ok"]
for r in results.get("threshold", {}).get("runs", []):
    ok &= r["ok"]
if "child_holds_pipe" in results:
    ok &= results["child_holds_pipe"]["exit_code"] == 0
if "context" in results:
    ok &= "error" not in results["context"]
tg = results.get("two_gpu", {})
for k in ("race", "cold", "timeout"):
    ok &= all(r["ok"] for r in tg.get(k, []))
if "slow" in ONLY and not (a.faults_warn and a.faults_fail):
    log("NOTE: no preflight-faults-{warn,fail}.sh next to the script: slow and sigterm proofs not run")
    results["faults_not_run"] = True
with open(os.path.join(a.out, "results.json"), "w") as f:
    json.dump(results, f, indent=1)
log("VERDICT:", "PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
