package main

// nvidia-smi on the fake GPU: the GPUs are those of the ledger (in a container,
// those the device plugin mounted), numbered from 0 in their order, as NVML
// numbers the devices a container can open. What it answers:
//
//	--query-gpu=FIELDS --format=csv[,noheader][,nounits]   index, uuid, name, memory.total,
//	    memory.used, memory.free, memory.reserved, mig.mode.current, count, driver_version,
//	    pci.bus_id (an unknown field: exit 2, as the real one)
//	--query-compute-apps=FIELDS   pid, used_memory (used_gpu_memory), process_name (name), gpu_uuid
//	-i / --id=LIST                indices or UUIDs (an unknown one: "No devices were found", exit 6)
//	-L / --list-gpus, and no arguments: a short table
//
// No GPU at all (no ledger mounted) answers as nvidia-smi does without a
// driver: exit 9.

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"vram-preflight.invalid/test-standin/ledger"
)

const driverVersion = "580.95.05"

type smiQuery struct {
	gpuFields  []string
	appFields  []string
	ids        []string
	header     bool
	units      bool
	list       bool
	csv        bool
	formatSeen bool
}

func smiMain(args []string, stdout, stderr io.Writer) int {
	q := smiQuery{header: true, units: true}
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, value, hasValue := strings.Cut(a, "=")
		next := func() (string, bool) {
			if hasValue {
				return value, true
			}
			if i+1 < len(args) {
				i++
				return args[i], true
			}
			return "", false
		}
		switch name {
		case "--query-gpu", "--query-compute-apps", "--format", "-i", "--id":
			v, ok := next()
			if !ok {
				fmt.Fprintf(stdout, "Missing value for argument %s.\n\n", name)
				return 2
			}
			switch name {
			case "--query-gpu":
				q.gpuFields = strings.Split(v, ",")
			case "--query-compute-apps":
				q.appFields = strings.Split(v, ",")
			case "--format":
				q.formatSeen = true
				for _, f := range strings.Split(v, ",") {
					switch strings.TrimSpace(f) {
					case "csv":
						q.csv = true
					case "noheader":
						q.header = false
					case "nounits":
						q.units = false
					default:
						fmt.Fprintf(stdout, "Invalid value %q for --format.\n\n", f)
						return 2
					}
				}
			default:
				q.ids = strings.Split(v, ",")
			}
		case "-L", "--list-gpus":
			q.list = true
		default:
			fmt.Fprintf(stdout, "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n\n")
			return 2
		}
	}
	if (q.gpuFields != nil || q.appFields != nil) && !q.csv {
		fmt.Fprintf(stdout, "Format is not specified. Please specify a format using --format.\n\n")
		return 2
	}
	gpus, err := ledger.Open(ledgerDir())
	if err != nil || len(gpus) == 0 {
		fmt.Fprintf(stdout, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.\n\n")
		if err != nil && !isNotExist(err) {
			fmt.Fprintf(stderr, "fake nvidia-smi: %v\n", err)
		}
		return 9
	}
	visible := make([]visibleGPU, len(gpus))
	for i, g := range gpus {
		visible[i] = visibleGPU{GPU: g, index: i}
	}
	if q.ids != nil {
		var chosen []visibleGPU
		for _, id := range q.ids {
			id = strings.TrimSpace(id)
			found := false
			for _, v := range visible {
				if id == strconv.Itoa(v.index) || strings.EqualFold(id, v.UUID) {
					if !slices.ContainsFunc(chosen, func(c visibleGPU) bool { return c.index == v.index }) {
						chosen = append(chosen, v)
					}
					found = true
				}
			}
			if !found {
				fmt.Fprintf(stdout, "No devices were found\n")
				return 6
			}
		}
		visible = chosen
	}
	now := time.Now()
	for i := range visible {
		used, holders, err := visible[i].Used(now)
		if err != nil {
			fmt.Fprintf(stderr, "fake nvidia-smi: %s: %v\n", visible[i].Dir, err)
			return 15
		}
		visible[i].used, visible[i].holders = used, holders
	}
	switch {
	case q.gpuFields != nil:
		return smiTable(stdout, q, q.gpuFields, gpuField, visible, func(v visibleGPU) []any { return []any{v} })
	case q.appFields != nil:
		return smiTable(stdout, q, q.appFields, appField, visible, func(v visibleGPU) []any {
			var rows []any
			for _, h := range v.holders {
				rows = append(rows, app{v, h})
			}
			return rows
		})
	case q.list:
		for _, v := range visible {
			fmt.Fprintf(stdout, "GPU %d: %s (UUID: %s)\n", v.index, v.Name, v.UUID)
		}
		return 0
	}
	summary(stdout, visible, now)
	return 0
}

type visibleGPU struct {
	ledger.GPU
	index   int
	used    int64
	holders []ledger.Holder
}

type app struct {
	gpu visibleGPU
	h   ledger.Holder
}

