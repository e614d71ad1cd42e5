package grpcinterceptor

import (
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// RecordedCall is a call as the interceptor records it.
type RecordedCall struct {
	// Header and Trailer are the metadata the handler set, which replays
	// restore.
	Header, Trailer metadata.MD
	// Status is the error the call returned (code, message, details); nil
	// when it returned a response message.
	Status *status.Status
	// MessageName is the full name of the response message's type, such
	// as "orders.v1.Order"; "" with a Status.
	MessageName string
	// Message is the response message's protobuf encoding: rebuild it with
	// the message type of MessageName (protoregistry.GlobalTypes).
	Message []byte
}

// DecodeRecorded decodes what the interceptor records for a completed call
// (middleware.Guard.Inspect's response), for operators' tools. Another
// adapter's bytes, or a sealed envelope, are an error. Message aliases b.
func DecodeRecorded(b []byte) (RecordedCall, error) {
	s, err := decode(b)
	if err != nil {
		return RecordedCall{}, err
	}
	c := RecordedCall{Header: s.header, Trailer: s.trailer}
	if !s.status {
		c.MessageName, c.Message = string(s.messageName), s.payload
		return c, nil
	}
	st, err := decodeStatus(s.payload)
	if err != nil {
		return RecordedCall{}, errCorrupt
	}
	c.Status = st
	return c, nil
}
