package main

// The host's tool for the ledger (scripts/cluster.sh and tests):
//
//	fake-gpu init DIR [--count N] [--total-mib M] [--reserved-mib R] [--name NAME]
//	fake-gpu show [DIR]
//	fake-gpu hold [DIR] --gpu INDEX|UUID --mib N    hold until SIGTERM/SIGINT, then give it back
//	fake-gpu free [DIR] [--gpu INDEX|UUID]          give back what no live process holds
//
// DIR defaults to FAKE_GPU_DIR.

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"vram-preflight.invalid/test-standin/ledger"
)

// UUIDs of the fake GPUs: fixed, so that a test can name them.
func fakeUUID(index int) string {
	return fmt.Sprintf("GPU-7e57f00d-0000-4000-8000-%012d", index)
}

func toolMain(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: fake-gpu init|show|hold|free [DIR] [flags] (see test/README.md)")
		return 2
	}
	cmd, rest := args[0], args[1:]
	dir := ledgerDir()
	if len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		dir, rest = rest[0], rest[1:]
	}
	fs := flag.NewFlagSet("fake-gpu "+cmd, flag.ContinueOnError)
	count := fs.Int("count", 4, "GPUs")
	total := fs.Int64("total-mib", 81559, "memory.total of each GPU, MiB (an H100 80GB HBM3)")
	reserved := fs.Int64("reserved-mib", 326, "memory.reserved of each GPU, MiB")
	name := fs.String("name", "NVIDIA H100 80GB HBM3", "the GPUs' name")
	gpu := fs.String("gpu", "", "a GPU: index or UUID")
	held := fs.Int64("mib", 0, "MiB to hold")
	if err := fs.Parse(rest); err != nil {
		return 2
	}
	pick := func() ([]ledger.GPU, error) {
		gpus, err := ledger.Open(dir)
		if err != nil || *gpu == "" {
			return gpus, err
		}
		for i, g := range gpus {
			if *gpu == strconv.Itoa(i) || strings.EqualFold(*gpu, g.UUID) {
				return []ledger.GPU{g}, nil
			}
		}
		return nil, fmt.Errorf("no GPU %q in %s", *gpu, dir)
	}
	switch cmd {
	case "init":
		if err := os.MkdirAll(dir, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "fake-gpu:", err)
			return 1
		}
		for i := 0; i < *count; i++ {
			if _, err := ledger.Init(dir, i, fakeUUID(i), *name, *total, *reserved); err != nil {
				fmt.Fprintln(os.Stderr, "fake-gpu:", err)
				return 1
			}
		}
		return 0
	case "show":
		gpus, err := pick()
		if err != nil {
			fmt.Fprintln(os.Stderr, "fake-gpu:", err)
			return 1
		}
		now := time.Now()
		for i, g := range gpus {
			used, holders, _ := g.Used(now)
			fmt.Printf("%d %s total %d reserved %d used %d free %d MiB\n", i, g.UUID, g.TotalMiB, g.ReservedMiB, used, g.FreeMiB(used))
			for _, h := range holders {
				fmt.Printf("  pid %d %s %d MiB alive=%t release=%s\n", h.PID, h.Process, h.MiB, h.Alive, h.Release)
			}
		}
		return 0
	case "hold":
		gpus, err := pick()
		if err == nil && (len(gpus) != 1 || *held <= 0) {
			err = fmt.Errorf("hold needs --gpu and --mib > 0")
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "fake-gpu:", err)
			return 2
		}
		signals := make(chan os.Signal, 1)
		signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
		h, err := ledger.NewHold(gpus[0], "fake-gpu hold", *held)
		if err != nil {
			fmt.Fprintln(os.Stderr, "fake-gpu:", err)
			return 1
		}
		fmt.Printf("holding %d MiB of %s\n", *held, gpus[0].UUID)
		<-signals
		h.Drop()
		return 0
	case "free":
		gpus, err := pick()
		if err != nil {
			fmt.Fprintln(os.Stderr, "fake-gpu:", err)
			return 1
		}
		for _, g := range gpus {
			holders, _ := g.Holders(time.Now())
			for _, h := range holders {
				if !h.Alive {
					os.Remove(h.File)
				}
			}
		}
		return 0
	}
	fmt.Fprintf(os.Stderr, "fake-gpu: unknown command %q\n", cmd)
	return 2
}
