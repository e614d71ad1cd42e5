package grpcinterceptor

import (
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// descriptorResolver finds descriptors by full name.
// *protoregistry.Files implements it.
type descriptorResolver interface {
	FindDescriptorByName(name protoreflect.FullName) (protoreflect.Descriptor, error)
}

var _ descriptorResolver = (*protoregistry.Files)(nil)

// defaultSelector is the default of WithSelector; it looks each method up
// in files (protoregistry.GlobalFiles when nil) once. A method it cannot
// find is selected.
func defaultSelector(files descriptorResolver) func(string) bool {
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

// SelectMethods returns a selector for [WithSelector] that selects exactly
// the methods named ("/package.Service/Method").
func SelectMethods(fullMethods ...string) func(fullMethod string) bool {
	set := make(map[string]bool, len(fullMethods))
	for _, m := range fullMethods {
		set[m] = true
	}
	return func(fullMethod string) bool { return set[fullMethod] }
}

// declaredIdempotent reports whether fullMethod is declared
// idempotency_level IDEMPOTENT or NO_SIDE_EFFECTS in files.
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

// idempotencyLevel reads the method's idempotency_level option, by field
// number for options held as a dynamic message.
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

// infrastructure reports whether fullMethod belongs to gRPC's health,
// reflection or channelz services, which a probe calls without a key.
func infrastructure(fullMethod string) bool {
	return strings.HasPrefix(fullMethod, "/grpc.health.v1.") ||
		strings.HasPrefix(fullMethod, "/grpc.reflection.") ||
		strings.HasPrefix(fullMethod, "/grpc.channelz.")
}
