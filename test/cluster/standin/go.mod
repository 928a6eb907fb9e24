// The fake GPU of the test node and the vLLM stand-in that uses it (see
// test/README.md): the ledger, nvidia-smi, `vllm serve`, the host's fake-gpu
// tool and the pod sandbox's pause, all static and standard library only, so
// that they build in seconds and fit any image. Used by scripts/cluster.sh only.
module vram-preflight.invalid/test-standin

go 1.26.0
