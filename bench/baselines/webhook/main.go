// webhook: the baseline for the admission webhook, a minimal Go net/http TLS server doing the
// same work per review: decode the AdmissionReview, build the resources annotation from the
// pod's containers (requests, limits, the pod's RDT class), answer it as a base64 JSON Patch.
// No cache: every review is decoded and answered from scratch.
package main

import (
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

type resources struct {
	Requests map[string]json.RawMessage `json:"requests"`
	Limits   map[string]json.RawMessage `json:"limits"`
}

type container struct {
	Name      string     `json:"name"`
	Resources *resources `json:"resources"`
}

type pod struct {
	Metadata struct {
		Name         string            `json:"name"`
		GenerateName string            `json:"generateName"`
		Namespace    string            `json:"namespace"`
		Annotations  map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		Containers     []container `json:"containers"`
		InitContainers []container `json:"initContainers"`
	} `json:"spec"`
}

type review struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Request    *struct {
		UID       string `json:"uid"`
		Operation string `json:"operation"`
		Namespace string `json:"namespace"`
		Kind      struct {
			Kind string `json:"kind"`
		} `json:"kind"`
		Object *pod `json:"object"`
	} `json:"request"`
}

type entry struct {
	Requests map[string]string `json:"requests"`
	Limits   map[string]string `json:"limits"`
	Classes  map[string]string `json:"classes,omitempty"`
}

type annotation struct {
	Containers     map[string]entry `json:"containers"`
	InitContainers map[string]entry `json:"initContainers,omitempty"`
}

type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value string `json:"value"`
}

type response struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Response   struct {
		UID       string `json:"uid"`
		Allowed   bool   `json:"allowed"`
		PatchType string `json:"patchType,omitempty"`
		Patch     string `json:"patch,omitempty"`
	} `json:"response"`
}

func quantities(in map[string]json.RawMessage) (map[string]string, error) {
	out := make(map[string]string, len(in))
	for k, raw := range in {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			s = string(raw) // a JSON number
		}
		if s == "" || strings.ContainsAny(s, " \t") {
			return nil, fmt.Errorf("%s: %q is not a valid quantity", k, s)
		}
		out[k] = s
	}
	return out, nil
}

func entries(cs []container, rdt string) (map[string]entry, error) {
	out := make(map[string]entry, len(cs))
	for _, c := range cs {
		e := entry{Requests: map[string]string{}, Limits: map[string]string{}}
		if c.Resources != nil {
			var err error
			if e.Requests, err = quantities(c.Resources.Requests); err != nil {
				return nil, err
			}
			if e.Limits, err = quantities(c.Resources.Limits); err != nil {
				return nil, err
			}
		}
		if rdt != "" {
			e.Classes = map[string]string{"rdt": rdt}
		}
		out[c.Name] = e
	}
	return out, nil
}

func mutate(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 3<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var rv review
	if err := json.Unmarshal(body, &rv); err != nil || rv.Request == nil || rv.Request.Object == nil {
		http.Error(w, `{"error":"not an AdmissionReview of a pod"}`, http.StatusBadRequest)
		return
	}
	p := rv.Request.Object
	rdt := p.Metadata.Annotations["rdtclass.resource-enforcer.dev/pod"]
	var a annotation
	if a.Containers, err = entries(p.Spec.Containers, rdt); err == nil {
		a.InitContainers, err = entries(p.Spec.InitContainers, rdt)
	}
	if err != nil {
		http.Error(w, `{"error":"bad quantity"}`, http.StatusBadRequest)
		return
	}
	value, _ := json.Marshal(a)
	patch, _ := json.Marshal([]patchOp{{"add", "/metadata/annotations/resource-enforcer.dev~1resources", string(value)}})
	var out response
	out.APIVersion, out.Kind = rv.APIVersion, "AdmissionReview"
	out.Response.UID, out.Response.Allowed = rv.Request.UID, true
	out.Response.PatchType, out.Response.Patch = "JSONPatch", base64.StdEncoding.EncodeToString(patch)
	answer, _ := json.Marshal(out)
	w.Header().Set("Content-Type", "application/json")
	w.Write(answer)
}

func main() {
	cert := flag.String("tls-cert", "", "certificate")
	key := flag.String("tls-key", "", "key")
	host := flag.String("host", "127.0.0.1", "address")
	flag.Parse()
	lis, err := net.Listen("tcp", *host+":0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/mutate", mutate)
	server := &http.Server{Handler: mux, ReadTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}
	// The same line the Python servers log, so the bench finds the port the same way.
	fmt.Printf("{\"msg\": \"serving\", \"port\": %d} startup complete\n", lis.Addr().(*net.TCPAddr).Port)
	if err := server.ServeTLS(lis, *cert, *key); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
