// fakegpu-plugin: the test node's device plugin for nvidia.com/gpu, registered
// with the kubelet as NVIDIA's k8s-device-plugin is (deviceplugin v1beta1, a
// socket in the kubelet's device-plugins directory). Its devices are the GPUs
// of the fake GPU's ledger (test/cluster/standin/ledger: one directory per GPU,
// named by its UUID), each healthy; Allocate gives a container what the NVIDIA
// toolkit gives one: NVIDIA_VISIBLE_DEVICES with the UUIDs, and the GPUs
// themselves, here their ledger directories mounted at <container-dir>/<UUID>,
// where the image's nvidia-smi and the vLLM stand-in read them.
//
// The kubelet removes the sockets of that directory when it starts: the plugin
// then serves and registers again, as NVIDIA's does.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	ledger       string
	containerDir string
	devices      []string
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *plugin) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	var devices []*pluginapi.Device
	for _, id := range p.devices {
		devices = append(devices, &pluginapi.Device{ID: id, Health: pluginapi.Healthy})
	}
	if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: devices}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

func (p *plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.ContainerRequests {
		ids := append([]string(nil), c.DevicesIds...)
		sort.Strings(ids)
		car := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{"NVIDIA_VISIBLE_DEVICES": strings.Join(ids, ",")}}
		for _, id := range ids {
			if _, err := os.Stat(filepath.Join(p.ledger, id, "gpu")); err != nil {
				return nil, fmt.Errorf("no GPU %s in the ledger: %w", id, err)
			}
			car.Mounts = append(car.Mounts, &pluginapi.Mount{ContainerPath: filepath.Join(p.containerDir, id), HostPath: filepath.Join(p.ledger, id)})
		}
		resp.ContainerResponses = append(resp.ContainerResponses, car)
	}
	fmt.Fprintf(os.Stderr, "fakegpu-plugin: allocated %v\n", req.ContainerRequests)
	return resp, nil
}

func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

func main() {
	ledger := flag.String("ledger", "", "the fake GPU's ledger directory on this host")
	containerDir := flag.String("container-dir", "/run/fake-gpu", "where a container finds its GPUs")
	resource := flag.String("resource", "nvidia.com/gpu", "the extended resource")
	dir := flag.String("plugin-dir", pluginapi.DevicePluginPath, "the kubelet's device-plugins directory")
	flag.Parse()
	entries, err := os.ReadDir(*ledger)
	if err != nil {
		fmt.Fprintf(os.Stderr, "fakegpu-plugin: %v\n", err)
		os.Exit(1)
	}
	p := &plugin{ledger: *ledger, containerDir: *containerDir}
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(*ledger, e.Name(), "gpu")); err == nil {
			p.devices = append(p.devices, e.Name())
		}
	}
	if len(p.devices) == 0 {
		fmt.Fprintf(os.Stderr, "fakegpu-plugin: no GPU in %s\n", *ledger)
		os.Exit(1)
	}
	socket := filepath.Join(*dir, "fake-gpu.sock")
	kubelet := filepath.Join(*dir, "kubelet.sock")
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	var server *grpc.Server
	var registeredWith uint64
	for {
		// (Re)start when our socket is gone (the kubelet removed it) or the kubelet's is new.
		var kst, sst syscall.Stat_t
		kubeletUp := syscall.Stat(kubelet, &kst) == nil
		ours := syscall.Stat(socket, &sst) == nil
		if kubeletUp && (!ours || kst.Ino != registeredWith) {
			if server != nil {
				server.Stop()
			}
			server, err = serve(p, socket)
			if err == nil {
				err = register(kubelet, *resource)
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "fakegpu-plugin: %v (trying again)\n", err)
				registeredWith = 0
			} else {
				registeredWith = kst.Ino
				fmt.Fprintf(os.Stderr, "fakegpu-plugin: registered %s with %d devices: %s\n", *resource, len(p.devices), strings.Join(p.devices, ", "))
			}
		}
		select {
		case <-signals:
			if server != nil {
				server.Stop()
			}
			os.Remove(socket)
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func serve(p *plugin, socket string) (*grpc.Server, error) {
	os.Remove(socket)
	l, err := net.Listen("unix", socket)
	if err != nil {
		return nil, err
	}
	s := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(s, p)
	go func() { _ = s.Serve(l) }()
	return s, nil
}

func register(kubelet, resource string) error {
	conn, err := grpc.NewClient("unix://"+kubelet, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "fake-gpu.sock", ResourceName: resource})
	return err
}
