package connectinterceptor

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/idemkit/idemkit/middleware"
)

// record is a recorded answer, as JSON: the response message (Type and
// Message) or the error (Code, Error, Details), and the headers and
// trailers to restore.
type record struct {
	Type    protoreflect.FullName `json:"type,omitempty"`
	Message []byte                `json:"message,omitempty"`
	Code    connect.Code          `json:"code,omitempty"`
	Error   string                `json:"error,omitempty"`
	Details []recordedDetail      `json:"details,omitempty"`
	Header  http.Header           `json:"header,omitempty"`
	Trailer http.Header           `json:"trailer,omitempty"`
}

// recordedDetail is an error detail: its message's full name and bytes.
type recordedDetail struct {
	Type  string `json:"type"`
	Value []byte `json:"value"`
}

// verdict encodes the outcome of a call for the record, unless store is
// false: the response or the error, with the headers and trailers the
// handler set (through the response, the error's metadata or the call's
// info). oversized says that it is not replayable only for its size.
func (s *server) verdict(ctx context.Context, info connect.CallInfo, resp connect.AnyResponse, ce *connect.Error, store bool) (res middleware.Result, oversized bool) {
	if !store {
		return forget(ctx), false
	}
	var rec record
	if info != nil {
		rec.Header, rec.Trailer = s.kept(nil, info.ResponseHeader()), s.kept(nil, info.ResponseTrailer())
	}
	if ce != nil {
		rec.Code, rec.Error = ce.Code(), ce.Message()
		for _, d := range ce.Details() {
			rec.Details = append(rec.Details, recordedDetail{Type: d.Type(), Value: d.Bytes()})
		}
		rec.Header = s.kept(rec.Header, ce.Meta())
	} else {
		m, ok := resp.Any().(proto.Message)
		if !ok {
			return middleware.Result{NotReplayable: true}, false
		}
		b, merr := proto.Marshal(m)
		if merr != nil {
			return middleware.Result{NotReplayable: true}, false
		}
		rec.Type, rec.Message = m.ProtoReflect().Descriptor().FullName(), b
		if _, err := s.cfg.types.FindMessageByName(rec.Type); err != nil {
			// No replay could rebuild it: say so now rather than keep a
			// record that is unreadable until it expires.
			s.cfg.logger.ErrorContext(ctx, "connectinterceptor: the response type is not in the message types; recorded as not replayable",
				slog.String("type", string(rec.Type)))
			return middleware.Result{NotReplayable: true}, false
		}
		rec.Header, rec.Trailer = s.kept(rec.Header, resp.Header()), s.kept(rec.Trailer, resp.Trailer())
	}
	b, merr := json.Marshal(rec)
	switch {
	case merr != nil:
		return middleware.Result{NotReplayable: true}, false
	case len(b) > s.cfg.maxResponse:
		return middleware.Result{NotReplayable: true}, true
	}
	return middleware.Result{Value: b}, false
}

// kept adds to into the fields of from that are recorded and replayed:
// not the protocols' own nor credentials (Authorization, cookies and the
// headers WithCredentialHeaders names).
func (s *server) kept(into, from http.Header) http.Header {
	for name, values := range from {
		switch name = http.CanonicalHeaderKey(name); {
		case len(values) == 0, reserved(name), name == replayedHeader,
			name == credentialsHeader, name == "Proxy-Authorization", name == "Cookie", name == "Set-Cookie",
			slices.Contains(s.cfg.credentialHeaders, name):
			continue
		}
		if into == nil {
			into = make(http.Header, len(from))
		}
		into[name] = append(into[name], values...)
	}
	return into
}

// reserved reports whether the canonical header name belongs to the
// protocols (Content-Type, Connect-*, Grpc-*, ...).
func reserved(name string) bool {
	return name == "Content-Type" || name == "Content-Encoding" || name == "Content-Length" ||
		strings.HasPrefix(name, "Connect-") || strings.HasPrefix(name, "Grpc-")
}

// replayed is a replayed response: connect's handler sends what Any,
// Header and Trailer return. AnyResponse is embedded only for the
// method connect keeps to itself (a replay has no *connect.Response of
// the handler's type to hand back).
type replayed struct {
	connect.AnyResponse
	msg             proto.Message
	header, trailer http.Header
}

func (r *replayed) Any() any             { return r.msg }
func (r *replayed) Header() http.Header  { return r.header }
func (r *replayed) Trailer() http.Header { return r.trailer }

// replay rebuilds a recorded answer, marked Idempotent-Replayed.
func (s *server) replay(ctx context.Context, value []byte) (connect.AnyResponse, error) {
	var rec record
	err := json.Unmarshal(value, &rec)
	var msg proto.Message
	if err == nil && rec.Code == 0 {
		var mt protoreflect.MessageType
		if mt, err = s.cfg.types.FindMessageByName(rec.Type); err == nil {
			msg = mt.New().Interface()
			err = proto.Unmarshal(rec.Message, msg)
		}
	}
	if err != nil {
		s.cfg.logger.ErrorContext(ctx, "connectinterceptor: a recorded answer cannot be rebuilt", slog.String("error", err.Error()))
		return nil, s.refusal(connect.CodeUnavailable, "IDEMPOTENCY_RECORD_UNREADABLE",
			"the call with this idempotency key ran, but its recorded answer cannot be rebuilt by this server", s.cfg.retryDelay)
	}
	header := s.kept(nil, rec.Header)
	if header == nil {
		header = make(http.Header, 1)
	}
	header.Set(replayedHeader, "true")
	if rec.Code == 0 {
		return &replayed{AnyResponse: connect.NewResponse(new(struct{})), msg: msg, header: header, trailer: s.kept(nil, rec.Trailer)}, nil
	}
	e := connect.NewError(rec.Code, errors.New(rec.Error))
	for _, d := range rec.Details {
		if ed, err := connect.NewErrorDetail(&anypb.Any{TypeUrl: "type.googleapis.com/" + d.Type, Value: d.Value}); err == nil {
			e.AddDetail(ed)
		}
	}
	for name, values := range header {
		e.Meta()[name] = values
	}
	return nil, e
}
