"""The ticket's steps 1 and 5 on a real GPU, run by a real kubelet (docs/gpu-results.md).

A standalone kubelet (static pods, no API server) with containerd and runc, the
node's own configuration (scripts/cluster.sh node-config … standalone), runs the
model's pod with the start the post-renderer wrote (test/gpu/kubelet/render.sh:
starts.json) and, for the baseline, with the start it had before. The model does
vLLM's own check with torch on the GPU (test/gpu/kubelet/model.py); on SIGTERM its
memory is taken over by a host process for a while (test/gpu/kubelet/hog.py), as
the incident's dying engine held it. Then, as the ticket's plan says:

  1. `kill -TERM 1` in the model container (ctr tasks exec, as kubectl exec runs
     it), three times for the wrapped start, once for the baseline: restartCount,
     every state the kubelet reported, BackOff events, SIGTERM -> Ready against the
     pod's cold start, each attempt's log (the kubelet's log files: `logs --previous`);
  5. memory that never frees (the hog keeps it): the wrapped container ends with a
     message naming the wait, in its termination message and its log.

  python3 test/gpu/kubelet_proof.py --node test/gpu/out/node --out OUT [--mode gpu|fake]

--mode fake runs the same on a machine without a GPU: the test node's vLLM stand-in
and fake nvidia-smi over a ledger (test/README.md) instead of torch and the card.
Writes OUT/kubelet-proof.json and OUT/kubelet-proof.log; exit 0 when every
expectation held ("VERDICT: PASS").
"""
import argparse
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.join(ROOT, "test", "gpu", "kubelet")
NODE_NAME = "vpt-gpu"
CGROUP = "vram-preflight-gpu-proof"
KUBELET_PORT, HEALTHZ_PORT = 10350, 10348
LMCACHE_IMAGE = "lmcache/vllm-openai:v0.5.2"

p = argparse.ArgumentParser()
p.add_argument("--node", required=True, help="what test/gpu/kubelet/render.sh gathered")
p.add_argument("--out", required=True)
p.add_argument("--mode", choices=["gpu", "fake"], default="gpu")
p.add_argument("--release-seconds", type=float, default=20, help="how long the old engine's memory outlives it")
p.add_argument("--repeat", type=int, default=3)
a = p.parse_args()
os.makedirs(a.out, exist_ok=True)
LOG = open(os.path.join(a.out, "kubelet-proof.log"), "w")
RESULT = {"mode": a.mode, "node": NODE_NAME, "scenarios": [], "checks": []}


def say(text):
    line = f"{time.strftime('%H:%M:%S')} {text}"
    print(line, flush=True)
    LOG.write(line + "\n")
    LOG.flush()


def check(name, ok, evidence):
    RESULT["checks"].append({"check": name, "ok": bool(ok), "evidence": evidence})
    say(f"{'PASS' if ok else 'FAIL'} {name}: {evidence}")


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


work = tempfile.mkdtemp(prefix="vpt-gpu-proof.")
nodedir = os.path.join(work, "node")
bindir = os.path.join(work, "bin")
os.makedirs(bindir)
procs = []

# --- the binaries ----------------------------------------------------------------------
for name in ["kubelet", "containerd", "containerd-shim-runc-v2", "ctr", "runc"]:
    with open(os.path.join(bindir, name), "wb") as f:
        subprocess.run(["xz", "-dc", os.path.join(a.node, "bin", f"{name}.xz")], stdout=f, check=True)
    os.chmod(os.path.join(bindir, name), 0o755)
libs = [f for f in os.listdir(os.path.join(a.node, "bin")) if f.startswith("libseccomp")]
if libs:  # runc finds Debian's libseccomp next to it (the machine may have another or none)
    libdir = os.path.join(work, "lib")
    os.makedirs(libdir)
    for lib in libs:
        shutil.copy(os.path.join(a.node, "bin", lib), libdir)
    os.rename(os.path.join(bindir, "runc"), os.path.join(bindir, "runc.real"))
    with open(os.path.join(bindir, "runc"), "w") as f:
        f.write(f'#!/bin/sh\nLD_LIBRARY_PATH={libdir} exec {bindir}/runc.real "$@"\n')
    os.chmod(os.path.join(bindir, "runc"), 0o755)
