package grpcinterceptor_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// The Orders service of the key field tests, built at run time from a
// descriptor and served with dynamic messages, as this proto file would
// declare it:
//
//	syntax = "proto3";
//	package idemkit.test;
//
//	message CreateOrderRequest { string request_id = 1; string item = 2; }
//	message NumberedOrderRequest { int64 request_id = 1; string item = 2; }
//	message TaggedOrderRequest { repeated string request_id = 1; string item = 2; }
//	message PlainOrderRequest { string item = 1; }
//	message Order { string order_id = 1; string request_id = 2; }
//
//	service Orders {
//	  rpc CreateOrder(CreateOrderRequest) returns (Order);
//	  rpc CreateNumbered(NumberedOrderRequest) returns (Order);
//	  rpc CreateTagged(TaggedOrderRequest) returns (Order);
//	  rpc CreatePlain(PlainOrderRequest) returns (Order);
//	}
//
// Its message types are in a registry of their own (ordersSchema.types),
// which the server interceptor is given to rebuild a recorded Order.
const (
	createOrder    = "/idemkit.test.Orders/CreateOrder"
	createNumbered = "/idemkit.test.Orders/CreateNumbered"
	createTagged   = "/idemkit.test.Orders/CreateTagged"
	createPlain    = "/idemkit.test.Orders/CreatePlain"
)

// ordersSchema holds the Orders messages.
type ordersSchema struct {
	types                                    *protoregistry.Types
	create, numbered, tagged, plain, orderMD protoreflect.MessageDescriptor
	// in maps a method's full name to its request message.
	in map[string]protoreflect.MessageDescriptor
}

// ordersProto builds the schema once.
var ordersProto = sync.OnceValue(func() *ordersSchema {
	str := descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum()
	i64 := descriptorpb.FieldDescriptorProto_TYPE_INT64.Enum()
	one := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()
	many := descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
	field := func(name string, n int32, typ *descriptorpb.FieldDescriptorProto_Type, label *descriptorpb.FieldDescriptorProto_Label) *descriptorpb.FieldDescriptorProto {
		return &descriptorpb.FieldDescriptorProto{Name: proto.String(name), JsonName: proto.String(name), Number: proto.Int32(n), Type: typ, Label: label}
	}
	message := func(name string, fields ...*descriptorpb.FieldDescriptorProto) *descriptorpb.DescriptorProto {
		return &descriptorpb.DescriptorProto{Name: proto.String(name), Field: fields}
	}
	method := func(name, in string) *descriptorpb.MethodDescriptorProto {
		return &descriptorpb.MethodDescriptorProto{Name: proto.String(name), InputType: proto.String(".idemkit.test." + in), OutputType: proto.String(".idemkit.test.Order")}
	}
	fdp := &descriptorpb.FileDescriptorProto{
		Name:    proto.String("idemkit/test/orders.proto"),
		Package: proto.String("idemkit.test"),
		Syntax:  proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{
			message("CreateOrderRequest", field("request_id", 1, str, one), field("item", 2, str, one)),
			message("NumberedOrderRequest", field("request_id", 1, i64, one), field("item", 2, str, one)),
			message("TaggedOrderRequest", field("request_id", 1, str, many), field("item", 2, str, one)),
			message("PlainOrderRequest", field("item", 1, str, one)),
			message("Order", field("order_id", 1, str, one), field("request_id", 2, str, one)),
		},
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name: proto.String("Orders"),
			Method: []*descriptorpb.MethodDescriptorProto{
				method("CreateOrder", "CreateOrderRequest"),
				method("CreateNumbered", "NumberedOrderRequest"),
				method("CreateTagged", "TaggedOrderRequest"),
				method("CreatePlain", "PlainOrderRequest"),
			},
		}},
	}
	fd, err := protodesc.NewFile(fdp, nil)
	if err != nil {
		panic(err)
	}
	s := &ordersSchema{types: new(protoregistry.Types)}
	msgs := fd.Messages()
	s.create, s.numbered, s.tagged, s.plain, s.orderMD = msgs.ByName("CreateOrderRequest"), msgs.ByName("NumberedOrderRequest"),
		msgs.ByName("TaggedOrderRequest"), msgs.ByName("PlainOrderRequest"), msgs.ByName("Order")
	for i := range msgs.Len() {
		if err := s.types.RegisterMessage(dynamicpb.NewMessageType(msgs.Get(i))); err != nil {
			panic(err)
		}
	}
	s.in = map[string]protoreflect.MessageDescriptor{
		createOrder: s.create, createNumbered: s.numbered, createTagged: s.tagged, createPlain: s.plain,
	}
	return s
})

