// Package ledger is the fake GPU that the test node's containers share: one
// directory per GPU, named by its UUID, that says what the card has and who
// holds how much of it.
//
//	<root>/GPU-…/gpu           the card: index, uuid, name, total_mib, reserved_mib (key=value lines)
//	<root>/GPU-…/holders/NAME  one process's memory: pid, pidns, process, mib, release
//
// A holder's memory counts while a live process holds an exclusive flock on its
// file (a process that dies, even by SIGKILL, drops the lock at once, as a dead
// process's memory comes back on a real GPU), and after that until its release:
// `held` (not after), `never`, or a Unix time in seconds (the slow reclaim of
// an engine that was told to stop). A file nobody locks, with release=never, is
// memory held until the file is removed: how a test holds memory by hand.
//
// Writers never change a file in place: a new file, locked first, replaces the
// old one by rename, so a reader sees one whole version, and readers that find
// the name pointing at another file than the one they read read again.
package ledger

import (
	"bufio"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// GPU is one card of the ledger.
type GPU struct {
	Dir         string
	Index       int
	UUID        string
	Name        string
	TotalMiB    int64
	ReservedMiB int64
}

// Holder is one process's memory on one GPU.
type Holder struct {
	File    string
	PID     int
	PIDNS   string
	Process string
	MiB     int64
	// Release: "held", "never" or Unix seconds.
	Release string
	// Alive: a live process holds the file's lock.
	Alive bool
}

// Counts says whether the holder's memory is in use at `now`.
func (h Holder) Counts(now time.Time) bool {
	if h.Alive || h.Release == "never" {
		return true
	}
	at, err := strconv.ParseFloat(h.Release, 64)
	return err == nil && float64(now.UnixNano())/1e9 < at
}

// Open reads the GPUs of a ledger, by index.
func Open(root string) ([]GPU, error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	var gpus []GPU
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		g, err := ReadGPU(filepath.Join(root, e.Name()))
		if err != nil {
			return nil, err
		}
		gpus = append(gpus, g)
	}
	sort.Slice(gpus, func(i, j int) bool { return gpus[i].Index < gpus[j].Index })
	return gpus, nil
}

// ReadGPU reads one GPU's directory.
func ReadGPU(dir string) (GPU, error) {
	kv, err := readKV(filepath.Join(dir, "gpu"))
	if err != nil {
		return GPU{}, err
	}
	g := GPU{Dir: dir, UUID: kv["uuid"], Name: kv["name"]}
	var errs []error
	num := func(key string) int64 {
		n, err := strconv.ParseInt(kv[key], 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s/gpu: %s=%q is not a number", dir, key, kv[key]))
		}
		return n
	}
	g.Index = int(num("index"))
	g.TotalMiB = num("total_mib")
	g.ReservedMiB = num("reserved_mib")
	if g.UUID == "" {
		errs = append(errs, fmt.Errorf("%s/gpu: no uuid", dir))
	}
	return g, errors.Join(errs...)
}

// Init writes a new GPU directory.
func Init(root string, index int, uuid, name string, totalMiB, reservedMiB int64) (GPU, error) {
	g := GPU{Dir: filepath.Join(root, uuid), Index: index, UUID: uuid, Name: name, TotalMiB: totalMiB, ReservedMiB: reservedMiB}
	if err := os.MkdirAll(filepath.Join(g.Dir, "holders"), 0o777); err != nil {
		return g, err
	}
	// Any user of any container may hold memory (the webhook's pods run as uid 65532).
	if err := os.Chmod(filepath.Join(g.Dir, "holders"), 0o1777); err != nil {
		return g, err
	}
	text := fmt.Sprintf("index=%d\nuuid=%s\nname=%s\ntotal_mib=%d\nreserved_mib=%d\n", index, uuid, name, totalMiB, reservedMiB)
	return g, replace(filepath.Join(g.Dir, "gpu"), text, false)
}

// Holders reads the holders of a GPU; those whose memory no longer counts are removed.
func (g GPU) Holders(now time.Time) ([]Holder, error) {
	dir := filepath.Join(g.Dir, "holders")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []Holder
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		h, ok := readHolder(filepath.Join(dir, e.Name()), now)
		if ok {
			out = append(out, h)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].File < out[j].File })
	return out, nil
}

// Used is the memory that counts on a GPU now, and who holds it.
func (g GPU) Used(now time.Time) (int64, []Holder, error) {
	holders, err := g.Holders(now)
	var used int64
	var counted []Holder
	for _, h := range holders {
		if h.Counts(now) {
			used += h.MiB
			counted = append(counted, h)
		}
	}
	return used, counted, err
}

// FreeMiB is what nvidia-smi reports free: total less reserved less used, never below 0.
func (g GPU) FreeMiB(used int64) int64 {
	return max(g.TotalMiB-g.ReservedMiB-used, 0)
}