env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}")
say(f"work {work}; runc: {run([os.path.join(bindir, 'runc'), '--version'], env=env).stdout.splitlines()[:1]}")

# --- configuration: the test node's, standalone ------------------------------------------
cfg = run(["bash", os.path.join(ROOT, "scripts/cluster.sh"), "node-config", nodedir, "standalone"],
          env=dict(env, KUBELET_PORT=str(KUBELET_PORT), KUBELET_HEALTHZ_PORT=str(HEALTHZ_PORT), VRAM_PREFLIGHT_NODE_CGROUP=CGROUP))
if cfg.returncode:
    sys.exit(f"node-config failed: {cfg.stderr}")
kubelet_config = os.path.join(nodedir, "kubelet", "config.yaml")
manifests = os.path.join(nodedir, "kubelet", "manifests")
pod_logs = os.path.join(nodedir, "kubelet", "pod-logs")
sock = os.path.join(nodedir, "containerd", "containerd.sock")

# --- cgroups: the node's processes in <cgroup>/runtime, its pods beside (cgroupRoot) ----
v2 = os.path.exists("/sys/fs/cgroup/cgroup.controllers")
if v2:
    controllers = open("/sys/fs/cgroup/cgroup.controllers").read().split()
    wanted = [c for c in ["cpuset", "cpu", "io", "memory", "hugetlb", "pids"] if c in controllers]
    with open("/sys/fs/cgroup/cgroup.subtree_control", "w") as f:
        f.write(" ".join("+" + c for c in wanted))
    os.makedirs(f"/sys/fs/cgroup/{CGROUP}/runtime", exist_ok=True)
    RESULT["cgroup"] = {"version": 2, "controllers": wanted}
else:
    for d in os.listdir("/sys/fs/cgroup"):
        base = f"/sys/fs/cgroup/{d}"
        if os.path.exists(f"{base}/cgroup.procs"):
            os.makedirs(f"{base}/{CGROUP}/runtime", exist_ok=True)
            for leaf in ["cpuset.cpus", "cpuset.mems"]:
                for child in [f"{base}/{CGROUP}", f"{base}/{CGROUP}/runtime"]:
                    if os.path.exists(f"{child}/{leaf}") and not open(f"{child}/{leaf}").read().strip():
                        with open(f"{child}/{leaf}", "w") as f:
                            f.write(open(f"{os.path.dirname(child)}/{leaf}").read())
    RESULT["cgroup"] = {"version": 1}


def start(name, cmd):
    """A node process, in the node's runtime cgroup, its output in <work>/<name>.log."""
    logf = open(os.path.join(work, f"{name}.log"), "w")

    def into_cgroup():
        os.setsid()
        for d in ([f"/sys/fs/cgroup/{CGROUP}/runtime"] if v2 else [f"/sys/fs/cgroup/{x}/{CGROUP}/runtime" for x in os.listdir("/sys/fs/cgroup")]):
            if os.path.exists(f"{d}/cgroup.procs"):
                with open(f"{d}/cgroup.procs", "w") as f:
                    f.write(str(os.getpid()))

    proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, preexec_fn=into_cgroup)
    procs.append(proc)
    return proc


class Stuck(Exception):
    """A state no waiting mends (the container cannot be created): fail now, with the kubelet's reason."""


def wait(what, cond, seconds, step=0.2):
    end = time.time() + seconds
    while time.time() < end:
        try:
            value = cond()
            if value:
                return value
        except Stuck:
            raise
        except Exception:  # noqa: BLE001 (not yet)
            pass
        time.sleep(step)
    raise TimeoutError(f"{what}: not within {seconds} s")


