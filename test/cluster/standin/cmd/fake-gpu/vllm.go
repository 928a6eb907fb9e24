package main

// The vLLM stand-in: `vllm serve MODEL [flags]` as the image's ENTRYPOINT runs it.
//
// Like vLLM v1, the process started (the API server, PID 1 in a container)
// starts an engine (a second process, VLLM::EngineCore) that takes its CUDA
// context on its GPUs (VLLM_STANDIN_CONTEXT_MIB of the ledger each), then does
// vLLM's start-up check on each, as vllm/v1/worker/utils.py request_memory():
//
//	total     = nvidia-smi total - reserved (CUDA's total)
//	requested = ceil(total x gpu_memory_utilization)   in bytes
//	free      = total - every holder's memory, its own context included
//	free < requested: ValueError, the engine and then the server exit 1
//
// otherwise the engine holds `requested` on each GPU, the server listens on
// --port and answers GET /health with 200. On SIGTERM (or SIGINT) the server
// tells the engine to stop and exits 0 at once; the engine's memory outlives
// it for VLLM_STANDIN_RELEASE_SECONDS (default 10; `never`), the slow
// reclaim of the incident, even when the engine itself is killed with the
// container. SIGUSR1 wedges /health (it no longer answers), for liveness tests.
//
// Read from the arguments: --gpu-memory-utilization (default 0.9; also
// --gpu_memory_utilization, `--x y` and `--x=y`, the last wins), --port
// (default 8000), --tensor-parallel-size / -tp (default 1: the GPUs cuda:0..N-1).
// Every other argument is ignored. From the environment: CUDA_VISIBLE_DEVICES,
// VLLM_STANDIN_CONTEXT_MIB (600), VLLM_STANDIN_RELEASE_SECONDS (10),
// VLLM_STANDIN_INIT_SECONDS (0: before the check), VLLM_STANDIN_LOAD_SECONDS
// (0: after it, before /health answers).

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"vram-preflight.invalid/test-standin/ledger"
)

const engineRoleEnv = "VLLM_STANDIN_ROLE"

type serveArgs struct {
	utilization     float64
	utilizationText string
	port            int
	tensorParallel  int
}

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "INFO %s [vllm-standin] %s\n", time.Now().Format("01-02 15:04:05"), fmt.Sprintf(format, a...))
}

func errorf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "ERROR %s [vllm-standin] %s\n", time.Now().Format("01-02 15:04:05"), fmt.Sprintf(format, a...))
}

// parseServe reads the flags the stand-in uses from vLLM's command line; the rest is ignored.
func parseServe(args []string) (serveArgs, error) {
	s := serveArgs{utilization: 0.9, utilizationText: "0.9", port: 8000, tensorParallel: 1}
	if len(args) == 0 || args[0] != "serve" {
		return s, fmt.Errorf("usage: vllm serve [model_tag] [options] (this stand-in runs `serve` only; got %q)", strings.Join(args, " "))
	}
	for i := 1; i < len(args); i++ {
		name, value, hasValue := strings.Cut(args[i], "=")
		var canonical string
		switch strings.ReplaceAll(name, "_", "-") {
		case "--gpu-memory-utilization":
			canonical = "gpu-memory-utilization"
		case "--port":
			canonical = "port"
		case "--tensor-parallel-size", "-tp":
			canonical = "tensor-parallel-size"
		default:
			continue
		}
		if !hasValue {
			if i+1 >= len(args) {
				return s, fmt.Errorf("vllm serve: error: argument %s: expected one argument", name)
			}
			i++
			value = args[i]
		}
		switch canonical {
		case "gpu-memory-utilization":
			u, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
			if err != nil {
				return s, fmt.Errorf("vllm serve: error: argument --gpu-memory-utilization: invalid float value: '%s'", value)
			}
			s.utilization, s.utilizationText = u, value
		case "port":
			p, err := strconv.Atoi(value)
			if err != nil {
				return s, fmt.Errorf("vllm serve: error: argument --port: invalid int value: '%s'", value)
			}
			s.port = p
		case "tensor-parallel-size":
			n, err := strconv.Atoi(value)
			if err != nil || n < 1 {
				return s, fmt.Errorf("vllm serve: error: argument --tensor-parallel-size/-tp: invalid int value: '%s'", value)
			}
			s.tensorParallel = n
		}
	}
	if !(s.utilization > 0 && s.utilization <= 1) {
		return s, fmt.Errorf("ValueError: GPU memory utilization must be within (0, 1]. Got %s.", pyRepr(s.utilization))
	}
	return s, nil
}