// readHolder reads one holder file; false when it is gone or its memory no longer
// counts (then it is removed, if the name still points at the file read).
func readHolder(path string, now time.Time) (Holder, bool) {
	for try := 0; try < 5; try++ {
		f, err := os.Open(path)
		if err != nil {
			return Holder{}, false
		}
		// A shared lock we cannot take: an exclusive one is held by a live process.
		alive := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB) != nil
		kv, readErr := parseKV(f)
		var st syscall.Stat_t
		_ = syscall.Fstat(int(f.Fd()), &st)
		var now2 syscall.Stat_t
		moved := syscall.Stat(path, &now2) != nil || now2.Ino != st.Ino
		if moved {
			f.Close()
			continue // replaced while we read it: read the new one
		}
		h := Holder{File: path, PIDNS: kv["pidns"], Process: kv["process"], Release: kv["release"], Alive: alive}
		h.PID, _ = strconv.Atoi(kv["pid"])
		h.MiB, _ = strconv.ParseInt(kv["mib"], 10, 64)
		if h.Release == "" {
			h.Release = "held"
		}
		if readErr == nil && !h.Counts(now) {
			// Nobody holds it and its time is up: gone, as the memory is.
			os.Remove(path)
			f.Close()
			return h, false
		}
		f.Close()
		return h, readErr == nil
	}
	return Holder{}, false
}

// Hold is memory this process holds on one GPU, until it exits or says otherwise.
type Hold struct {
	GPU  GPU
	path string
	file *os.File
	h    Holder
}

// NewHold puts a holder on a GPU: locked before it is visible.
func NewHold(g GPU, process string, mib int64) (*Hold, error) {
	pidns, _ := os.Readlink("/proc/self/ns/pid")
	pidns = strings.TrimSuffix(strings.TrimPrefix(pidns, "pid:["), "]")
	name := fmt.Sprintf("%d-%08x", os.Getpid(), rand.Uint32())
	h := &Hold{GPU: g, path: filepath.Join(g.Dir, "holders", name), h: Holder{PID: os.Getpid(), PIDNS: pidns, Process: process, MiB: mib, Release: "held"}}
	return h, h.write()
}

// Set changes the memory held.
func (h *Hold) Set(mib int64) error {
	h.h.MiB = mib
	return h.write()
}

// MiB is the memory held.
func (h *Hold) MiB() int64 { return h.h.MiB }

// ReleaseAfter says how long the memory outlives this process's lock: a
// duration, or forever (never). The process may then exit at once.
func (h *Hold) ReleaseAfter(after time.Duration, never bool) error {
	if never {
		h.h.Release = "never"
	} else {
		h.h.Release = strconv.FormatFloat(float64(time.Now().Add(after).UnixNano())/1e9, 'f', 3, 64)
	}
	return h.write()
}

// Drop gives the memory back now.
func (h *Hold) Drop() {
	os.Remove(h.path)
	if h.file != nil {
		h.file.Close()
		h.file = nil
	}
}

func (h *Hold) write() error {
	text := fmt.Sprintf("pid=%d\npidns=%s\nprocess=%s\nmib=%d\nrelease=%s\n", h.h.PID, h.h.PIDNS, h.h.Process, h.h.MiB, h.h.Release)
	f, err := replaceLocked(h.path, text)
	if err != nil {
		return err
	}
	// The old version stays locked until the new one has its name.
	if h.file != nil {
		h.file.Close()
	}
	h.file = f
	return nil
}

// replaceLocked writes text to a new file, takes its exclusive lock, and gives it path's name.
func replaceLocked(path, text string) (*os.File, error) {
	tmp := filepath.Join(filepath.Dir(path), fmt.Sprintf(".new-%d-%08x", os.Getpid(), rand.Uint32()))
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o666)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, err
	}
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, err
	}
	_ = f.Chmod(0o666)
	if err := os.Rename(tmp, path); err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, err
	}
	return f, nil
}

// replace writes a file by rename (whole or not at all); locked: kept open and locked.
func replace(path, text string, locked bool) error {
	f, err := replaceLocked(path, text)
	if err != nil {
		return err
	}
	if !locked {
		f.Close()
	}
	return nil
}

func readKV(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseKV(f)
}

func parseKV(f *os.File) (map[string]string, error) {
	kv := map[string]string{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := strings.TrimSpace(s.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return kv, fmt.Errorf("%s: %q is not key=value", f.Name(), line)
		}
		kv[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return kv, s.Err()
}

// MiB is 2^20 bytes.
const MiB = 1 << 20

// CeilMiB is bytes as whole MiB, rounded up.
func CeilMiB(bytes float64) int64 { return int64(math.Ceil(bytes / MiB)) }
