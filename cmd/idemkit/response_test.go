package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idemkit/grpcinterceptor"
	"github.com/idemkit/idemkit/nethttp"
)

// TestInspectResponse records responses through the real adapters (the
// HTTP middleware behind a real server, the gRPC interceptor behind a real
// listener) on every backend, and shows them with the tool: an HTTP
// record's status, headers and body (text as it is, other bytes in
// base64); a gRPC record's code and message, or its response message's
// type and metadata; -raw writes the bytes the guard reads; keys are
// given in the header's string form.
func TestInspectResponse(t *testing.T) {
	eachBackend(t, func(t *testing.T, e env) {
		g := e.guard(t)

		// HTTP.
		mw, err := nethttp.New(g)
		if err != nil {
			t.Fatal(err)
		}
		app := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/binary" {
				w.Header().Set("Content-Type", "application/octet-stream")
				_, _ = w.Write([]byte{0, 1, 0xff})
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Location", "/orders/1")
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, `{"order":1}`)
		})))
		defer app.Close()
		for key, path := range map[string]string{"h/1": "/orders", "h/2": "/binary"} {
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, app.URL+path, strings.NewReader("{}"))
			req.Header.Set("Idempotency-Key", `"`+key+`"`)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		r := tool(t, e.args("inspect", "-key", `"h/1"`, "-response")...)
		for _, line := range []string{
			"response    HTTP 201 Created\n", "header      Content-Type: application/json\n", "header      Location: /orders/1\n",
			"body        {\"order\":1}\n",
		} {
			if r.code != exitOK || !strings.Contains(r.stdout, line) {
				t.Fatalf("inspect -response of an HTTP record: exit %d, stdout:\n%s\nstderr %q; want the line %q", r.code, r.stdout, r.stderr, line)
			}
		}
		m := jsonObject(t, e.args("inspect", "-key", "h/1", "-response")...)
		want := map[string]any{
			"status": float64(201),
			"header": map[string]any{"Content-Type": []any{"application/json"}, "Location": []any{"/orders/1"}},
			"body":   map[string]any{"size": float64(11), "text": `{"order":1}`},
		}
		if !reflect.DeepEqual(m["http"], want) {
			t.Errorf("inspect -response -json: http %v; want %v", m["http"], want)
		}
		if r := tool(t, e.args("inspect", "-key", `"h/2"`, "-response")...); !strings.Contains(r.stdout, "body        (3 bytes, not text; base64) AAH/\n") {
			t.Errorf("a binary body: stdout:\n%s", r.stdout)
		}
		in, _, err := g.Inspect(t.Context(), "", "h/1", true)
		if err != nil {
			t.Fatal(err)
		}
		if raw := tool(t, e.args("inspect", "-key", "h/1", "-raw")...); raw.code != exitOK || !bytes.Equal([]byte(raw.stdout), in.Response) {
			t.Errorf("-raw: exit %d, %q; want the recorded bytes %q", raw.code, raw.stdout, in.Response)
		}
		if stored, _ := base64.StdEncoding.DecodeString(fmt.Sprint(m["response"])); !bytes.Equal(stored, in.Response) {
			t.Errorf("-json's response %q; want the recorded bytes", m["response"])
		}

		// gRPC.
		idem, err := grpcinterceptor.New(g)
		if err != nil {
			t.Fatal(err)
		}
		srv := grpc.NewServer(grpc.ChainUnaryInterceptor(idem))
		testgrpc.RegisterTestServiceServer(srv, lookups{})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Stop()
		conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		client := testgrpc.NewTestServiceClient(conn)
		for key, size := range map[string]int32{"g/1": 1, "g/2": 0} {
			ctx := metadata.AppendToOutgoingContext(t.Context(), "idempotency-key", key)
			_, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{ResponseSize: size})
			if (err != nil) != (size == 0) {
				t.Fatalf("UnaryCall %s: %v", key, err)
			}
		}
		r = tool(t, e.args("inspect", "-key", "g/2", "-response")...)
		for _, line := range []string{"response    gRPC error NotFound\n", "message     no such order\n"} {
			if r.code != exitOK || !strings.Contains(r.stdout, line) {
				t.Fatalf("inspect -response of a failed call: exit %d, stdout:\n%s\nstderr %q; want the line %q", r.code, r.stdout, r.stderr, line)
			}
		}
		r = tool(t, e.args("inspect", "-key", "g/1", "-response")...)
		for _, line := range []string{"response    gRPC response grpc.testing.SimpleResponse (", "header      order-id: 42\n"} {
			if r.code != exitOK || !strings.Contains(r.stdout, line) {
				t.Fatalf("inspect -response of a call: exit %d, stdout:\n%s\nstderr %q; want the line %q", r.code, r.stdout, r.stderr, line)
			}
		}
		m = jsonObject(t, e.args("inspect", "-key", "g/2", "-response")...)
		if gm, _ := m["grpc"].(map[string]any); gm["code"] != "NotFound" || gm["message"] != "no such order" {
			t.Errorf("inspect -response -json of a failed call: grpc %v", m["grpc"])
		}
	})
}

// lookups answers UnaryCall with a response and a header, unless the
// request asks for no payload: then with NotFound.
type lookups struct {
	testgrpc.UnimplementedTestServiceServer
}

func (lookups) UnaryCall(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	if req.GetResponseSize() == 0 {
		return nil, status.Error(codes.NotFound, "no such order")
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs("order-id", "42"))
	return &testgrpc.SimpleResponse{ServerId: "order 42"}, nil
}

// TestHeaderKey: a key in the header's string form is unquoted as the
// HTTP middleware reads it; a bare key, and anything that is not a
// well-formed string, stays as it is.
func TestHeaderKey(t *testing.T) {
	for in, want := range map[string]string{
		`"k1"`:            "k1",
		`k1`:              "k1",
		`"a \"b\" \\ c"`:  `a "b" \ c`,
		`"k1";v=1`:        "k1",
		`"k1"x`:           `"k1"x`,
		`""`:              `""`,
		`"`:               `"`,
		`"open`:           `"open`,
		`"bad \q"`:        `"bad \q"`,
		"\"caf\u00e9\"":   "\"caf\u00e9\"",
		`"order/42"`:      "order/42",
		`"quoted" inside`: `"quoted" inside`,
	} {
		if got := headerKey(in); got != want {
			t.Errorf("headerKey(%s) = %s; want %s", in, got, want)
		}
	}
}

// FuzzHeaderKey: headerKey never panics, and what it unquotes is a String
// whose quoted form starts the input.
func FuzzHeaderKey(f *testing.F) {
	for _, s := range []string{`"k1"`, `k1`, `"a\"b"`, `"k";p=1`, `"`, `""`, `"\`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got := headerKey(in)
		if got == in {
			return
		}
		quoted := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(got) + `"`
		if got == "" || !strings.HasPrefix(in, quoted) {
			t.Fatalf("headerKey(%q) = %q, which is not the String the input starts with", in, got)
		}
	})
}