func envSeconds(name string, fallback float64) (seconds float64, never bool, err error) {
	v := strings.TrimSpace(os.Getenv(name))
	if v == "" {
		return fallback, false, nil
	}
	if v == "never" {
		return 0, true, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, false, fmt.Errorf("%s=%q: a number of seconds >= 0 or never", name, v)
	}
	return f, false, nil
}

func sleepSeconds(s float64) { time.Sleep(time.Duration(s * float64(time.Second))) }

// vllmMain is the API server: PID 1 of the container.
func vllmMain(args []string) int {
	// Installed first: as PID 1 a process gets no signal it has no handler for.
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1)
	serve, err := parseServe(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	for _, name := range []string{"VLLM_STANDIN_CONTEXT_MIB", "VLLM_STANDIN_RELEASE_SECONDS", "VLLM_STANDIN_INIT_SECONDS", "VLLM_STANDIN_LOAD_SECONDS"} {
		if name == "VLLM_STANDIN_CONTEXT_MIB" {
			if _, err := contextMiB(); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 2
			}
		} else if _, _, err := envSeconds(name, 0); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
	}
	logf("vLLM stand-in, pid %d: vllm %s", os.Getpid(), strings.Join(args, " "))
	logf("gpu_memory_utilization=%s port=%d tensor_parallel_size=%d (read from the arguments; the rest is ignored)", pyRepr(serve.utilization), serve.port, serve.tensorParallel)

	// The engine: this binary again, in the engine's role, reporting on fd 3.
	report, reportWriter, err := os.Pipe()
	if err != nil {
		errorf("pipe: %v", err)
		return 1
	}
	self, err := os.Executable()
	if err != nil {
		errorf("executable: %v", err)
		return 1
	}
	engine := exec.Command(self)
	engine.Args = []string{"VLLM::EngineCore"}
	engine.Env = append(os.Environ(), engineRoleEnv+"=engine",
		fmt.Sprintf("VLLM_STANDIN_ENGINE_ARGS=%s %d", serve.utilizationText, serve.tensorParallel))
	engine.Stdout, engine.Stderr = os.Stdout, os.Stderr
	engine.ExtraFiles = []*os.File{reportWriter}
	// The engine learns of the server's death (outside a container, where nothing else ends it).
	engine.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := engine.Start(); err != nil {
		errorf("starting the engine: %v", err)
		return 1
	}
	reportWriter.Close()
	logf("started the engine core, pid %d (VLLM::EngineCore)", engine.Process.Pid)
	engineDone := make(chan error, 1)
	go func() { engineDone <- engine.Wait() }()

	// The engine's reports: "ready" or "error", then "stopping" once its memory's release is recorded.
	status := make(chan string, 4)
	go func() {
		lines := bufio.NewScanner(report)
		for lines.Scan() {
			status <- strings.TrimSpace(lines.Text())
		}
		close(status)
	}()
	stop := func(sig os.Signal) int {
		logf("received %v: shutting down the API server; telling the engine core (pid %d) to stop", sig, engine.Process.Pid)
		_ = engine.Process.Signal(syscall.SIGTERM)
		// As PID 1 this process's exit kills the engine: first let it record how long its memory outlives it.
		select {
		case <-status:
		case <-time.After(2 * time.Second):
		}
		return 0
	}
	var state string