ctr = [os.path.join(bindir, "ctr"), "--address", sock, "-n", "k8s.io"]
start("containerd", [os.path.join(bindir, "containerd"), "--config", os.path.join(nodedir, "containerd", "config.toml")])
wait("containerd", lambda: run(ctr + ["version"], env=env).returncode == 0, 30)
for image in ["pause", "lmcache-vllm-openai"]:
    r = run(ctr + ["images", "import", "--local", os.path.join(a.node, "images", f"{image}.tar")], env=env)
    if r.returncode:
        sys.exit(f"import {image}: {r.stderr}")
start("kubelet", [os.path.join(bindir, "kubelet"), "--config", kubelet_config, "--root-dir", os.path.join(work, "kubelet-root"),
                  "--cert-dir", os.path.join(work, "kubelet-pki"), "--hostname-override", NODE_NAME, "--v=3"])
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE


def pods():
    with urllib.request.urlopen(f"https://127.0.0.1:{KUBELET_PORT}/pods", context=ctx, timeout=5) as r:
        return json.load(r)["items"]


try:
    wait("the kubelet", lambda: urllib.request.urlopen(f"http://127.0.0.1:{HEALTHZ_PORT}/healthz", timeout=2).status == 200, 60)
except TimeoutError:
    say(open(os.path.join(work, "kubelet.log")).read()[-4000:])
    raise
say("kubelet and containerd up")

# --- the GPU: real, or the fake ledger --------------------------------------------------
starts = json.load(open(os.path.join(a.node, "starts.json")))
handoff = os.path.join(work, "handoff")
os.makedirs(handoff)
if a.mode == "gpu":
    nvsmi = shutil.which("nvidia-smi")
    hog = subprocess.Popen([sys.executable, os.path.join(HERE, "hog.py"), handoff], stdout=open(os.path.join(work, "hog.log"), "w"), stderr=subprocess.STDOUT)
    procs.append(hog)
    # The model's /opt/venv/bin/vllm: the host's python with torch, running model.py.
    standin = os.path.join(work, "venv-bin")
    os.makedirs(standin)
    with open(os.path.join(standin, "vllm"), "w") as f:
        f.write(f'#!/bin/sh\nexec {sys.executable} /proof/model.py "$@"\n')
    os.chmod(os.path.join(standin, "vllm"), 0o755)
    # The host's python and torch, read-only at their own paths. Of /opt only the venv's own
    # top directory: all of /opt would hide the image's /opt/venv, where the model's vllm goes.
    venv_top = "/" + os.path.join(*os.path.realpath(sys.prefix).split(os.sep)[1:3])
    host_dirs = [d for d in ["/usr", "/lib", "/lib64", venv_top, "/etc/ld.so.cache", "/etc/alternatives"] if os.path.exists(d)]
    mounts = [(d, d, True) for d in host_dirs] + [(standin, "/opt/venv/bin", True), (HERE, "/proof", True), (handoff, "/handoff", False)]
    extra_env = {"PATH": f"/opt/venv/bin:{os.path.dirname(nvsmi)}:/usr/local/bin:/usr/bin:/bin",
                 "LD_LIBRARY_PATH": os.environ.get("LD_LIBRARY_PATH", ""), "HANDOFF_DIR": "/handoff", "PYTHONUNBUFFERED": "1"}
    privileged = True

    def gpu_state():
        out = run([nvsmi, "--query-gpu=memory.total,memory.used,memory.free", "--format=csv,noheader,nounits"]).stdout.split(",")
        apps = run([nvsmi, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"]).stdout.strip()
        return {"total": int(out[0]), "used": int(out[1]), "free": int(out[2]), "apps": apps}

    def release_all():
        open(os.path.join(handoff, "release-all"), "w").close()
        wait("the hog's release", lambda: gpu_state()["used"] < 2048, 60, 0.5)
        os.remove(os.path.join(handoff, "release-all"))

    def release_env(seconds):
        return {"HANDOFF_SECONDS": seconds}
else:
    fake = os.path.join(ROOT, ".cache", "cluster", "bin", "fake-gpu")
    ledger = os.path.join(work, "ledger")
    run([fake, "init", ledger, "--count", "1"], check=True)
    gpu = sorted(os.listdir(ledger))[0]
    mounts = [(os.path.join(ledger, gpu), f"/run/fake-gpu/{gpu}", False)]
    extra_env = {"NVIDIA_VISIBLE_DEVICES": gpu}
    privileged = False

    def gpu_state():
        return {"ledger": run([fake, "show", ledger]).stdout.strip()}

    def release_all():
        run([fake, "free", ledger])

    def release_env(seconds):
        return {"VLLM_STANDIN_RELEASE_SECONDS": seconds}
RESULT["gpu_before"] = gpu_state()
say(f"GPU: {RESULT['gpu_before']}")


def pod_manifest(name, start, seconds):
    container = {"name": "model", "image": LMCACHE_IMAGE, "imagePullPolicy": "Never",
                 "env": [{"name": k, "value": v} for k, v in {**extra_env, **release_env(seconds), "NVIDIA_VISIBLE_DEVICES": extra_env.get("NVIDIA_VISIBLE_DEVICES", "all")}.items()],
                 "readinessProbe": {"httpGet": {"path": "/health", "port": 18000}, "periodSeconds": 1, "failureThreshold": 1},
                 "volumeMounts": [{"name": f"m{i}", "mountPath": dst, "readOnly": ro} for i, (_, dst, ro) in enumerate(mounts)]}
    if start.get("command"):
        container["command"] = start["command"]
    if start.get("args"):
        container["args"] = start["args"]
    if privileged:
        container["securityContext"] = {"privileged": True}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"hostNetwork": True, "restartPolicy": "Always", "terminationGracePeriodSeconds": 5, "containers": [container],
                     "volumes": [{"name": f"m{i}", "hostPath": {"path": src}} for i, (src, _, _) in enumerate(mounts)]}}


