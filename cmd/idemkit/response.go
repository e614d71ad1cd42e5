package main

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"google.golang.org/grpc/metadata"

	"github.com/idemkit/idemkit/grpcinterceptor"
	"github.com/idemkit/idemkit/nethttp"
)

// httpResponse is a response the HTTP middleware (net/http, gin, echo)
// recorded.
type httpResponse struct {
	Status int         `json:"status"`
	Header http.Header `json:"header"`
	Body   body        `json:"body"`
}

// grpcCall is a call the gRPC interceptor recorded: an error status, or a
// response message.
type grpcCall struct {
	Code        string      `json:"code,omitempty"`         // an error: its code, such as "NotFound"
	Message     string      `json:"message,omitempty"`      // an error: its message
	Details     []string    `json:"details,omitempty"`      // an error: the type URLs of its details
	MessageType string      `json:"message_type,omitempty"` // a response: its message type's full name
	MessageSize *int        `json:"message_size,omitempty"` // a response: its protobuf encoding's size (-raw writes the whole record)
	Header      metadata.MD `json:"header,omitempty"`
	Trailer     metadata.MD `json:"trailer,omitempty"`
}

// body is a body or a value: as text when it is printable text, else in
// base64.
type body struct {
	Size   int     `json:"size"`
	Text   *string `json:"text,omitempty"`
	Base64 *string `json:"base64,omitempty"`
}

// prefix returns at most n bytes of b's text, quoted, or of its base64,
// with "..." when it goes on: a glimpse that is safe on a terminal.
func (b body) prefix(n int) string {
	if b.Text != nil {
		t := *b.Text
		if len(t) <= n {
			return strconv.Quote(t)
		}
		for n > 0 && !utf8.RuneStart(t[n]) {
			n--
		}
		return strconv.Quote(t[:n]) + "..."
	}
	if len(*b.Base64) <= n {
		return *b.Base64 + " (base64)"
	}
	return (*b.Base64)[:n] + "... (base64)"
}

func newBody(b []byte) body {
	s := string(b)
	if printableText(s) {
		return body{Size: len(b), Text: &s}
	}
	enc := base64.StdEncoding.EncodeToString(b)
	return body{Size: len(b), Base64: &enc}
}

// decodeResponse decodes the response b by the adapter the algorithm of
// the record's fingerprint names: the HTTP middleware's ("http-…"), the
// gRPC interceptor's ("grpc-…"), else Do and Execute's value (the bytes
// the work returned). It returns nil for all three when b is not what that
// adapter records.
func decodeResponse(algorithm string, b []byte) (*httpResponse, *grpcCall, *body) {
	switch {
	case strings.HasPrefix(algorithm, "http-"):
		status, h, bd, err := nethttp.DecodeResponse(b)
		if err != nil {
			return nil, nil, nil
		}
		return &httpResponse{Status: status, Header: h, Body: newBody(bd)}, nil, nil
	case strings.HasPrefix(algorithm, "grpc-"):
		rc, err := grpcinterceptor.DecodeRecorded(b)
		if err != nil {
			return nil, nil, nil
		}
		g := &grpcCall{Header: rc.Header, Trailer: rc.Trailer}
		if rc.Status != nil {
			g.Code, g.Message = rc.Status.Code().String(), rc.Status.Message()
			for _, d := range rc.Status.Proto().GetDetails() {
				g.Details = append(g.Details, d.GetTypeUrl())
			}
		} else {
			n := len(rc.Message)
			g.MessageType, g.MessageSize = rc.MessageName, &n
		}
		return nil, g, nil
	}
	v := newBody(b)
	return nil, nil, &v
}

// lines returns the text form of r.
func (r *httpResponse) lines() [][2]string {
	lines := [][2]string{{"response", fmt.Sprintf("HTTP %d %s", r.Status, http.StatusText(r.Status))}}
	lines = append(lines, headerLines("header", r.Header)...)
	return append(lines, r.Body.lines("body")...)
}

// lines returns the text form of g.
func (g *grpcCall) lines() [][2]string {
	var lines [][2]string
	if g.Code != "" {
		lines = append(lines, [2]string{"response", "gRPC error " + g.Code}, [2]string{"message", quote(g.Message)})
		for _, d := range g.Details {
			lines = append(lines, [2]string{"detail", quote(d)})
		}
	} else {
		lines = append(lines, [2]string{"response", fmt.Sprintf("gRPC response %s (%d bytes of protobuf; -raw writes the record)", quote(g.MessageType), *g.MessageSize)})
	}
	lines = append(lines, headerLines("header", g.Header)...)
	return append(lines, headerLines("trailer", g.Trailer)...)
}

// lines returns the text form of b under the name name: printable text as
// it is, from the next line on when it spans lines.
func (b body) lines(name string) [][2]string {
	switch {
	case b.Size == 0:
		return [][2]string{{name, "(empty)"}}
	case b.Text == nil:
		return [][2]string{{name, fmt.Sprintf("(%d bytes, not text; base64) %s", b.Size, *b.Base64)}}
	case !strings.Contains(*b.Text, "\n"):
		return [][2]string{{name, *b.Text}}
	}
	return [][2]string{{name, fmt.Sprintf("(%d bytes)\n%s", b.Size, strings.TrimSuffix(*b.Text, "\n"))}}
}

// headerLines returns "Name: value" lines of h (http.Header or
// metadata.MD), sorted by name.
func headerLines[H ~map[string][]string](name string, h H) [][2]string {
	names := make([]string, 0, len(h))
	for n := range h {
		names = append(names, n)
	}
	slices.Sort(names)
	var lines [][2]string
	for _, n := range names {
		for _, v := range h[n] {
			lines = append(lines, [2]string{name, quote(n) + ": " + quote(v)})
		}
	}
	return lines
}

// printableText reports whether s is text a terminal shows as it is:
// valid UTF-8 of printable characters, newlines and tabs.
func printableText(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r != '\n' && r != '\t' && !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}