wait:
	for {
		select {
		case line, ok := <-status:
			state = line
			if !ok {
				state = "died"
			}
			break wait
		case sig := <-signals:
			if sig != syscall.SIGUSR1 {
				return stop(sig)
			}
		}
	}
	if state != "ready" {
		<-engineDone
		fmt.Fprintf(os.Stderr, "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {'EngineCore_DP0': 1}\n")
		return 1
	}

	var wedged atomic.Bool
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {
		if wedged.Load() {
			<-r.Context().Done() // never answers
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	listener, err := net.Listen("tcp", fmt.Sprintf(":%d", serve.port))
	if err != nil {
		errorf("listening on port %d: %v", serve.port, err)
		_ = engine.Process.Signal(syscall.SIGTERM)
		return 1
	}
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = server.Serve(listener) }()
	logf("Starting vLLM API server on http://0.0.0.0:%d: /health answers 200", serve.port)
	for {
		select {
		case sig := <-signals:
			if sig == syscall.SIGUSR1 {
				wedged.Store(true)
				logf("SIGUSR1: /health no longer answers (a wedged server, for the liveness probe)")
				continue
			}
			_ = listener.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			_ = server.Shutdown(ctx)
			cancel()
			return stop(sig)
		case err := <-engineDone:
			errorf("Engine core proc EngineCore_DP0 died unexpectedly (%v), shutting down the API server", err)
			return 1
		}
	}
}

func contextMiB() (int64, error) {
	v := strings.TrimSpace(os.Getenv("VLLM_STANDIN_CONTEXT_MIB"))
	if v == "" {
		return 600, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("VLLM_STANDIN_CONTEXT_MIB=%q: a whole number of MiB >= 0", v)
	}
	return n, nil
}

// cudaDevices: the GPUs CUDA shows this process, as cuda:0, cuda:1, …: those of the
// ledger, narrowed and ordered by CUDA_VISIBLE_DEVICES (indices or UUIDs) when set.
func cudaDevices() ([]ledger.GPU, error) {
	gpus, err := ledger.Open(ledgerDir())
	if err != nil && !isNotExist(err) {
		return nil, err
	}
	visible, set := os.LookupEnv("CUDA_VISIBLE_DEVICES")
	if !set {
		return gpus, nil
	}
	var out []ledger.GPU
	for _, id := range strings.Split(visible, ",") {
		id = strings.TrimSpace(id)
		if id == "" {
			break
		}
		found := false
		for i, g := range gpus {
			if id == strconv.Itoa(i) || strings.EqualFold(id, g.UUID) {
				out = append(out, g)
				found = true
				break
			}
		}
		if !found {
			break // CUDA stops at the first id it cannot place
		}
	}
	return out, nil
}

func isNotExist(err error) bool { return errors.Is(err, os.ErrNotExist) }

