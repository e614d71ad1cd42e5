package grpcinterceptor

import (
	"encoding/binary"
	"errors"
	"sort"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The stored value of a completed call, version 1:
//
//	'g' 0x01                     magic and version
//	kind                         1: a response message, 2: an error status
//	header, trailer              metadata, each: uvarint count, then per key
//	                             (strictly increasing byte order) the key as
//	                             a string, a uvarint count of values and the
//	                             values as strings
//	kind 1: message name         a string: the message's full name
//	        message              the rest: its protobuf encoding
//	kind 2: status               the rest: the google.rpc.Status encoding
//	                             (code, message, details)
//
// A string is a uvarint length and that many bytes. The message is rebuilt
// through a message type registry on replay; the bytes are not interpreted
// here.
const (
	encodingMagic   = 'g'
	encodingVersion = 1

	kindMessage = 1
	kindStatus  = 2
)

// errCorrupt is returned by decode for bytes encode did not produce.
var errCorrupt = errors.New("grpcinterceptor: recorded response is corrupt")

// stored is one recorded call: a response message or an error status, with
// the header and trailer metadata the handler set.
type stored struct {
	header, trailer metadata.MD
	status          bool                  // payload is a google.rpc.Status
	messageName     protoreflect.FullName // kind 1: the response's full name
	payload         []byte                // the message's or the status's encoding
}

// encode appends the encoding of s to b.
func encode(b []byte, s stored) []byte {
	return append(appendPrefix(b, s), s.payload...)
}

// appendPrefix appends the encoding of s without its payload: a response
// message can then be marshalled straight after it.
func appendPrefix(b []byte, s stored) []byte {
	kind := byte(kindMessage)
	if s.status {
		kind = kindStatus
	}
	b = append(b, encodingMagic, encodingVersion, kind)
	b = appendMD(b, s.header)
	b = appendMD(b, s.trailer)
	if !s.status {
		b = appendString(b, string(s.messageName))
	}
	return b
}

// prefixSize bounds the size of appendPrefix's output for s.
func prefixSize(s stored) int {
	return 3 + mdSize(s.header) + mdSize(s.trailer) + binary.MaxVarintLen64 + len(s.messageName)
}

func mdSize(md metadata.MD) int {
	n := binary.MaxVarintLen64
	for k, vs := range md {
		n += 2*binary.MaxVarintLen64 + len(k)
		for _, v := range vs {
			n += binary.MaxVarintLen64 + len(v)
		}
	}
	return n
}

func appendMD(b []byte, md metadata.MD) []byte {
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b = binary.AppendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		b = appendString(b, k)
		vs := md[k]
		b = binary.AppendUvarint(b, uint64(len(vs)))
		for _, v := range vs {
			b = appendString(b, v)
		}
	}
	return b
}

// decode decodes what encode produced. Any other input is an error
// ([errCorrupt]), never a panic. The payload aliases b.
func decode(b []byte) (stored, error) {
	var s stored
	if len(b) < 3 || b[0] != encodingMagic || b[1] != encodingVersion {
		return stored{}, errCorrupt
	}
	switch b[2] {
	case kindMessage:
	case kindStatus:
		s.status = true
	default:
		return stored{}, errCorrupt
	}
	b = b[3:]
	var ok bool
	if s.header, b, ok = decodeMD(b); !ok {
		return stored{}, errCorrupt
	}
	if s.trailer, b, ok = decodeMD(b); !ok {
		return stored{}, errCorrupt
	}
	if !s.status {
		var name []byte
		if name, b, ok = field(b); !ok {
			return stored{}, errCorrupt
		}
		s.messageName = protoreflect.FullName(name)
		if !s.messageName.IsValid() {
			return stored{}, errCorrupt
		}
	}
	s.payload = b
	return s, nil
}

// decodeMD reads one metadata block. Counts are bounded by the bytes left
// (every entry takes at least one), so corrupt input cannot make it
// allocate without limit.
func decodeMD(b []byte) (metadata.MD, []byte, bool) {
	n, b, ok := uvarint(b)
	if !ok || n > uint64(len(b)) {
		return nil, nil, false
	}
	if n == 0 {
		return nil, b, true
	}
	md := make(metadata.MD, n)
	prev := ""
	for i := range n {
		var kb []byte
		if kb, b, ok = field(b); !ok || len(kb) == 0 || (i > 0 && string(kb) <= prev) {
			return nil, nil, false
		}
		key := string(kb)
		var count uint64
		if count, b, ok = uvarint(b); !ok || count > uint64(len(b)) {
			return nil, nil, false
		}
		values := make([]string, count)
		for j := range values {
			var vb []byte
			if vb, b, ok = field(b); !ok {
				return nil, nil, false
			}
			values[j] = string(vb)
		}
		md[key] = values
		prev = key
	}
	return md, b, true
}

// appendString appends s prefixed with its length as a uvarint.
func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// uvarint reads a uvarint from the front of b and returns it and the rest.
// Only the shortest encoding of a value is accepted, so that one value has
// one encoding.
func uvarint(b []byte) (v uint64, rest []byte, ok bool) {
	v, n := binary.Uvarint(b)
	if n <= 0 || n > 1 && b[n-1] == 0 {
		return 0, nil, false
	}
	return v, b[n:], true
}

// field reads a length-prefixed field from the front of b and returns it
// (aliasing b) and the rest.
func field(b []byte) (f, rest []byte, ok bool) {
	n, b, ok := uvarint(b)
	if !ok || n > uint64(len(b)) {
		return nil, nil, false
	}
	return b[:n], b[n:], true
}
