// fake-gpu: one static binary that is, by the name it is called by,
//
//	nvidia-smi   the fake GPU's nvidia-smi (the queries the preflight makes), smi.go
//	vllm         the vLLM stand-in: `vllm serve …` doing vLLM's start-up check, vllm.go
//	fake-gpu     the host's tool: init, show, hold, free a ledger, tool.go
//
// The ledger is the directory FAKE_GPU_DIR names, by default /run/fake-gpu, where
// the node's device plugin mounts the GPUs a container was given (package ledger).
// test/README.md documents the whole.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// defaultLedger is where the device plugin mounts a container's GPUs.
const defaultLedger = "/run/fake-gpu"

func ledgerDir() string {
	if d := os.Getenv("FAKE_GPU_DIR"); d != "" {
		return d
	}
	return defaultLedger
}

func main() {
	name := filepath.Base(os.Args[0])
	args := os.Args[1:]
	// `fake-gpu nvidia-smi …` and `fake-gpu vllm …` work too.
	if name == "fake-gpu" && len(args) > 0 && (args[0] == "nvidia-smi" || args[0] == "vllm") {
		name, args = args[0], args[1:]
	}
	switch {
	case os.Getenv(engineRoleEnv) == "engine":
		os.Exit(engineMain())
	case name == "nvidia-smi":
		os.Exit(smiMain(args, os.Stdout, os.Stderr))
	case name == "vllm":
		os.Exit(vllmMain(args))
	case strings.HasPrefix(name, "fake-gpu"):
		os.Exit(toolMain(args))
	}
	fmt.Fprintf(os.Stderr, "fake-gpu: called as %q: be nvidia-smi, vllm or fake-gpu\n", name)
	os.Exit(2)
}
