package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"

	v1 "k8s.io/api/core/v1"
	podutil "k8s.io/kubernetes/pkg/api/pod"
	api "k8s.io/kubernetes/pkg/apis/core"
	corev1 "k8s.io/kubernetes/pkg/apis/core/v1"
	"k8s.io/kubernetes/pkg/apis/core/v1/helper/qos"
	_ "k8s.io/kubernetes/pkg/features"
)

// Reads one v1 Pod spec (JSON) per line; prints the QoS class the API server stores, or ERR.
func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	for in.Scan() {
		var pod v1.Pod
		if err := json.Unmarshal(in.Bytes(), &pod.Spec); err != nil {
			fmt.Fprintln(out, "ERR", err)
			continue
		}
		corev1.SetObjectDefaults_Pod(&pod)
		var internal api.Pod
		if err := corev1.Convert_v1_Pod_To_core_Pod(&pod, &internal, nil); err != nil {
			fmt.Fprintln(out, "ERR", err)
			continue
		}
		podutil.DefaultPodLevelResources(&internal)
		var back v1.Pod
		if err := corev1.Convert_core_Pod_To_v1_Pod(&internal, &back, nil); err != nil {
			fmt.Fprintln(out, "ERR", err)
			continue
		}
		fmt.Fprintln(out, qos.ComputePodQOS(&back))
	}
}