// A field's header and value for a row; ok false: not a valid field.
type fieldFunc func(row any, field string, units bool) (header, value string, ok bool)

func mib(n int64, units bool) string {
	if units {
		return fmt.Sprintf("%d MiB", n)
	}
	return strconv.FormatInt(n, 10)
}

func gpuField(row any, field string, units bool) (string, string, bool) {
	v := row.(visibleGPU)
	switch field {
	case "index":
		return field, strconv.Itoa(v.index), true
	case "uuid", "gpu_uuid":
		return "uuid", v.UUID, true
	case "name", "gpu_name":
		return "name", v.Name, true
	case "count":
		return field, "", true // filled in by smiTable
	case "driver_version":
		return field, driverVersion, true
	case "pci.bus_id", "gpu_bus_id":
		return "pci.bus_id", fmt.Sprintf("00000000:%02X:00.0", 0x18+v.Index), true
	case "memory.total":
		return field + " [MiB]", mib(v.TotalMiB, units), true
	case "memory.reserved":
		return field + " [MiB]", mib(v.ReservedMiB, units), true
	case "memory.used":
		return field + " [MiB]", mib(v.used, units), true
	case "memory.free":
		return field + " [MiB]", mib(v.FreeMiB(v.used), units), true
	case "mig.mode.current", "mig.mode.pending":
		return field, "Disabled", true
	}
	return "", "", false
}

func appField(row any, field string, units bool) (string, string, bool) {
	a := row.(app)
	switch field {
	case "pid":
		return field, strconv.Itoa(a.h.PID), true
	case "used_memory", "used_gpu_memory":
		return "used_gpu_memory [MiB]", mib(a.h.MiB, units), true
	case "process_name", "name":
		return "process_name", a.h.Process, true
	case "gpu_uuid":
		return field, a.gpu.UUID, true
	case "gpu_name":
		return field, a.gpu.Name, true
	}
	return "", "", false
}

func smiTable(out io.Writer, q smiQuery, fields []string, get fieldFunc, gpus []visibleGPU, rowsOf func(visibleGPU) []any) int {
	for i := range fields {
		fields[i] = strings.TrimSpace(fields[i])
	}
	var rows []any
	for _, g := range gpus {
		rows = append(rows, rowsOf(g)...)
	}
	// Every field is checked, rows or not, as the real one does.
	probe := any(visibleGPU{})
	if q.appFields != nil {
		probe = app{}
	}
	var lines []string
	headers := make([]string, len(fields))
	for i, f := range fields {
		h, _, ok := get(probe, f, q.units)
		if !ok {
			fmt.Fprintf(out, "Field \"%s\" is not a valid field to query.\n\n", f)
			return 2
		}
		headers[i] = h
	}
	if q.header {
		lines = append(lines, strings.Join(headers, ", "))
	}
	for _, row := range rows {
		values := make([]string, len(fields))
		for i, f := range fields {
			_, values[i], _ = get(row, f, q.units)
			if f == "count" {
				values[i] = strconv.Itoa(len(gpus))
			}
		}
		lines = append(lines, strings.Join(values, ", "))
	}
	for _, l := range lines {
		fmt.Fprintln(out, l)
	}
	return 0
}

// summary: what `nvidia-smi` alone prints, in short.
func summary(out io.Writer, gpus []visibleGPU, now time.Time) {
	fmt.Fprintf(out, "%s\n", now.Format("Mon Jan  2 15:04:05 2006"))
	fmt.Fprintf(out, "+-----------------------------------------------------------------------------------------+\n")
	fmt.Fprintf(out, "| NVIDIA-SMI %-14s Driver Version: %-14s CUDA Version: 13.0  (fake GPU, ledger) |\n", driverVersion, driverVersion)
	fmt.Fprintf(out, "+-----------------------------------------------------------------------------------------+\n")
	for _, g := range gpus {
		fmt.Fprintf(out, "| %3d  %-28s %-44s |\n", g.index, g.Name, g.UUID)
		fmt.Fprintf(out, "|      memory: %6d MiB used / %6d MiB total, %6d MiB reserved, %6d MiB free        |\n", g.used, g.TotalMiB, g.ReservedMiB, g.FreeMiB(g.used))
	}
	fmt.Fprintf(out, "+-----------------------------------------------------------------------------------------+\n")
	fmt.Fprintf(out, "| Processes:                                                                              |\n")
	n := 0
	for _, g := range gpus {
		for _, h := range g.holders {
			state := "running"
			if !h.Alive {
				state = "exited, release " + h.Release
			}
			fmt.Fprintf(out, "| %3d  pid %-8d %-24s %8d MiB  %-30s |\n", g.index, h.PID, h.Process, h.MiB, state)
			n++
		}
	}
	if n == 0 {
		fmt.Fprintf(out, "|  No running processes found                                                             |\n")
	}
	fmt.Fprintf(out, "+-----------------------------------------------------------------------------------------+\n")
}