def the_pod(name):
    for pod in pods():
        if pod["metadata"]["name"] == f"{name}-{NODE_NAME}":
            return pod
    return None


def container_status(pod):
    statuses = (pod or {}).get("status", {}).get("containerStatuses") or []
    return statuses[0] if statuses else None


def ready(name):
    s = container_status(the_pod(name))
    waiting = ((s or {}).get("state") or {}).get("waiting") or {}
    if waiting.get("reason") in ("CreateContainerError", "RunContainerError", "CreateContainerConfigError", "ErrImageNeverPull", "StartError"):
        raise Stuck(f"{name}: {waiting.get('reason')}: {(waiting.get('message') or '')[:600]}")
    last = ((s or {}).get("lastState") or {}).get("terminated") or {}
    if last.get("reason") == "StartError":
        raise Stuck(f"{name}: StartError: {(last.get('message') or '')[:600]}")
    return s if s and s.get("ready") else None


def logs_of(name):
    """Every attempt's log, oldest first (the kubelet's files: what `kubectl logs [--previous]` reads)."""
    out = {}
    for d in os.listdir(pod_logs):
        if d.startswith(f"default_{name}-{NODE_NAME}_"):
            cdir = os.path.join(pod_logs, d, "model")
            for f in sorted(os.listdir(cdir), key=lambda x: int(x.split(".")[0])):
                out[f] = "".join(line.split(" ", 3)[-1] for line in open(os.path.join(cdir, f)))
    return out


def events_of(name):
    text = open(os.path.join(work, "kubelet.log"), errors="replace").read().splitlines()
    return [line[line.find("reason="):][:300] for line in text if "Event occurred" in line and f"{name}-{NODE_NAME}" in line]


def sigterm(cid, n):
    return run(ctr + ["tasks", "exec", "--exec-id", f"kill-{n}-{time.time_ns()}", cid, "/bin/sh", "-c", "kill -TERM 1"], env=env)


