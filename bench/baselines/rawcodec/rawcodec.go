// Package rawcodec is a gRPC codec that passes message bytes through untouched: the baselines
// call and forward CRI methods without generated code, as bytes the bench encodes once.
package rawcodec

import "fmt"

// Frame is one message's bytes.
type Frame struct{ Payload []byte }

// Codec marshals *Frame as its bytes; the name is "proto" so peers see ordinary gRPC.
type Codec struct{}

func (Codec) Marshal(v interface{}) ([]byte, error) {
	f, ok := v.(*Frame)
	if !ok {
		return nil, fmt.Errorf("rawcodec: cannot marshal %T", v)
	}
	return f.Payload, nil
}

func (Codec) Unmarshal(data []byte, v interface{}) error {
	f, ok := v.(*Frame)
	if !ok {
		return fmt.Errorf("rawcodec: cannot unmarshal into %T", v)
	}
	f.Payload = append(f.Payload[:0], data...)
	return nil
}

func (Codec) Name() string   { return "proto" }
func (Codec) String() string { return "proto" }