// engineMain: VLLM::EngineCore. Reports "ready" or "error" on fd 3.
func engineMain() int {
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	report := os.NewFile(3, "report")
	prefix := fmt.Sprintf("(EngineCore_DP0 pid=%d) ", os.Getpid())
	say := func(format string, a ...any) {
		fmt.Fprintf(os.Stderr, "%sINFO %s [vllm-standin] %s\n", prefix, time.Now().Format("01-02 15:04:05"), fmt.Sprintf(format, a...))
	}
	fail := func(text string) int {
		fmt.Fprintf(os.Stderr, "%sERROR %s [vllm-standin] EngineCore failed to start.\n", prefix, time.Now().Format("01-02 15:04:05"))
		fmt.Fprintf(os.Stderr, "%s%s\n", prefix, text)
		fmt.Fprintln(report, "error")
		return 1
	}
	var utilText string
	var tp int
	if _, err := fmt.Sscan(os.Getenv("VLLM_STANDIN_ENGINE_ARGS"), &utilText, &tp); err != nil {
		return fail("RuntimeError: the stand-in's engine was started without its arguments")
	}
	util, _ := strconv.ParseFloat(strings.TrimSpace(utilText), 64)
	ctxMiB, _ := contextMiB()
	initS, _, _ := envSeconds("VLLM_STANDIN_INIT_SECONDS", 0)
	loadS, _, _ := envSeconds("VLLM_STANDIN_LOAD_SECONDS", 0)
	releaseS, never, _ := envSeconds("VLLM_STANDIN_RELEASE_SECONDS", 10)
	sleepSeconds(initS)

	devices, err := cudaDevices()
	if err != nil {
		return fail(fmt.Sprintf("RuntimeError: the fake GPU's ledger: %v", err))
	}
	if len(devices) == 0 {
		return fail("RuntimeError: No CUDA GPUs are available")
	}
	if tp > len(devices) {
		return fail(fmt.Sprintf("ValueError: World size (%d) is larger than the number of available GPUs (%d) in this node.", tp, len(devices)))
	}
	// Each worker's CUDA context first, then its check: one GPU at a time, in order.
	var holds []*ledger.Hold
	for rank, g := range devices[:tp] {
		process := "VLLM::EngineCore"
		if tp > 1 {
			process = fmt.Sprintf("VLLM::Worker_TP%d", rank)
		}
		hold, err := ledger.NewHold(g, process, ctxMiB)
		if err != nil {
			return fail(fmt.Sprintf("RuntimeError: the fake GPU's ledger: %v", err))
		}
		holds = append(holds, hold)
		used, _, err := g.Used(time.Now())
		if err != nil {
			return fail(fmt.Sprintf("RuntimeError: the fake GPU's ledger: %v", err))
		}
		totalBytes := (g.TotalMiB - g.ReservedMiB) * ledger.MiB
		freeBytes := max(totalBytes-used*ledger.MiB, 0)
		requested := math.Ceil(float64(totalBytes) * util)
		say("cuda:%d is %s: context %d MiB taken; CUDA total %d MiB (nvidia-smi total %d less reserved %d), free %d MiB; requested ceil(%d MiB x %s) = %d MiB",
			rank, g.UUID, ctxMiB, totalBytes/ledger.MiB, g.TotalMiB, g.ReservedMiB, freeBytes/ledger.MiB, totalBytes/ledger.MiB, pyRepr(util), ledger.CeilMiB(requested))
		if float64(freeBytes) < requested {
			return fail(fmt.Sprintf("ValueError: Free memory on device cuda:%d (%s/%s GiB) on startup is less than desired GPU memory utilization (%s, %s GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
				rank, formatGiB(float64(freeBytes)), formatGiB(float64(totalBytes)), pyRepr(util), formatGiB(requested)))
		}
		if err := hold.Set(max(ledger.CeilMiB(requested), ctxMiB)); err != nil {
			return fail(fmt.Sprintf("RuntimeError: the fake GPU's ledger: %v", err))
		}
		say("cuda:%d (%s): the engine holds %d MiB (pid %d, %s)", rank, g.UUID, hold.MiB(), os.Getpid(), process)
	}
	sleepSeconds(loadS)
	fmt.Fprintln(report, "ready")

	<-signals
	var total int64
	for _, h := range holds {
		total += h.MiB()
		if err := h.ReleaseAfter(time.Duration(releaseS*float64(time.Second)), never); err != nil {
			fmt.Fprintf(os.Stderr, "%sERROR [vllm-standin] the fake GPU's ledger: %v\n", prefix, err)
		}
	}
	fmt.Fprintln(report, "stopping")
	if never {
		say("told to stop: the engine's %d MiB stay held for good (VLLM_STANDIN_RELEASE_SECONDS=never), even after this process ends", total)
		select {}
	}
	say("told to stop: the engine's %d MiB stay held for %s s more (VLLM_STANDIN_RELEASE_SECONDS), even if this process is killed sooner", total, strconv.FormatFloat(releaseS, 'f', -1, 64))
	sleepSeconds(releaseS)
	for _, h := range holds {
		h.Drop()
	}
	say("released %d MiB, exiting", total)
	return 0
}

// formatGiB is vLLM's format_gib (round(b / GiB, 2)) as Python prints the float.
func formatGiB(bytes float64) string {
	rounded, _ := strconv.ParseFloat(strconv.FormatFloat(bytes/(1<<30), 'f', 2, 64), 64)
	return pyRepr(rounded)
}

// pyRepr prints a float as Python's repr() does: the shortest text that reads back,
// with ".0" on whole numbers, and an exponent below 1e-4 and from 1e16.
func pyRepr(f float64) string {
	if f == 0 {
		return "0.0"
	}
	exp := int(math.Floor(math.Log10(math.Abs(f))))
	// Log10 can be off by one at powers of ten: the 'e' form says the true exponent.
	e := strconv.FormatFloat(f, 'e', -1, 64)
	if at := strings.LastIndexByte(e, 'e'); at >= 0 {
		exp, _ = strconv.Atoi(e[at+1:])
	}
	if exp < -4 || exp >= 16 {
		mantissa, power, _ := strings.Cut(e, "e")
		sign := power[0]
		digits := strings.TrimLeft(power[1:], "0")
		if len(digits) < 2 {
			digits = strings.Repeat("0", 2-len(digits)) + digits
		}
		return mantissa + "e" + string(sign) + digits
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}