// request returns a request of method's message with its item set and its
// request_id set to id: a string, an int64 or a []string, as the message
// declares it (nil leaves it unset).
func (s *ordersSchema) request(method string, id any, item string) *dynamicpb.Message {
	m := dynamicpb.NewMessage(s.in[method])
	fields := m.Descriptor().Fields()
	m.Set(fields.ByName("item"), protoreflect.ValueOfString(item))
	switch v := id.(type) {
	case string:
		m.Set(fields.ByName("request_id"), protoreflect.ValueOfString(v))
	case int64:
		m.Set(fields.ByName("request_id"), protoreflect.ValueOfInt64(v))
	case []string:
		l := m.Mutable(fields.ByName("request_id")).List()
		for _, e := range v {
			l.Append(protoreflect.ValueOfString(e))
		}
	}
	return m
}

// stringField returns m's string field name ("" when unset).
func stringField(m proto.Message, name string) string {
	r := m.ProtoReflect()
	return r.Get(r.Descriptor().Fields().ByName(protoreflect.Name(name))).String()
}

// orderAttempt is one call the Orders service saw.
type orderAttempt struct {
	method    string
	requestID string   // the request_id field, when a string
	keyMD     []string // the idempotency-key metadata
}

// ordersService serves Orders: each execution answers an Order numbered
// by the executions so far, echoing the request's request_id. With
// failFirst, the first attempt of each request_id (or metadata key)
// answers Unavailable.
type ordersService struct {
	executions atomic.Int64
	failFirst  bool

	mu       sync.Mutex
	attempts []orderAttempt
}

func (o *ordersService) serve(ctx context.Context, method string, req *dynamicpb.Message) (proto.Message, error) {
	a := orderAttempt{method: method, keyMD: metadata.ValueFromIncomingContext(ctx, keyMD)}
	if fd := req.Descriptor().Fields().ByName("request_id"); fd != nil && fd.Kind() == protoreflect.StringKind && !fd.IsList() {
		a.requestID = req.Get(fd).String()
	}
	o.mu.Lock()
	first := true
	for _, b := range o.attempts {
		if b.requestID == a.requestID && slices.Equal(b.keyMD, a.keyMD) {
			first = false
		}
	}
	o.attempts = append(o.attempts, a)
	o.mu.Unlock()
	n := o.executions.Add(1)
	if o.failFirst && first {
		return nil, status.Error(codes.Unavailable, "the first attempt fails on purpose")
	}
	resp := dynamicpb.NewMessage(ordersProto().orderMD)
	resp.Set(resp.Descriptor().Fields().ByName("order_id"), protoreflect.ValueOfString("order-"+strconv.FormatInt(n, 10)))
	resp.Set(resp.Descriptor().Fields().ByName("request_id"), protoreflect.ValueOfString(a.requestID))
	return resp, nil
}

// seen returns the attempts the service saw.
func (o *ordersService) seen() []orderAttempt {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]orderAttempt(nil), o.attempts...)
}

// registerOrders registers o as the Orders service of srv.
func registerOrders(srv *grpc.Server, o *ordersService) {
	schema := ordersProto()
	desc := grpc.ServiceDesc{ServiceName: "idemkit.test.Orders", HandlerType: (*any)(nil), Metadata: "idemkit/test/orders.proto"}
	for _, full := range []string{createOrder, createNumbered, createTagged, createPlain} {
		in := schema.in[full]
		desc.Methods = append(desc.Methods, grpc.MethodDesc{
			MethodName: full[strings.LastIndexByte(full, '/')+1:],
			Handler: func(_ any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
				req := dynamicpb.NewMessage(in)
				if err := dec(req); err != nil {
					return nil, err
				}
				handler := func(ctx context.Context, req any) (any, error) {
					return o.serve(ctx, full, req.(*dynamicpb.Message))
				}
				if interceptor == nil {
					return handler(ctx, req)
				}
				return interceptor(ctx, req, &grpc.UnaryServerInfo{Server: o, FullMethod: full}, handler)
			},
		})
	}
	srv.RegisterService(&desc, o)
}

// order is one answer of the Orders service.
type order struct {
	resp   *dynamicpb.Message
	err    error
	header metadata.MD
}

func (o order) id() string { return stringField(o.resp, "order_id") }

// call sends req to method over conn.
func call(ctx context.Context, conn *grpc.ClientConn, method string, req proto.Message, opts ...grpc.CallOption) order {
	o := order{resp: dynamicpb.NewMessage(ordersProto().orderMD)}
	o.err = conn.Invoke(ctx, method, req, o.resp, append(opts, grpc.Header(&o.header))...)
	return o
}

// serveOrders starts the Orders service o behind the unary interceptors
// chain (the first one outermost) and returns its address.
func serveOrders(t *testing.T, o *ordersService, chain ...grpc.UnaryServerInterceptor) string {
	t.Helper()
	return serveChain(t, func(s *grpc.Server) { registerOrders(s, o) }, chain...)
}