def scenario(name, start, seconds, repeats, expect):
    say(f"--- {name}: {repeats} x kill -TERM 1, the old engine's memory held {seconds} s after it")
    with open(os.path.join(manifests, f"{name}.json"), "w") as f:
        json.dump(pod_manifest(name, start, seconds), f)
    placed = time.time()
    s = wait(f"{name} Ready", lambda: ready(name), 240)
    cold = time.time() - placed
    pod = the_pod(name)
    record = {"name": name, "cold_start_s": round(cold, 1), "rounds": []}
    say(f"{name}: Ready {cold:.1f} s after the manifest was placed (cold start); restartCount {s['restartCount']}")
    for i in range(repeats):
        before = container_status(the_pod(name))
        cid = before["containerID"].split("://")[1]
        t0 = time.time()
        r = sigterm(cid, i)
        seen, last = [], None
        deadline = t0 + (float(seconds) if seconds != "never" else 40) + 120
        while time.time() < deadline:
            st = container_status(the_pod(name))
            if st:
                key = json.dumps({k: st.get(k) for k in ["restartCount", "ready", "state"]}, sort_keys=True)
                if key != last:
                    last = key
                    seen.append({"t": round(time.time() - t0, 2), "restartCount": st["restartCount"], "ready": st.get("ready"),
                                 "state": st.get("state"), "lastState": st.get("lastState")})
                if expect == "ready" and st.get("ready") and st["restartCount"] > before["restartCount"]:
                    break
                if expect == "gives-up" and st["restartCount"] > before["restartCount"] and (st.get("lastState") or {}).get("terminated", {}).get("exitCode") not in (None, 0, 143) \
                        and any((x.get("state") or {}).get("running") for x in seen[1:]):
                    break
            time.sleep(0.2)
        after = container_status(the_pod(name))
        rnd = {"round": i + 1, "exec": r.returncode, "restartCount_before": before["restartCount"], "restartCount_after": after["restartCount"],
               "sigterm_to_ready_s": round(time.time() - t0, 1) if after.get("ready") else None, "states": seen}
        record["rounds"].append(rnd)
        say(f"{name} round {i + 1}: restartCount {before['restartCount']} -> {after['restartCount']}, ready {after.get('ready')}, "
            f"SIGTERM -> Ready {rnd['sigterm_to_ready_s']} s; states: {[(x['t'], x['restartCount'], list((x['state'] or {}).keys()), ((x['state'] or {}).get('waiting') or {}).get('reason')) for x in seen]}")
        if expect == "ready":
            wait("the old engine's memory released", lambda: True, 1)
            time.sleep(max(0, (float(seconds) + 2) - (time.time() - t0)))
    record["events"] = events_of(name)
    record["logs"] = logs_of(name)
    record["final"] = container_status(the_pod(name))
    os.remove(os.path.join(manifests, f"{name}.json"))
    # A static pod whose manifest is gone is killed (the kubelet's /pods lists it a while
    # longer, with its last status): done when containerd runs none of its containers.
    last_cid = ((record["final"] or {}).get("containerID") or "://").split("://")[1]
    wait(f"{name} stopped", lambda: not any(line.split()[:1] == [last_cid] and "RUNNING" in line for line in run(ctr + ["tasks", "ls"], env=env).stdout.splitlines()), 60)
    release_all()
    record["gpu_after"] = gpu_state()
    RESULT["scenarios"].append(record)
    return record


