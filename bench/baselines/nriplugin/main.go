// Command nriplugin: the Go NRI baseline of `python -m bench nri`. A minimal plugin on
// github.com/containerd/nri's stub that gives a Guaranteed container asking for exactly one
// CPU one exclusive CPU of its own (from -cpus) and releases it when the container stops or
// is removed; every other container is left as it is. No state is kept on disk and no other
// container is narrowed: the least an NRI plugin can do for the job, in the language and
// library NRI plugins are usually written in.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
)

type plugin struct {
	mu    sync.Mutex
	free  []string          // exclusive CPUs not held
	owner map[string]string // container id -> the CPU it holds
}

// oneCPUGuaranteed: a Guaranteed pod's container (kubelet's cgroup parent /kubepods/pod<UID>)
// whose CPU limit is exactly one CPU.
func oneCPUGuaranteed(pod *api.PodSandbox, ctr *api.Container) bool {
	parent := pod.GetLinux().GetCgroupParent()
	if !strings.HasPrefix(parent, "/kubepods/pod") && !strings.Contains(parent, "kubepods-pod") {
		return false
	}
	cpu := ctr.GetLinux().GetResources().GetCpu()
	quota, period := cpu.GetQuota().GetValue(), int64(cpu.GetPeriod().GetValue())
	return period > 0 && quota == period
}

func (p *plugin) CreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	if !oneCPUGuaranteed(pod, ctr) {
		return nil, nil, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.free) == 0 {
		return nil, nil, fmt.Errorf("no exclusive CPU left for %s/%s", pod.GetName(), ctr.GetName())
	}
	cpu := p.free[0]
	p.free = p.free[1:]
	p.owner[ctr.GetId()] = cpu
	adjust := &api.ContainerAdjustment{}
	adjust.SetLinuxCPUSetCPUs(cpu)
	return adjust, nil, nil
}

func (p *plugin) release(ctr *api.Container) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if cpu, ok := p.owner[ctr.GetId()]; ok {
		delete(p.owner, ctr.GetId())
		p.free = append(p.free, cpu)
	}
}

func (p *plugin) StopContainer(_ context.Context, _ *api.PodSandbox, ctr *api.Container) ([]*api.ContainerUpdate, error) {
	p.release(ctr)
	return nil, nil
}

func (p *plugin) RemoveContainer(_ context.Context, _ *api.PodSandbox, ctr *api.Container) error {
	p.release(ctr)
	return nil
}

func main() {
	socket := flag.String("nri-socket", "/var/run/nri/nri.sock", "the runtime's NRI socket")
	name := flag.String("plugin-name", "go-baseline", "plugin name")
	index := flag.String("plugin-index", "90", "plugin index (two digits)")
	cpus := flag.String("cpus", "1", "the exclusive CPUs, comma-separated")
	flag.Parse()
	p := &plugin{owner: map[string]string{}}
	for _, c := range strings.Split(*cpus, ",") {
		if _, err := strconv.Atoi(c); err != nil {
			fmt.Fprintf(os.Stderr, "-cpus: %q is not a CPU number\n", c)
			os.Exit(2)
		}
		p.free = append(p.free, c)
	}
	s, err := stub.New(p, stub.WithSocketPath(*socket), stub.WithPluginName(*name), stub.WithPluginIdx(*index))
	if err != nil {
		fmt.Fprintf(os.Stderr, "nriplugin: %v\n", err)
		os.Exit(1)
	}
	if err := s.Run(context.Background()); err != nil {
		fmt.Fprintf(os.Stderr, "nriplugin: %v\n", err)
		os.Exit(1)
	}
}
