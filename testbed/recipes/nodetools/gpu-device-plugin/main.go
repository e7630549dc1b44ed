// Command sps-gpu-device-plugin advertises simulated NVIDIA GPUs to one kubelet
// through the device-plugin API (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1),
// the way NVIDIA's k8s-device-plugin advertises real ones: a resource
// (nvidia.com/gpu) with COUNT healthy devices. On allocation a container gets
// NVIDIA_VISIBLE_DEVICES (the allocated device ids, as NVIDIA's plugin sets it) and
// SPS_SIM_GPU_PRODUCT (the node's GPU product, which the simulated SGLang server's
// cost model follows).
//
// It serves on DIR/<name>.sock and registers at DIR/kubelet.sock; when the kubelet
// restarts (its socket is re-created) it serves and registers again.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	resource string
	product  string
	ids      []string
	stop     chan struct{}
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *plugin) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	devices := make([]*pluginapi.Device, 0, len(p.ids))
	for _, id := range p.ids {
		devices = append(devices, &pluginapi.Device{ID: id, Health: pluginapi.Healthy})
	}
	if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: devices}); err != nil {
		return err
	}
	select {
	case <-p.stop:
	case <-stream.Context().Done():
	}
	return nil
}

func (p *plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.ContainerRequests {
		for _, id := range c.DevicesIds {
			if !p.known(id) {
				return nil, fmt.Errorf("unknown device %q", id)
			}
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{
				"NVIDIA_VISIBLE_DEVICES": strings.Join(c.DevicesIds, ","),
				"SPS_SIM_GPU_PRODUCT":    p.product,
			},
			Annotations: map[string]string{"sps.dev/gpu-product": p.product},
		})
	}
	log.Printf("allocated %v", req.ContainerRequests)
	return resp, nil
}

func (p *plugin) known(id string) bool {
	for _, k := range p.ids {
		if k == id {
			return true
		}
	}
	return false
}

func (p *plugin) GetPreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return &pluginapi.PreferredAllocationResponse{}, nil
}

func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

// serve starts the gRPC server on sock and registers it with the kubelet.
func (p *plugin) serve(dir, sock string) (*grpc.Server, error) {
	path := filepath.Join(dir, sock)
	_ = os.Remove(path)
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	go func() { _ = srv.Serve(lis) }()

	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, "kubelet.sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		srv.Stop()
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     sock,
		ResourceName: p.resource,
		Options:      &pluginapi.DevicePluginOptions{},
	})
	if err != nil {
		srv.Stop()
		return nil, fmt.Errorf("register with kubelet: %w", err)
	}
	return srv, nil
}

func inode(path string) uint64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return s.Ino
	}
	return 0
}

func main() {
	dir := flag.String("device-plugin-dir", pluginapi.DevicePluginPath, "the kubelet's device-plugin directory (holds kubelet.sock)")
	node := flag.String("node", "", "node name (device ids and socket name)")
	product := flag.String("product", "", "GPU product, e.g. NVIDIA-H100-80GB-HBM3")
	count := flag.Int("count", 8, "number of GPUs")
	resource := flag.String("resource", "nvidia.com/gpu", "extended resource name")
	flag.Parse()
	if *node == "" || *product == "" || *count < 0 {
		fmt.Fprintln(os.Stderr, "usage: sps-gpu-device-plugin --node NAME --product PRODUCT [--count N] [--device-plugin-dir DIR]")
		os.Exit(2)
	}
	p := &plugin{resource: *resource, product: *product}
	for i := 0; i < *count; i++ {
		p.ids = append(p.ids, fmt.Sprintf("GPU-%s-%d", *node, i))
	}
	sock := "sps-gpu-" + *node + ".sock"
	kubeletSock := filepath.Join(*dir, "kubelet.sock")

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	var srv *grpc.Server
	var registered uint64
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		if ino := inode(kubeletSock); ino != 0 && ino != registered {
			if srv != nil {
				close(p.stop)
				srv.Stop()
				srv = nil
			}
			p.stop = make(chan struct{})
			s, err := p.serve(*dir, sock)
			if err != nil {
				log.Printf("not registered yet: %v", err)
			} else {
				srv, registered = s, ino
				log.Printf("registered %d x %s (%s) with %s", *count, *resource, *product, kubeletSock)
			}
		}
		select {
		case <-sigs:
			if srv != nil {
				close(p.stop)
				srv.Stop()
			}
			_ = os.Remove(filepath.Join(*dir, sock))
			return
		case <-tick.C:
		}
	}
}
