package grpcinterceptor

import (
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// Selector decides which methods are guarded (server) or get a key
// (client), by full method name ("/package.Service/Method", as in
// grpc.UnaryServerInfo.FullMethod and the client interceptor's method).
type Selector func(fullMethod string) bool

// descriptorResolver finds descriptors by full name.
// *protoregistry.Files implements it.
type descriptorResolver interface {
	FindDescriptorByName(name protoreflect.FullName) (protoreflect.Descriptor, error)
}

var _ descriptorResolver = (*protoregistry.Files)(nil)

// defaultSelector returns the default [Selector]: every method except those
// whose proto options declare them safe to repeat, with idempotency_level
// IDEMPOTENT or NO_SIDE_EFFECTS, and those of gRPC's own services, which
// read state and are safe to repeat: grpc.health.v1.* (whose Check a load
// balancer or Kubernetes probe calls without a key), grpc.reflection.* and
// grpc.channelz.*. It looks each method up in files
// (protoregistry.GlobalFiles when files is nil) once and remembers the
// answer. A method it cannot find is selected. The server's WithInclude
// still guards a method it leaves out.
func defaultSelector(files descriptorResolver) Selector {
	if files == nil {
		files = protoregistry.GlobalFiles
	}
	var cache sync.Map // full method → bool
	return func(fullMethod string) bool {
		if v, ok := cache.Load(fullMethod); ok {
			return v.(bool)
		}
		selected := !infrastructure(fullMethod) && !declaredIdempotent(files, fullMethod)
		cache.Store(fullMethod, selected)
		return selected
	}
}

// SelectMethods returns a [Selector] that selects exactly the methods
// named, by full method name ("/package.Service/Method").
func SelectMethods(fullMethods ...string) Selector {
	set := make(map[string]bool, len(fullMethods))
	for _, m := range fullMethods {
		set[m] = true
	}
	return func(fullMethod string) bool { return set[fullMethod] }
}

// declaredIdempotent reports whether the method named by fullMethod
// ("/package.Service/Method") is declared with the method option
// idempotency_level = IDEMPOTENT or NO_SIDE_EFFECTS in files
// (protoregistry.GlobalFiles when nil). An unknown method is not.
func declaredIdempotent(files descriptorResolver, fullMethod string) bool {
	if files == nil {
		files = protoregistry.GlobalFiles
	}
	name, ok := methodName(fullMethod)
	if !ok {
		return false
	}
	d, err := files.FindDescriptorByName(name)
	if err != nil {
		return false
	}
	md, ok := d.(protoreflect.MethodDescriptor)
	if !ok {
		return false
	}
	switch idempotencyLevel(md) {
	case descriptorpb.MethodOptions_IDEMPOTENT, descriptorpb.MethodOptions_NO_SIDE_EFFECTS:
		return true
	}
	return false
}

// idempotencyLevel reads the method's idempotency_level option, from the
// generated options type or, for options held another way (a dynamic
// message), by field number.
func idempotencyLevel(md protoreflect.MethodDescriptor) descriptorpb.MethodOptions_IdempotencyLevel {
	switch o := md.Options().(type) {
	case *descriptorpb.MethodOptions:
		return o.GetIdempotencyLevel()
	case proto.Message:
		m := o.ProtoReflect()
		const field = 34 // google.protobuf.MethodOptions.idempotency_level
		fd := m.Descriptor().Fields().ByNumber(field)
		if fd == nil || fd.Kind() != protoreflect.EnumKind || !m.Has(fd) {
			return descriptorpb.MethodOptions_IDEMPOTENCY_UNKNOWN
		}
		return descriptorpb.MethodOptions_IdempotencyLevel(m.Get(fd).Enum())
	}
	return descriptorpb.MethodOptions_IDEMPOTENCY_UNKNOWN
}

// methodName turns "/package.Service/Method" into the method's full name,
// "package.Service.Method".
func methodName(fullMethod string) (protoreflect.FullName, bool) {
	s := strings.TrimPrefix(fullMethod, "/")
	i := strings.LastIndexByte(s, '/')
	if i <= 0 || i == len(s)-1 {
		return "", false
	}
	name := protoreflect.FullName(s[:i] + "." + s[i+1:])
	return name, name.IsValid()
}

// infrastructure reports whether fullMethod belongs to one of gRPC's own
// services: health checking, server reflection or channelz.
func infrastructure(fullMethod string) bool {
	return strings.HasPrefix(fullMethod, "/grpc.health.v1.") ||
		strings.HasPrefix(fullMethod, "/grpc.reflection.") ||
		strings.HasPrefix(fullMethod, "/grpc.channelz.")
}