status = 1
try:
    base = scenario("plain", starts["plain"], str(int(a.release_seconds)), 1, "ready")
    rnd = base["rounds"][0]
    first_logs = "\n".join(base["logs"].values())
    check("baseline: the restarted vLLM fails its own check (the incident)", "Free memory on device" in first_logs and "less than desired GPU memory utilization" in first_logs,
          [line for line in first_logs.splitlines() if "Free memory on device" in line][:1])
    check("baseline: more than one restart for one SIGTERM, and a BackOff", rnd["restartCount_after"] - rnd["restartCount_before"] >= 2 and any("BackOff" in e for e in base["events"]),
          {"restarts": rnd["restartCount_after"] - rnd["restartCount_before"], "backoff_events": [e for e in base["events"] if "BackOff" in e][:2]})

    # Three times in a row, each the first restart of its container, as in the incident (a model
    # that had served for a while): the kubelet backs off any exit that comes within twice its
    # maximum back-off (10 min by default) of the container's last restart, wrapped or not, so a
    # second kill of one container minutes after the first says nothing about the race.
    for n in range(1, a.repeat + 1):
        wrapped = scenario(f"wrapped-{n}", starts["wrapped"], str(int(a.release_seconds)), 1, "ready")
        rnd = wrapped["rounds"][0]
        check(f"wrapped {n}: restartCount +1 exactly, Ready again", rnd["restartCount_after"] - rnd["restartCount_before"] == 1 and rnd["sigterm_to_ready_s"] is not None,
              {"restartCount": [rnd["restartCount_before"], rnd["restartCount_after"]], "sigterm_to_ready_s": rnd["sigterm_to_ready_s"]})
        check(f"wrapped {n}: SIGTERM -> Ready within the hold + a cold start + 30 s", rnd["sigterm_to_ready_s"] is not None and rnd["sigterm_to_ready_s"] <= a.release_seconds + wrapped["cold_start_s"] + 30,
              {"sigterm_to_ready_s": rnd["sigterm_to_ready_s"], "hold_s": a.release_seconds, "cold_start_s": wrapped["cold_start_s"]})
        check(f"wrapped {n}: no BackOff event", not any("BackOff" in e for e in wrapped["events"]), [e for e in wrapped["events"] if "BackOff" in e][:2])
        wlogs = "\n".join(wrapped["logs"].values())
        check(f"wrapped {n}: the preflight waited, and vLLM never failed its check", "waiting for GPU memory" in wlogs and "Free memory on device" not in wlogs,
              [line for line in wlogs.splitlines() if "vram-preflight" in line][:3])

    never = scenario("never", starts["wrappedShortWait"], "never", 1, "gives-up")
    term = ((never["rounds"][0]["states"] or [{}])[-1].get("lastState") or {}).get("terminated") or {}
    for x in never["rounds"][0]["states"]:
        t = (x.get("lastState") or {}).get("terminated") or (x.get("state") or {}).get("terminated") or {}
        if t.get("exitCode") not in (None, 0, 143):
            term = t
    nlogs = "\n".join(never["logs"].values())
    check("memory that never frees: the container ends naming the wait (termination message and log)",
          "gave up" in (term.get("message") or "") and "preflight" in (term.get("message") or "") and "gave up" in nlogs,
          {"exitCode": term.get("exitCode"), "reason": term.get("reason"), "message": (term.get("message") or "")[:400]})
    status = 0 if all(c["ok"] for c in RESULT["checks"]) else 1
except Exception as error:  # noqa: BLE001
    say(f"ERROR {type(error).__name__}: {error}")
    RESULT["error"] = str(error)
    for f in ["kubelet.log", "containerd.log"]:
        path = os.path.join(work, f)
        if os.path.exists(path):
            LOG.write(f"--- the end of {f}\n" + open(path, errors="replace").read()[-6000:])
finally:
    RESULT["verdict"] = "PASS" if status == 0 else "FAIL"
    with open(os.path.join(a.out, "kubelet-proof.json"), "w") as f:
        json.dump(RESULT, f, indent=1)
    for f in os.listdir(manifests):
        os.remove(os.path.join(manifests, f))
    time.sleep(3)
    for proc in reversed(procs):
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
    run(["pkill", "-f", f"containerd-shim-runc-v2.*{sock}"])
    say(f"VERDICT: {RESULT['verdict']}")
sys.exit(status)
